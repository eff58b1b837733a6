#!/usr/bin/env python3
"""Writes tests/golden/<model>.json: reference outputs for golden_test.

The reference is HF transformers (an implementation we did not write) run on
the very GGUF file our engine loads, in float32 on the CPU (transformers
dequantizes every tensor, Q4_1 or Q4_K/Q6_K, to float32 itself). --model
picks one of MODELS (the names of tools/models.sh); each has its own prompts,
probe ids and number of greedy tokens. For every prompt the file records the
tokenizer's ids (for a chat, also the text apply_chat_template renders), the
top-5 (id, logit) of the first 8 greedy steps, the logits of a fixed probe set
of token ids at the first step, and num_greedy greedy tokens. A second list
holds tokenizer-only cases.

Greedy decoding here is a plain loop over the model's forward with its KV
cache: argmax of the raw logits (torch.argmax: the lowest id wins a tie), no
repetition penalty, no logits processors, and no stop on EOS, so every case
has exactly num_greedy generated tokens. (model.generate with min_new_tokens
would push EOS to -inf, which is not what a raw greedy engine computes.)

Run through tools/make_golden.sh, which makes the pinned venv. Offline: the
model and tokenizer come from the GGUF file only, never from the hub.
"""

import argparse
import hashlib
import json
import os
import platform
import random
import re
import sys
import unicodedata

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

SCRIPT_VERSION = "make_golden/1"
FORMAT_VERSION = 1
NUM_TOP_STEPS = 8
TOP_K = 5
TORCH_THREADS = 2

# SmolLM2: the same for every case: logits of these ids at the first step are
# recorded. Specials, a few frequent tokens, and a spread over the whole
# vocabulary.
SMOLLM2_PROBE_IDS = [0, 1, 2, 3, 17, 28, 198, 216, 253, 260, 284, 314, 357, 411,
             476, 701, 1024, 2048, 3141, 4096, 6502, 8191, 12000, 16384,
             20011, 24576, 30000, 32768, 38917, 42000, 47000, 49151]

LONG_TEXT = (
    "The history of the lighthouse is closely tied to the history of "
    "seafaring. Long before electric lamps, coastal communities lit fires on "
    "hilltops to guide ships away from rocks and toward safe harbors. The "
    "Pharos of Alexandria, completed around 280 BC, was among the tallest "
    "structures of the ancient world and served as a model for centuries. "
    "In the medieval period, monasteries and port towns maintained simple "
    "towers with open flames, while merchants paid tolls to fund their "
    "upkeep. The eighteenth century brought reflectors made of polished "
    "metal, and in 1822 Augustin Fresnel introduced a lens built from "
    "concentric rings of glass prisms that could throw a beam more than "
    "twenty miles. Keepers lived in isolated stations, trimming wicks, "
    "winding clockwork that turned the lens, and recording the weather in "
    "logbooks. Storms could cut them off for weeks, and many stations kept "
    "gardens and goats to survive. With the arrival of electricity, radio "
    "beacons, and later satellite navigation, most lighthouses were "
    "automated during the twentieth century. Today many of them are museums, "
    "hotels, or protected landmarks, yet a surprising number still flash "
    "their characteristic patterns every night, because a light that a "
    "sailor can see with their own eyes remains the most reliable signal of "
    "all. Summarize the passage above in two sentences:"
)

RAG_TEXT = (
    "Context: The Rhine is a river that begins in the Swiss Alps, flows "
    "through Liechtenstein, Austria, Germany, France and the Netherlands, and "
    "empties into the North Sea. It is about 1,230 kilometres long. Major "
    "cities on the Rhine include Basel, Strasbourg, Cologne and Rotterdam.\n\n"
    "Question: Into which sea does the Rhine flow, and which Dutch city lies "
    "on it?\nAnswer:"
)


def chat(*turns):
  """[(role, content), ...] -> list of message dicts."""
  return [{"role": r, "content": c} for r, c in turns]


# Model cases. Either "text" (plain text, special tokens not parsed) or
# "messages" (rendered with the GGUF's chat template, add_generation_prompt=
# True, then tokenized with special tokens parsed). Both are tokenized with
# add_special_tokens=False: the GGUF says tokenizer.ggml.add_bos_token=false,
# which HF's GGUF loader ignores (it would prepend <|im_start|>, id 1, and
# also misreports eos as id 1), while llama.cpp and the original SmolLM2
# tokenizer add nothing.
SMOLLM2_CASES = [
    ("chat_capital", chat(("user", "What is the capital of France?"))),
    ("chat_system_tips", chat(
        ("system", "You are a concise assistant."),
        ("user", "Give me three tips for writing good unit tests."))),
    ("chat_multiturn", chat(
        ("user", "Hi! Can you help me plan a picnic?"),
        ("assistant", "Of course! Where and when would you like to have it?"),
        ("user", "Saturday afternoon in the park, for four people."))),
    ("chat_code", chat(
        ("user", "Write a Python function that reverses a string."))),
    ("rag_rhine", RAG_TEXT),
    ("code_python", 'def fibonacci(n: int) -> int:\n    """Return the n-th '
                    'Fibonacci number."""\n'),
    ("code_c", "#include <stdio.h>\n\nint main(void) {\n    int sum = 0;\n"
               "    for (int i = 0; i < 10; ++i) {\n"),
    ("json", '{"name": "Ada Lovelace", "born": 1815, "languages": ["'),
    ("french", "Bonjour ! Je m'appelle Marie et j'habite à Lyon. Mon "
               "passe-temps préféré est"),
    ("german", "Die Straße führt über die Brücke zum Schloss. Im Frühling "
               "blühen dort die"),
    ("chinese", "北京是中国的首都，也是一座历史悠久的城市。它的著名景点包括"),
    ("japanese", "東京は日本の首都です。春になると、桜の花が"),
    ("russian", "Москва — столица России. Самая известная площадь города —"),
    ("arabic", "القاهرة هي عاصمة مصر، وتقع على ضفاف نهر"),
    ("emoji", "My favourite foods are 🍕 pizza, 🌮 tacos and 🍣 sushi. "
              "Family: 👨‍👩‍👧‍👦 Flags: 🇫🇷🇯🇵 Mood: 😀👍"),
    ("digits_sum", "12345 + 678 = "),
    ("numbers_mixed", "In 1969, 3 astronauts flew 384,400 km; pi = 3.14159265 "
                      "and 2^10 = 1024. Call 555-0123 at 07:45 or"),
    ("whitespace", "    indented line\n\n\n\tTabbed\t\tvalue   trailing   "
                   "\n  \n    return"),
    ("markdown_list", "## Shopping list\n\n- apples\n- bread\n- "),
    ("story_start", "Once upon a time, in a small village by the sea, there "
                    "lived"),
    ("long_lighthouse", LONG_TEXT),
]


def random_unicode(seed, n):
  """A reproducible string of n code points from assorted scripts/blocks."""
  rng = random.Random(seed)
  ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF),
            (0x590, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x3040, 0x30FF),
            (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1F64F),
            (0x1D400, 0x1D7FF), (0x2000, 0x206F), (0xFF00, 0xFFEF)]
  out = []
  for _ in range(n):
    lo, hi = rng.choice(ranges)
    out.append(chr(rng.randint(lo, hi)))
  return "".join(out)


# Tokenizer-only cases: (name, text, parse_special, add_special_tokens).
TOKENIZER_CASES = [
    ("empty", "", False, False),
    ("single_space", " ", False, False),
    ("leading_spaces", "  leading spaces", False, False),
    ("many_spaces", "a          b", False, False),
    ("tabs", "\tone\t\ttwo\t\t\tthree\t", False, False),
    ("newlines", "\n\n\n", False, False),
    ("crlf", "line one\r\nline two\r\n\r\n", False, False),
    ("mixed_ws", " \t \n \u00a0 \u3000 x", False, False),
    ("contractions", "I'm sure you'll see they've said it's OK, don't you?",
     False, False),
    ("digits_long", "31415926535897932384626433 and 007 and 1,000,000.50",
     False, False),
    ("zwj_family", "👨‍👩‍👧‍👦👩‍❤️‍💋‍👨🏳️‍🌈🧑🏽‍💻", False, False),
    ("emoji_skin_flags", "👍🏿👋🏻🇺🇸🇩🇪🇯🇵✌️", False, False),
    ("combining", "e\u0301 n\u0303 a\u0308\u0304 \u1e9b\u0323", False, False),
    ("random_unicode_1", random_unicode(1, 40), False, False),
    ("random_unicode_2", random_unicode(2, 80), False, False),
    ("random_unicode_3", random_unicode(3, 120), False, False),
    ("mixed_scripts", "Hello мир 世界 مرحبا שלום नमस्ते こんにちは 안녕",
     False, False),
    ("special_parsed", "<|im_start|>user\nHello<|im_end|>\n", True, False),
    ("special_as_text", "<|im_start|>user\nHello<|im_end|>\n", False, False),
    ("special_inline", "a<|endoftext|>b <|im_end|> c<file_sep>", True, False),
    ("special_lookalike", "<|im_start |> <im_start> <|unknown|>", True, False),
    ("code_indent", "class A:\n    def f(self):\n        return {'k': [1, 2]}\n",
     False, False),
    ("url_email", "see https://example.com/a?b=c&d=e#f or mail x.y@z.org",
     False, False),
]

# Qwen2.5-Coder: code and chat, few and short (the 1.5B model in float32 on
# two cores is slow). The chats without a system message get the template's
# default one ("You are Qwen, created by Alibaba Cloud. ..."); one content
# ends in a newline, which Qwen's template keeps (no trim). No text spells a
# control token other than <|endoftext|>, <|im_start|> and <|im_end|>: HF's
# GGUF loader makes only those three added tokens (see QWEN_TOKENIZER_NOTE).
QWEN_CODER_CASES = [
    ("chat_palindrome", chat(
        ("user", "Write a Python function that checks whether a string is a "
                 "palindrome."))),
    ("chat_system_cpp", chat(
        ("system", "You are a terse C++ expert. Answer with code only."),
        ("user", "Reverse a std::vector<int> v in place."))),
    ("chat_multiturn_sql", chat(
        ("user", "I have a table orders(id, customer_id, total)."),
        ("assistant", "Got it. What would you like to know about it?"),
        ("user", "Write a SQL query for the top 3 customers by total "
                 "spend."))),
    ("chat_explain_code", chat(
        ("user", "What does this print?\n```python\nprint([x * x for x in "
                 "range(5) if x % 2])\n```\n"))),
    ("code_python", "def quicksort(arr: list[int]) -> list[int]:\n"
                    '    """Sort arr with quicksort; return a new list."""\n'),
    ("code_cpp", "#include <string>\n#include <vector>\n\n// Splits s at "
                 "every occurrence of sep.\nstd::vector<std::string> "
                 "Split(const std::string& s, char sep) {\n"),
]

def nfc_cases(cases):
  """The cases with their text in Unicode NFC (renamed <name>_nfc if that
  changed it).

  Qwen's tokenizer (HF's GGUFQwen2Converter, as Qwen's own tokenizer.json)
  normalizes to NFC before splitting; llama.cpp and our engine do not, so
  text that is not in NFC ("e" + U+0301) tokenizes differently there. Real
  text is nearly always NFC already; the golden cases check the rest of the
  tokenizer on NFC text.
  """
  out = []
  for name, text, parse_special, add_special in cases:
    nfc = unicodedata.normalize("NFC", text)
    out.append((name if nfc == text else name + "_nfc", nfc, parse_special,
                add_special))
  return out


# Qwen2 splits every digit and matches contractions in any case; the shared
# cases (in NFC) plus a few that exercise that (tokenizer only, cheap).
QWEN_CODER_TOKENIZER_CASES = nfc_cases(TOKENIZER_CASES) + [
    ("digits_run", "x = 1234567890 + 0.000125e-10", False, False),
    ("contractions_upper", "I'M SURE YOU'LL SEE THEY'VE SAID IT'S OK",
     False, False),
    ("code_cpp_indent", "int main() {\n\tfor (;;) {\n\t\treturn 0;\n\t}\n}\n",
     False, False),
    ("code_rust", "fn main() -> Result<(), Box<dyn Error>> {\n    let v: "
                  "Vec<u8> = vec![0xFF; 16];\n    Ok(())\n}", False, False),
    ("chat_specials", "<|im_start|>system\nYou are Qwen.<|im_end|>\n"
                      "<|im_start|>assistant\n<|endoftext|>", True, False),
]

QWEN_PROBE_IDS = [0, 1, 2, 11, 13, 198, 220, 271, 284, 330, 508, 1024, 2048,
                  4096, 8192, 12345, 16384, 24576, 32768, 50000, 65536, 80000,
                  100000, 120000, 131072, 150000, 151643, 151644, 151645,
                  151659, 151664, 151935]

SMOLLM2_TOKENIZER_NOTE = (
    "HF fast tokenizer converted from the GGUF vocab and merges (ByteLevel "
    "BPE, GPT-2 regex); no vocab token joins a digit to anything, so this "
    "equals the 'smollm' pre-tokenizer's per-digit split. "
    "add_special_tokens=False everywhere (GGUF add_bos_token=false). "
    "parse_special=False means special-token text is encoded as plain text "
    "(HF split_special_tokens=True).")

QWEN_TOKENIZER_NOTE = (
    "HF fast tokenizer converted from the GGUF vocab and merges "
    "(GGUFQwen2Converter: NFC normalizer, the Qwen2 split regex, ByteLevel "
    "BPE). Only <|endoftext|>, <|im_start|> and <|im_end|> are added tokens "
    "there; the GGUF's other control and user-defined tokens (<|fim_prefix|>, "
    "<tool_call>, ...) are plain BPE text to it, so no case spells them. "
    "add_special_tokens=False everywhere (GGUF add_bos_token=false). "
    "parse_special=False means special-token text is encoded as plain text "
    "(HF split_special_tokens=True).")

HF_LOAD_NOTE = (
    "native: AutoModelForCausalLM/AutoTokenizer with gguf_file=, "
    "dtype=float32; every HF weight checked equal to gguf.quants.dequantize "
    "of its tensor")


class GoldenModel:
  """One model the generator knows: its file and what to record for it."""

  def __init__(self, file, out, cases, tokenizer_cases, probe_ids,
               num_greedy, tokenizer_note, hf_load):
    self.file = file  # name in the model cache (tools/models.sh)
    self.out = out  # default output, in tests/golden/
    self.cases = cases  # MODEL_CASES-style [(name, text or messages)]
    self.tokenizer_cases = tokenizer_cases
    self.probe_ids = probe_ids  # logits recorded at the first step
    self.num_greedy = num_greedy  # greedy tokens per case
    self.tokenizer_note = tokenizer_note
    self.hf_load = hf_load


# Keyed by tools/models.sh's names (tools/make_golden.sh --model=NAME).
MODELS = {
    "smollm2-135m": GoldenModel(
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        out="smollm2_q4_1.json",
        cases=SMOLLM2_CASES,
        tokenizer_cases=TOKENIZER_CASES,
        probe_ids=SMOLLM2_PROBE_IDS,
        num_greedy=64,
        tokenizer_note=SMOLLM2_TOKENIZER_NOTE,
        hf_load=HF_LOAD_NOTE + " (Q/K rows un-permuted), lm_head tied to "
                "token_embd"),
    "qwen2.5-coder-1.5b": GoldenModel(
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        out="qwen2.5-coder-1.5b_q4_k_m.json",
        cases=QWEN_CODER_CASES,
        tokenizer_cases=QWEN_CODER_TOKENIZER_CASES,
        probe_ids=QWEN_PROBE_IDS,
        num_greedy=32,
        tokenizer_note=QWEN_TOKENIZER_NOTE,
        hf_load=HF_LOAD_NOTE + " (Q4_K/Q6_K; qwen2 Q/K rows are not "
                "permuted; q/k/v biases F32), lm_head = output.weight "
                "(untied)"),
}


def sha256_of(path):
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def write_compact_json(doc, path):
  """Writes doc as indented JSON with every list of numbers on one line
  (keeps reference files small and their diffs readable)."""
  text = json.dumps(doc, ensure_ascii=False, indent=1)
  text = re.sub(r"\[[-0-9.eE,\s]*\]",
                lambda m: "[" + ", ".join(m.group(0)[1:-1].split()).replace(
                    ",,", ",") + "]", text)
  json.loads(text)  # still valid
  with open(path, "w", encoding="utf-8") as f:
    f.write(text + "\n")


def r6(x):
  """A float32 logit, rounded to 6 decimals (tolerance in the test is 1e-3)."""
  return round(float(x), 6)


def encode(tok, text, parse_special, add_special_tokens):
  """HF ids for text. parse_special=False encodes special-token text as text."""
  return tok(text, add_special_tokens=add_special_tokens,
             split_special_tokens=not parse_special)["input_ids"]


def unpermute_qk(w, n_head):
  """Undoes the Q/K row permutation of llama.cpp's HF->GGUF converter."""
  half = w.shape[0] // n_head // 2
  return w.reshape(n_head, half, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


@torch.no_grad()
def check_weights(model, path):
  """Asserts HF's weights equal gguf.quants.dequantize of every GGUF tensor.

  An independent look at the loader: if this passes, a mismatch between HF
  and our engine is in the forward pass, not in reading the file.
  Returns the number of tensors compared.
  """
  cfg = model.config
  params = dict(model.named_parameters())
  names = {"token_embd.weight": "model.embed_tokens.weight",
           "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
  per_layer = {"attn_norm": "input_layernorm", "ffn_norm":
               "post_attention_layernorm", "attn_q": "self_attn.q_proj",
               "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj",
               "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
  # llama.cpp's converter permutes Q/K rows for llama only (not qwen2).
  permuted = cfg.model_type == "llama"
  reader = gguf.GGUFReader(path)
  n = 0
  for t in reader.tensors:
    if t.name in names:
      hf = names[t.name]
    else:
      _, layer, kind, param = t.name.split(".")  # param: weight or bias
      hf = f"model.layers.{layer}.{per_layer[kind]}.{param}"
    w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    if permuted and t.name.endswith("attn_q.weight"):
      w = unpermute_qk(w, cfg.num_attention_heads)
    elif permuted and t.name.endswith("attn_k.weight"):
      w = unpermute_qk(w, cfg.num_key_value_heads)
    got = params[hf].detach().numpy()
    assert got.shape == w.shape, (t.name, got.shape, w.shape)
    assert np.array_equal(got, w), f"{t.name}: HF weights != gguf dequant"
    n += 1
  if "output.weight" not in [t.name for t in reader.tensors]:
    assert model.lm_head.weight.data_ptr() == \
        model.model.embed_tokens.weight.data_ptr(), "lm_head is not tied"
  return n


@torch.no_grad()
def greedy(model, ids, num_greedy):
  """Runs the raw greedy loop; returns (first_logits, tops, greedy, margins)."""
  input_ids = torch.tensor([ids], dtype=torch.long)
  out = model(input_ids=input_ids, use_cache=True)
  past = out.past_key_values
  logits = out.logits[0, -1].float()
  first = logits.clone()
  tops, toks, margins = [], [], []
  for step in range(num_greedy):
    vals, idx = torch.topk(logits, TOP_K)
    nxt = int(torch.argmax(logits))
    assert nxt == int(idx[0]) or float(logits[nxt]) == float(vals[0])
    margins.append(r6(vals[0] - vals[1]))
    if step < NUM_TOP_STEPS:
      tops.append({"ids": [int(i) for i in idx],
                   "logits": [r6(v) for v in vals]})
    toks.append(nxt)
    if step + 1 == num_greedy:
      break
    out = model(input_ids=torch.tensor([[nxt]], dtype=torch.long),
                past_key_values=past, use_cache=True)
    past = out.past_key_values
    logits = out.logits[0, -1].float()
  return first, tops, toks, margins


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  default_dir = os.environ.get(
      "LOOKAHEAD_MODEL_DIR",
      os.path.join(os.path.expanduser("~"), ".cache", "lookahead", "models"))
  ap.add_argument("--model", default="smollm2-135m", choices=sorted(MODELS),
                  help="which model (tools/models.sh's names)")
  ap.add_argument("--model_dir", default=default_dir)
  ap.add_argument("--gguf", default="",
                  help="the model file (default: --model_dir/<its file>)")
  ap.add_argument("--out", default="",
                  help="default: tests/golden/<the model's file>.json")
  ap.add_argument("--only", default="", help="comma-separated case names")
  args = ap.parse_args()

  spec = MODELS[args.model]
  here = os.path.dirname(os.path.abspath(__file__))
  out_path = args.out or os.path.join(here, "..", "tests", "golden", spec.out)
  path = args.gguf or os.path.join(args.model_dir, spec.file)
  if os.path.basename(path) != spec.file:
    sys.exit(f"{path}: expected a file named {spec.file} for {args.model}")
  if not os.path.exists(path):
    sys.exit(f"model not found: {path} (run tools/setup.sh "
             f"--model={args.model})")
  model_dir = os.path.dirname(os.path.abspath(path))
  torch.set_num_threads(TORCH_THREADS)
  torch.manual_seed(0)

  tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=spec.file)
  model = AutoModelForCausalLM.from_pretrained(
      model_dir, gguf_file=spec.file, dtype=torch.float32)
  model.eval()
  vocab = model.config.vocab_size
  print(f"weights: {check_weights(model, path)} GGUF tensors equal HF's")

  only = set(filter(None, args.only.split(",")))
  cases = []
  for name, prompt in spec.cases:
    if only and name not in only:
      continue
    case = {"name": name}
    if isinstance(prompt, list):
      text = tok.apply_chat_template(prompt, tokenize=False,
                                     add_generation_prompt=True)
      case.update(kind="chat", messages=prompt, prompt=text,
                  parse_special=True, add_special_tokens=False)
    else:
      text = prompt
      case.update(kind="text", prompt=text, parse_special=False,
                  add_special_tokens=False)
    ids = encode(tok, text, case["parse_special"], case["add_special_tokens"])
    bare = encode(tok, text, case["parse_special"], False)
    case["bos_added"] = len(ids) == len(bare) + 1 and ids[1:] == bare
    case["token_ids"] = ids
    first, tops, toks, margins = greedy(model, ids, spec.num_greedy)
    assert first.shape[0] == vocab
    case["first_step"] = {
        "argmax": int(torch.argmax(first)),
        "probe_logits": [r6(first[i]) for i in spec.probe_ids],
    }
    case["top_steps"] = tops
    case["greedy_ids"] = toks
    case["greedy_margins"] = margins
    case["greedy_text"] = tok.decode(toks)
    if min(margins) < 0.005:  # 5x the C++ test's logit tolerance
      print(f"WARNING: {name}: a greedy step is a near-tie (margin "
            f"{min(margins)}); pick another prompt", flush=True)
    print(f"{name}: {len(ids)} prompt tokens, min margin "
          f"{min(margins):.4f}, {case['greedy_text'][:60]!r}", flush=True)
    cases.append(case)

  tcases = []
  for name, text, parse_special, add_special in spec.tokenizer_cases:
    if only and name not in only:
      continue
    tcases.append({"name": name, "text": text, "parse_special": parse_special,
                   "add_special_tokens": add_special,
                   "token_ids": encode(tok, text, parse_special, add_special)})

  doc = {
      "format_version": FORMAT_VERSION,
      "generator": {
          "script_version": SCRIPT_VERSION,
          "python": platform.python_version(),
          "transformers": transformers.__version__,
          "torch": torch.__version__,
          "gguf": getattr(gguf, "__version__", None) or
                  __import__("importlib.metadata").metadata.version("gguf"),
          "numpy": np.__version__,
          "tokenizers": __import__("tokenizers").__version__,
          "model_file": spec.file,
          "model_sha256": sha256_of(path),
          "model_bytes": os.path.getsize(path),
          "hf_load": spec.hf_load,
          "torch_threads": TORCH_THREADS,
          "greedy": "raw argmax loop with KV cache (lowest id wins ties), no "
                    "repetition penalty, no logits processors, no EOS stop",
          "chat": "apply_chat_template(add_generation_prompt=True) from the "
                  "GGUF's tokenizer.chat_template",
          "tokenizer": spec.tokenizer_note,
          "vocab_size": vocab,
      },
      "num_greedy": spec.num_greedy,
      "top_k": TOP_K,
      "probe_ids": spec.probe_ids,
      "cases": cases,
      "tokenizer_cases": tcases,
  }
  write_compact_json(doc, out_path)
  print(f"wrote {out_path} ({os.path.getsize(out_path)} bytes)")


if __name__ == "__main__":
  main()
