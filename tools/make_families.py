#!/usr/bin/env python3
"""Writes tests/families/: tiny random GGUFs of the model families users bring.

For each family (Llama with Llama 3.1-style "llama3" RoPE scaling, Qwen2 with
QKV biases, Mistral with head_dim != hidden/heads) this script
  1. builds a tiny random-weight model with HF transformers (offline) and
     saves it with a tiny SentencePiece tokenizer trained on a local text;
  2. converts it with llama.cpp's own convert_hf_to_gguf.py (--outtype f16;
     every weight is rounded to float16 first, so the GGUF holds exactly the
     weights transformers runs);
  3. records transformers' float32 logits and greedy tokens for two prompts
     (token ids) into tests/families/families.json (layout:
     tests/families/families.proto), which families_test checks our engine
     against.

Greedy decoding is a plain argmax loop over full forwards (no KV cache, no
logits processors, no EOS stop; torch.argmax: the lowest id wins a tie).

Run through tools/make_families.sh, which makes the venv and fetches
llama.cpp's converter. Nothing is fetched from the Hugging Face hub.
"""

import argparse
import copy
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import sentencepiece  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
    Qwen2Config, Qwen2ForCausalLM)

from make_golden import sha256_of, write_compact_json  # noqa: E402  (tools/)

SCRIPT_VERSION = "make_families/1"
FORMAT_VERSION = 1
VOCAB = 128
NUM_GREEDY = 16
TORCH_THREADS = 2
WEIGHT_STD = 0.15     # random matmul weights and embeddings
NORM_STD = 0.2        # norm weights are 1 + NORM_STD * N(0, 1)
BIAS_STD = 0.3        # Qwen2's q/k/v biases
# families_test's logit tolerance; the script refuses greedy near-ties and
# checks that RoPE scaling matters by far more than this.
TEST_TOLERANCE = 1e-4
TRAINING_TEXT = "/usr/share/common-licenses/GPL-3"

COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64,
              num_hidden_layers=2, num_attention_heads=4, rms_norm_eps=1e-5,
              bos_token_id=1, eos_token_id=2, pad_token_id=None)

# name: (HF class, config, GGUF architecture, seed). Sizes are tiny; what
# each family exercises is in its comment.
FAMILIES = {
    # Llama 3.1/3.2: GQA, theta 500000, tied head, and "llama3" RoPE
    # scaling. At head_dim 16 and theta 5e5 the wavelengths are 6.3, 32, 167,
    # 861, ... so with original_max_position_embeddings 256 (high-frequency
    # wavelength 64, low 256) two frequencies stay, one is smoothed and five
    # are divided by the factor.
    "llama3": (LlamaForCausalLM, LlamaConfig(
        **COMMON, num_key_value_heads=2, max_position_embeddings=131072,
        rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0,
                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 256}),
               "llama", 11),
    # Qwen2/2.5: biases on q/k/v, NEOX-style RoPE, untied head.
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(
        **COMMON, num_key_value_heads=2, max_position_embeddings=32768,
        rope_theta=1000000.0, tie_word_embeddings=False,
        use_sliding_window=False), "qwen2", 12),
    # Mistral v0.3 / Nemo: one KV head for four query heads, head_dim 32 with
    # hidden 64 (q_dim != hidden), no sliding window, untied head.
    "mistral": (MistralForCausalLM, MistralConfig(
        **COMMON, num_key_value_heads=1, head_dim=32,
        max_position_embeddings=32768, rope_theta=1000000.0,
        sliding_window=None, tie_word_embeddings=False), "llama", 13),
}

# (name, prompt length, seed of its random ids). The long prompt reaches the
# positions where the scaled low frequencies move the logits.
PROMPTS = [("long", 48, 101), ("short", 7, 102)]


def r6(x):
  """A float32 logit, rounded to 6 decimals (the test's tolerance is 1e-4)."""
  return round(float(x), 6)


def train_tokenizer(work):
  """A VOCAB-piece SentencePiece BPE model (what convert_hf_to_gguf.py reads
  for llama and qwen2: tokenizer.model). Single-threaded: deterministic."""
  prefix = os.path.join(work, "spm")
  sentencepiece.SentencePieceTrainer.train(
      input=TRAINING_TEXT, model_prefix=prefix, vocab_size=VOCAB,
      model_type="bpe", character_coverage=1.0, num_threads=1,
      unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
  return prefix + ".model"


def randomize(model, seed):
  """Replaces every parameter with seeded random values that float16 holds
  exactly (so the f16 GGUF equals the model). HF initializes biases to 0 and
  norms to 1, which would hide a missing bias or norm."""
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=g)
      if name.endswith("norm.weight"):
        value = 1.0 + NORM_STD * noise
      elif name.endswith(".bias"):
        value = BIAS_STD * noise
      else:
        value = WEIGHT_STD * noise
      p.copy_(value.half().float())


def logits_of(model, ids):
  """float32 logits (len(ids), vocab) of one full forward."""
  with torch.no_grad():
    out = model(input_ids=torch.tensor([ids], dtype=torch.long),
                use_cache=False)
  return out.logits[0].float()


def greedy(model, prompt):
  """NUM_GREEDY argmax tokens, each from a full forward of all before it."""
  ids = list(prompt)
  toks, margins = [], []
  for _ in range(NUM_GREEDY):
    last = logits_of(model, ids)[-1]
    top = torch.topk(last, 2).values
    nxt = int(torch.argmax(last))
    toks.append(nxt)
    margins.append(r6(top[0] - top[1]))
    ids.append(nxt)
  return toks, margins


def convert(llama_cpp, model_dir, out):
  done = subprocess.run(
      [sys.executable, os.path.join(llama_cpp, "convert_hf_to_gguf.py"),
       model_dir, "--outfile", out, "--outtype", "f16"],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  if done.returncode != 0:
    sys.exit(f"convert_hf_to_gguf.py {model_dir} failed:\n{done.stdout}")


def gguf_tensors(llama_cpp, path):
  """{name: float32 array in HF's (out, in) order} of the GGUF, read with the
  converter's own gguf-py."""
  sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
  import gguf  # pylint: disable=import-outside-toplevel
  reader = gguf.GGUFReader(path)
  return {t.name: np.array(t.data, dtype=np.float32) for t in reader.tensors}


def make_family(name, args, work, tokenizer_model):
  cls, config, gguf_arch, seed = FAMILIES[name]
  torch.manual_seed(seed)
  model = cls(copy.deepcopy(config)).float().eval()
  randomize(model, seed)
  model_dir = os.path.join(work, name)
  model.save_pretrained(model_dir, safe_serialization=True)
  shutil.copy(tokenizer_model, os.path.join(model_dir, "tokenizer.model"))
  gguf_file = f"{name}_tiny_f16.gguf"
  out = os.path.join(args.out_dir, gguf_file)
  convert(args.llama_cpp, model_dir, out)

  # The reference: the saved model reloaded, eager attention, float32.
  model = cls.from_pretrained(model_dir, dtype=torch.float32,
                              attn_implementation="eager").eval()
  inv_freq = model.model.rotary_emb.inv_freq.float()
  tensors = gguf_tensors(args.llama_cpp, out)
  embd = tensors["token_embd.weight"].reshape(VOCAB, -1)
  assert np.array_equal(embd, model.model.embed_tokens.weight.detach().numpy()), (
      "token_embd.weight differs from HF's: the f16 GGUF is not lossless")
  scaling = (getattr(config, "rope_scaling", None) or {}).get(
      "rope_type", "none")
  if scaling == "llama3":
    # llama.cpp stores llama3 scaling as per-frequency divisors.
    plain = 1.0 / (config.rope_theta ** (
        torch.arange(0, inv_freq.numel() * 2, 2).float() / (inv_freq.numel()
                                                            * 2)))
    factors = tensors["rope_freqs.weight"]
    np.testing.assert_allclose(plain.numpy() / factors, inv_freq.numpy(),
                               rtol=1e-6)
    assert len(set(np.round(factors, 4))) >= 3, (
        f"rope_freqs {factors}: want kept, smoothed and scaled frequencies")
    print(f"{name}: rope_freqs.weight = {factors.tolist()}")
  else:
    assert "rope_freqs.weight" not in tensors

  # Without the scaling the same weights must give clearly other logits,
  # or the test could not see a missing scaling.
  unscaled_diff = 0.0
  if scaling != "none":
    plain_config = copy.deepcopy(model.config)
    plain_config.rope_scaling = None
    plain_model = cls(plain_config).float().eval()
    plain_model.load_state_dict(model.state_dict())

  cases = []
  for prompt_name, length, prompt_seed in PROMPTS:
    rng = np.random.default_rng(prompt_seed)
    prompt = [int(t) for t in rng.integers(3, VOCAB, size=length)]
    toks, margins = greedy(model, prompt)
    if min(margins) < 10 * TEST_TOLERANCE:
      sys.exit(f"{name}/{prompt_name}: greedy near-tie (margin "
               f"{min(margins)}); change the seed")
    # One forward over prompt + greedy tokens (all but the last): row p is
    # the next-token logits after position p.
    seq = prompt + toks[:-1]
    full = logits_of(model, seq)
    assert [int(i) for i in torch.argmax(full[length - 1:], dim=-1)] == toks
    positions = sorted({0, 1, length // 2, length - 1, len(seq) - 1})
    if scaling != "none":
      d = float((logits_of(plain_model, seq) - full).abs().max())
      unscaled_diff = max(unscaled_diff, d)
    cases.append({
        "name": prompt_name,
        "prompt_ids": prompt,
        "greedy_ids": toks,
        "greedy_logits": [r6(full[length - 1 + i, t])
                          for i, t in enumerate(toks)],
        "greedy_margins": margins,
        "rows": [{"position": p, "logits": [r6(x) for x in full[p]]}
                 for p in positions],
    })
    print(f"{name}/{prompt_name}: {length} prompt tokens, greedy {toks}, "
          f"min margin {min(margins):.4f}", flush=True)
  if scaling != "none":
    print(f"{name}: max |logit| change without {scaling} scaling "
          f"{unscaled_diff:.4f}")
    if unscaled_diff < 100 * TEST_TOLERANCE:
      sys.exit(f"{name}: the {scaling} scaling barely moves the logits "
               f"({unscaled_diff}); use longer prompts")
  return {
      "name": name,
      "hf_class": cls.__name__,
      "gguf_file": gguf_file,
      "gguf_sha256": sha256_of(out),
      "gguf_bytes": os.path.getsize(out),
      "architecture": gguf_arch,
      "vocab_size": VOCAB,
      "head_dim": getattr(model.config, "head_dim", None) or (
          config.hidden_size // config.num_attention_heads),
      "rope_scaling": scaling,
      "hf_config": json.dumps(
          {k: v for k, v in json.loads(
              model.config.to_json_string(use_diff=True)).items()
           if k not in ("architectures", "transformers_version", "dtype",
                        "torch_dtype")}, sort_keys=True),
      "hf_inv_freq": [float(x) for x in inv_freq],
      "unscaled_rope_max_diff": r6(unscaled_diff),
      "cases": cases,
  }


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  here = os.path.dirname(os.path.abspath(__file__))
  ap.add_argument("--llama_cpp", required=True,
                  help="llama.cpp source dir (convert_hf_to_gguf.py, gguf-py)")
  ap.add_argument("--llama_cpp_version", default="",
                  help="recorded in the JSON, e.g. llama-cpp-python==0.3.36")
  ap.add_argument("--out_dir",
                  default=os.path.normpath(
                      os.path.join(here, "..", "tests", "families")))
  args = ap.parse_args()
  torch.set_num_threads(TORCH_THREADS)

  families = []
  with tempfile.TemporaryDirectory(prefix="families.") as work:
    tokenizer_model = train_tokenizer(work)
    for name in FAMILIES:
      families.append(make_family(name, args, work, tokenizer_model))

  doc = {
      "format_version": FORMAT_VERSION,
      "generator": {
          "script_version": SCRIPT_VERSION,
          "python": platform.python_version(),
          "transformers": transformers.__version__,
          "torch": torch.__version__,
          "numpy": np.__version__,
          "sentencepiece": sentencepiece.__version__,
          "llama_cpp": args.llama_cpp_version,
          "converter": "convert_hf_to_gguf.py --outtype f16 (weights "
                       "rounded to float16 first: lossless)",
          "hf_load": "from_pretrained of the saved model, float32, eager "
                     "attention, CPU",
          "torch_threads": TORCH_THREADS,
          "greedy": "raw argmax over full forwards (lowest id wins ties), "
                    "no KV cache, no logits processors, no EOS stop",
          "tokenizer": f"SentencePiece BPE, {VOCAB} pieces, trained on "
                       f"{TRAINING_TEXT}; prompts are random token ids",
      },
      "num_greedy": NUM_GREEDY,
      "families": families,
  }
  path = os.path.join(args.out_dir, "families.json")
  write_compact_json(doc, path)
  total = sum(os.path.getsize(os.path.join(args.out_dir, f["gguf_file"]))
              for f in families) + os.path.getsize(path)
  print(f"wrote {path} and {len(families)} GGUFs ({total} bytes in all)")


if __name__ == "__main__":
  main()
