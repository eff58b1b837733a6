#!/usr/bin/python3
"""How far could a learned draft head go? A feasibility study, offline.

Drafts made of seen text stop at chat EDL 1.74 and code 2.44 (ceiling.py),
and the self-drafting assistant costs as much as the verifier's own pass.
The remaining kind is a small head trained on the target's own hidden
states (EAGLE-style): from the final hidden state of position t-1, the one
before it and the token at t, it predicts the hidden state of t and, through
the target's tied output embedding restricted to the most frequent tokens,
the token at t+1; fed its own prediction, it drafts a chain. It is trained
to predict the target's greedy tokens (self-distillation), unrolled over
UNROLL steps on its own predicted states, with feature noise.

  collect   system Python: both services on loopback; plain greedy outputs
            (ids) of every chat and code prompt, and the verifier's startup
            cost curve. The bench's warm-up and measured prompts
            (workloads.py's split, 4 + 16) are held out: the head trains on
            the other prompts of the same workloads (156 chat, 144 code).
  extra     optional, system Python: more training data, the plain greedy
            outputs of questions made from the Python docs (not the FAQ,
            the chat workload's source) and of HumanEval-like prompts made
            from the standard library's functions (signature and
            docstring), 8 requests at a time (~10 minutes for 2000).
  features  the venv of hf_peer.py (transformers on the same GGUF): final
            hidden states (after the output norm) of every position; fails
            unless its argmax reproduces our greedy outputs on the bench's
            prompts (the extra ones: counted).
  train     the venv: trains the head on the held-out split and the extra
            outputs.
  evaluate  the venv: simulated decoding of the measured prompts' plain
            outputs: each step the verifier knows the last accepted
            position's hidden state and the root token; the head drafts
            `width` chains (its top tokens at the first level, greedy
            below) of `depth` tokens; the step accepts the longest matching
            prefix. EDL per (depth, width), and a speedup bound that charges
            each step the cost curve's pass over all its rows plus the
            head's evaluations at an estimated cost (its 8-bit weight bytes
            at the target's measured ms per MiB of weights).

    bench/draft_head.py all --out=bench/results/draft_head   # ~20 minutes
    bench/draft_head.py extra && bench/draft_head.py head --epochs=3 \
        && bench/draft_head.py report                        # ~60 minutes
"""

import argparse
import contextlib
import json
import math
import glob
import os
import pathlib
import random
import re
import subprocess
import sys
import time

import ceiling

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("chat", "code")
BENCH_WARMUP, BENCH_LIMIT = 4, 16   # tools/bench.sh's split, held out
MAX_NEW_TOKENS = 128
UNROLL = 3
CONFIGS = ((1, 1), (2, 1), (3, 1), (4, 1), (2, 2), (3, 2), (2, 3), (3, 3))


# --- Pure parts (bench_test.py). -----------------------------------------

def chain_accepted(chains, ids, s):
    """Draft tokens a step accepts: the longest prefix of any chain that
    matches ids[s + 1:] (the chain's first token guesses ids[s + 1])."""
    best = 0
    for chain in chains:
        a = 0
        while (a < len(chain) and s + 1 + a < len(ids)
               and chain[a] == ids[s + 1 + a]):
            a += 1
        best = max(best, a)
    return best


def simulate(ids, first, propose):
    """Decodes ids[first:] (plain decoding's output; ids[first] is the
    token prefill made) in steps: propose(s) drafts chains after root
    ids[s]; a step makes its accepted drafts plus one token. Returns the
    accepted count of every step."""
    accepted, s = [], first
    while s < len(ids):
        a = chain_accepted(propose(s), ids, s)
        accepted.append(a)
        s += a + 1
    return accepted


def speedup_bound(accepted, rows, evaluations, curve, draft_ms):
    """Plain decoding's cost (one token a pass) over the drafted steps':
    each verifies 1 + rows rows and runs the head `evaluations` times."""
    tokens = sum(a + 1 for a in accepted)
    step_ms = ceiling.forward_ms(curve, 1 + rows) + evaluations * draft_ms
    return tokens * ceiling.forward_ms(curve, 1) / (len(accepted) * step_ms)


def split_of(prompt_id, bench_ids, measured_ids):
    if prompt_id in measured_ids:
        return "measured"
    return "warmup" if prompt_id in bench_ids else "train"


# --- collect: system Python. ---------------------------------------------

def _all_prompts(cache, name):
    """Every prompt of workload `name` in workloads.load's shuffled order,
    and the ids of its warm-up and measured splits."""
    import workloads
    count = len(workloads._read_jsonl(os.path.join(cache, f"{name}.jsonl")))
    (split,) = workloads.load(cache, [name], 49152, BENCH_WARMUP,
                              count - BENCH_WARMUP)
    measured = {p.id for p in split.measured[:BENCH_LIMIT]}
    bench = measured | {p.id for p in split.warmup}
    return split.warmup + split.measured, bench, measured


_TITLE = re.compile(r"([-=~^\"*+#])\1{3,}")
_MODULE = re.compile(r":mod:`([\w.]+)` -+ (.+)")
_CHAT_TEMPLATES = (
    "How do I use Python's {module} module?",
    "What is the {module} module in Python used for ({what})?",
    "Can you show an example of {what} with Python's {module} module?",
)


def _lower_first(title):
    """"Running Subprocesses" -> "running Subprocesses"; "POP3" stays."""
    return title if title[1:2].isupper() else title[0].lower() + title[1:]


def extra_chat_questions(doc_root, limit):
    """Questions about Python that are not the FAQ's (the chat workload's
    source): glossary terms ("What is ... in Python?"), the library's
    module titles in three forms, and section titles of the library,
    tutorial and howto pages ("Explain ..."). Deterministic order."""
    questions = []
    glossary = os.path.join(doc_root, "glossary.rst.txt")
    for line in pathlib.Path(glossary).read_text(encoding="utf-8").splitlines():
        term = re.fullmatch(r"   ([A-Za-z][\w .-]*[\w.])", line)
        if term:
            questions.append(f"What is {term.group(1)} in Python?")
    sections = []
    for folder in ("library", "tutorial", "howto"):
        for path in sorted(glob.glob(os.path.join(doc_root, folder,
                                                  "*.rst.txt"))):
            lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
            module = None
            for title, underline in zip(lines, lines[1:]):
                title = title.strip()
                if not (_TITLE.fullmatch(underline.strip()) and
                        len(underline.strip()) >= len(title) > 3):
                    continue
                found = _MODULE.fullmatch(title)
                if found:
                    module = found.group(1)
                    what = found.group(2).rstrip(".")
                    questions += [t.format(module=module,
                                           what=_lower_first(what))
                                  for t in _CHAT_TEMPLATES]
                elif re.fullmatch(r"[A-Za-z][A-Za-z0-9 ,'()-]+", title):
                    where = f" in Python's {module} module" if module else \
                        " in Python"
                    sections.append(f"Explain {_lower_first(title)}{where}.")
    questions += sections
    random.Random("draft_head-chat").shuffle(questions)
    return list(dict.fromkeys(questions))[:limit]


def extra_code_prompts(lib_root, limit):
    """HumanEval-like prompts from the standard library's public top-level
    functions: the signature and docstring, the body left to the model."""
    import ast
    prompts = []
    for path in sorted(glob.glob(os.path.join(lib_root, "**", "*.py"),
                                 recursive=True)):
        if re.search(r"/(test|tests|idlelib|lib2to3|site-packages|"
                     r"dist-packages)/", path):
            continue
        try:
            source = pathlib.Path(path).read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines()
        for node in tree.body:
            if (not isinstance(node, ast.FunctionDef) or
                    node.name.startswith("_") or node.decorator_list):
                continue
            doc = ast.get_docstring(node)
            if not doc or not 40 <= len(doc) <= 800:
                continue
            end = node.body[0].end_lineno
            if end >= node.body[-1].end_lineno:
                continue   # a docstring alone: nothing to write
            prompts.append("\n".join(lines[node.lineno - 1:end]) + "\n")
    random.Random("draft_head-code").shuffle(prompts)
    return prompts[:limit]


def collect(out, bin_dir):
    import fetch_workloads
    import harness
    import hf_peer
    cache = fetch_workloads.default_cache()
    records = []
    with contextlib.ExitStack() as stack:
        address, verifysvc = harness.start_services(
            stack, bin_dir, verifysvc_flags=["--prefix_cache_mib=0"])
        log = verifysvc.log().splitlines()
        with harness.Connection(address) as connection:
            for name in WORKLOADS:
                prompts, bench_ids, measured_ids = _all_prompts(cache, name)
                for n, prompt in enumerate(prompts):
                    ids = hf_peer.prompt_ids(connection.client, prompt.request)
                    _, output, _ = harness.measure(
                        connection, prompt, "off", "", MAX_NEW_TOKENS, 600)
                    records.append({
                        "workload": name, "id": prompt.id,
                        "split": split_of(prompt.id, bench_ids, measured_ids),
                        "prompt_ids": ids, "output_ids": output})
                    if n % 40 == 0:
                        print(f"draft_head: {name} {n}/{len(prompts)}",
                              flush=True)
    with open(os.path.join(out, "outputs.json"), "w") as f:
        json.dump({"curve": ceiling.cost_curve(log),
                   "verifysvc_log": log, "records": records}, f)


def collect_extra(out, bin_dir, chat, code, concurrency):
    """Plain greedy outputs of `chat` questions and `code` prompts made from
    the Python docs and standard library (extra_chat_questions,
    extra_code_prompts), `concurrency` requests at a time: batched decoding
    gives each the tokens it gets alone (row invariance)."""
    import concurrent.futures
    import shutil
    import tempfile
    import fetch_workloads
    import harness
    import hf_peer
    import workloads
    cache = fetch_workloads.default_cache()
    version = "%d.%d" % sys.version_info[:2]
    deb = fetch_workloads.apt_deb(f"python{version}-doc",
                                  os.path.join(cache, "debs"))
    docs = tempfile.mkdtemp(dir=cache)
    try:
        fetch_workloads.extract_deb(
            deb, [f"./usr/share/doc/python{version}/html/_sources/*"], docs)
        questions = extra_chat_questions(os.path.join(
            docs, f"usr/share/doc/python{version}/html/_sources"), chat)
    finally:
        shutil.rmtree(docs)
    prompts = [workloads.Prompt(f"extra-chat-{n}", {"chat": [
        {"role": "user", "content": q}]}) for n, q in enumerate(questions)]
    prompts += [workloads.Prompt(f"extra-code-{n}", {"prompt": p}) for n, p in
                enumerate(extra_code_prompts(os.path.dirname(os.__file__),
                                             code))]
    records = []
    with contextlib.ExitStack() as stack:
        address, _ = harness.start_services(
            stack, bin_dir, verifysvc_flags=["--prefix_cache_mib=0"])
        with harness.Connection(address) as connection:
            def run(prompt):
                ids = hf_peer.prompt_ids(connection.client, prompt.request)
                _, output, _ = harness.measure(
                    connection, prompt, "off", "", MAX_NEW_TOKENS, 600)
                return {"workload": prompt.id.split("-")[1], "id": prompt.id,
                        "split": "extra", "prompt_ids": ids,
                        "output_ids": output}
            start = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
                for n, record in enumerate(pool.map(run, prompts)):
                    records.append(record)
                    if n % 200 == 0:
                        print(f"draft_head: extra {n}/{len(prompts)} "
                              f"({time.perf_counter() - start:.0f} s)",
                              flush=True)
    os.makedirs(os.path.dirname(_cache_path("extra_outputs.json")),
                exist_ok=True)
    with open(_cache_path("extra_outputs.json"), "w") as f:
        json.dump({"records": records}, f)


# --- The venv half. --------------------------------------------------------

def _cache_path(name):
    """Features and the trained head: large, kept out of the results."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "lookahead", "bench", "draft_head", name)


def features(out, model_path):
    """Features of the bench's records (outputs.json; H.npy, T.npy, P.npy,
    meta.json) and, if collect_extra ran, of the extra ones (the same names
    with an "extra-" prefix); each set only if missing."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(2)
    sets = [("", os.path.join(out, "outputs.json"), True),
            ("extra-", _cache_path("extra_outputs.json"), False)]
    model = None
    for prefix, path, exact in sets:
        if not os.path.exists(path) or os.path.exists(
                _cache_path(prefix + "meta.json")):
            continue
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(
                os.path.dirname(os.path.abspath(model_path)),
                gguf_file=os.path.basename(model_path),
                dtype=torch.float32).eval()
        with open(path) as f:
            records = json.load(f)["records"]
        _features_of(model, records, prefix, exact)


def _features_of(model, records, prefix, exact):
    """Final hidden states, tokens and transformers' greedy choices of every
    position of `records`. With `exact`, fails unless the greedy choices
    are our outputs on every output token; else counts the ones that are
    (a near-tie may go either way across two float32 implementations)."""
    import numpy as np
    import torch
    os.makedirs(os.path.dirname(_cache_path("E.npy")), exist_ok=True)
    if not os.path.exists(_cache_path("E.npy")):
        np.save(_cache_path("E.npy"), model.lm_head.weight.detach().numpy())
    hidden, tokens, greedy, meta = [], [], [], []
    agree = total = offset = 0
    start = time.perf_counter()
    for n, record in enumerate(records):
        ids = record["prompt_ids"] + record["output_ids"]
        with torch.inference_mode():
            result = model(torch.tensor([ids]), output_hidden_states=True)
        prediction = result.logits[0].argmax(-1).numpy()
        p = len(record["prompt_ids"])
        reference = np.array(record["output_ids"])
        agree += int((prediction[p - 1:p - 1 + len(reference)] ==
                      reference).sum())
        total += len(reference)
        hidden.append(result.hidden_states[-1][0].numpy().astype(np.float16))
        tokens.append(np.array(ids, np.int32))
        greedy.append(prediction.astype(np.int32))
        meta.append({k: record[k] for k in ("workload", "id", "split")} |
                    {"offset": offset, "len": len(ids), "prompt": p})
        offset += len(ids)
        if n % 200 == 0:
            print(f"draft_head: {prefix}features {n}/{len(records)} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    if exact and agree != total:
        raise RuntimeError(f"transformers' argmax matches {agree} of {total} "
                           "greedy tokens: its hidden states are not ours")
    np.save(_cache_path(prefix + "H.npy"), np.concatenate(hidden))
    np.save(_cache_path(prefix + "T.npy"), np.concatenate(tokens))
    np.save(_cache_path(prefix + "P.npy"), np.concatenate(greedy))
    with open(_cache_path(prefix + "meta.json"), "w") as f:
        json.dump({"records": meta, "greedy_agree": agree,
                   "greedy_total": total}, f)
    print(f"draft_head: {prefix}features of {offset} positions, argmax = our "
          f"greedy output on {agree}/{total} tokens", flush=True)


class _Data:
    """The features in one set of arrays: the bench's records first, then
    the extra ones (offsets shifted) if their features exist."""

    def __init__(self):
        import numpy as np
        import torch
        H, T, P, self.records = [], [], [], []
        offset = 0
        for prefix in ("", "extra-"):
            if not os.path.exists(_cache_path(prefix + "meta.json")):
                continue
            H.append(np.load(_cache_path(prefix + "H.npy")))
            T.append(np.load(_cache_path(prefix + "T.npy")))
            P.append(np.load(_cache_path(prefix + "P.npy")))
            with open(_cache_path(prefix + "meta.json")) as f:
                for r in json.load(f)["records"]:
                    self.records.append(r | {"offset": r["offset"] + offset})
            offset += len(T[-1])
        self.H = torch.from_numpy(np.concatenate(H).astype(np.float32))
        self.T = torch.from_numpy(np.concatenate(T).astype(np.int64))
        self.P = torch.from_numpy(np.concatenate(P).astype(np.int64))
        self.E = torch.from_numpy(np.load(_cache_path("E.npy")))


def _head_class():
    import torch
    import torch.nn as nn

    class Head(nn.Module):
        """h(t) = h(t-1) + MLP(LayerNorm([h(t-2), h(t-1), emb(x_t)]))."""

        def __init__(self, dim, hidden, embedding, vocab):
            super().__init__()
            self.norm = nn.LayerNorm(3 * dim)
            self.fc1 = nn.Linear(3 * dim, hidden)
            self.fc2 = nn.Linear(hidden, dim)
            self.register_buffer("embedding", embedding)
            self.register_buffer("vocab", vocab)   # restricted id -> token
            self.register_buffer("head", embedding[vocab])

        def forward(self, before, last, token):
            z = torch.cat([before, last, self.embedding[token]], -1)
            return last + self.fc2(nn.functional.silu(self.fc1(self.norm(z))))

        def logits(self, state):
            return state @ self.head.T

    return Head


def train(out, vocab_size, hidden, epochs, seed=0):
    import numpy as np
    import torch
    import torch.nn as nn
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    data = _Data()
    train_records = [r for r in data.records
                     if r["split"] in ("train", "extra")]
    starts = torch.from_numpy(np.concatenate([
        np.arange(r["offset"] + 1, r["offset"] + r["len"] - UNROLL)
        for r in train_records]))
    labels = torch.cat([data.P[starts + k] for k in range(1, UNROLL + 1)])
    frequency = torch.bincount(labels, minlength=data.E.shape[0])
    vocab = torch.argsort(frequency, descending=True, stable=True)[:vocab_size]
    restricted = torch.full((data.E.shape[0],), -1, dtype=torch.long)
    restricted[vocab] = torch.arange(len(vocab))
    coverage = float((restricted[labels] >= 0).float().mean())
    head = _head_class()(data.E.shape[1], hidden, data.E, vocab)
    optimizer = torch.optim.AdamW(
        head.parameters(), lr=1e-3,
        weight_decay=0.01)
    batch = 256
    total_steps = epochs * math.ceil(len(starts) / batch)
    step, start, losses = 0, time.perf_counter(), []
    for epoch in range(epochs):
        order = torch.randperm(len(starts))
        summed = 0.0
        for b in range(0, len(starts), batch):
            t = starts[order[b:b + batch]]
            for group in optimizer.param_groups:   # cosine decay
                group["lr"] = 5e-4 * (1 + math.cos(math.pi * step / total_steps))
            step += 1
            before = data.H[t - 1]
            last = data.H[t] + 0.05 * torch.randn(len(t), data.H.shape[1])
            loss = 0
            for k in range(1, UNROLL + 1):   # on its own predicted states
                state = head(before, last, data.T[t + k])
                y = restricted[data.P[t + k]]
                known = y >= 0
                loss = loss + nn.functional.cross_entropy(
                    head.logits(state)[known], y[known])
                loss = loss + 0.5 * nn.functional.smooth_l1_loss(
                    state, data.H[t + k])
                before, last = last, state
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss = loss.item()
            summed += loss * len(t)
            if step % 500 == 0:
                print(f"draft_head: step {step}/{total_steps} loss "
                      f"{loss / UNROLL:.3f} "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
        losses.append(round(summed / len(starts) / UNROLL, 4))
        print(f"draft_head: epoch {epoch} loss {losses[-1]} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    torch.save(head.state_dict(), _cache_path("head.pt"))
    return {"train_positions": len(starts), "vocab": vocab_size,
            "label_coverage": coverage, "hidden": hidden, "epochs": epochs,
            "unroll": UNROLL, "losses": losses,
            "seconds": round(time.perf_counter() - start, 1),
            "parameters": sum(p.numel() for p in head.parameters())}


def evaluate(out, vocab_size, hidden, splits=("measured",)):
    import torch
    torch.set_num_threads(2)
    data = _Data()
    head = _head_class()(data.E.shape[1], hidden, data.E,
                         torch.zeros(vocab_size, dtype=torch.long))
    head.load_state_dict(torch.load(_cache_path("head.pt")))
    head.eval()

    def proposer(record, depth, width):
        o = record["offset"]

        def propose(s):
            with torch.inference_mode():
                before, last = data.H[o + s - 2][None], data.H[o + s - 1][None]
                state = head(before, last, data.T[o + s][None])
                firsts = torch.topk(head.logits(state)[0], width).indices
                chains = []
                for first in firsts.tolist():
                    chain, b, l = [int(head.vocab[first])], last, state
                    for _ in range(depth - 1):
                        b, l = l, head(b, l, torch.tensor([chain[-1]]))
                        chain.append(int(head.vocab[head.logits(l)[0].argmax()]))
                    chains.append(chain)
            return chains
        return propose

    results = []
    for split in splits:
        for workload in WORKLOADS:
            records = [r for r in data.records
                       if r["split"] == split and r["workload"] == workload]
            if split == "train":
                records = records[:BENCH_LIMIT]
            for depth, width in CONFIGS:
                accepted = []
                for r in records:
                    ids = data.T[r["offset"]:r["offset"] + r["len"]].tolist()
                    accepted += simulate(ids, r["prompt"],
                                         proposer(r, depth, width))
                results.append({"split": split, "workload": workload,
                                "depth": depth, "width": width,
                                "accepted": accepted})
                print(f"draft_head: {split} {workload} depth {depth} width "
                      f"{width}: EDL {sum(a + 1 for a in accepted) / len(accepted):.3f}",
                      flush=True)
    return results


def worker(argv):
    parser = argparse.ArgumentParser(prog="draft_head.py worker")
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    args = parser.parse_args(argv)
    features(args.out, args.model)
    trained = train(args.out, args.vocab, args.hidden, args.epochs)
    evaluated = evaluate(args.out, args.vocab, args.hidden,
                         ("measured", "train"))
    with open(os.path.join(args.out, "head_results.json"), "w") as f:
        json.dump({"train": trained, "evaluate": evaluated}, f)
    return 0


# --- Report: system Python. ------------------------------------------------

def head_mib(dim, hidden, vocab):
    """The head's weights at 8 bits (Q8_0: 34 bytes a 32 weights)."""
    weights = 3 * dim * hidden + hidden * dim + vocab * dim
    return weights * 34 / 32 / 2**20


def report(out, target_mib, curve=None):
    """report.md; `curve` ({rows: ms}) replaces the collect run's own."""
    source = "given with --curve" if curve else "verifysvc's startup measurement"
    with open(os.path.join(out, "outputs.json")) as f:
        curve = curve or {int(k): v for k, v in json.load(f)["curve"].items()}
    with open(os.path.join(out, "head_results.json")) as f:
        results = json.load(f)
    trained = results["train"]
    draft_ms = (head_mib(576, trained["hidden"], trained["vocab"]) *
                ceiling.forward_ms(curve, 1) / target_mib)
    lines = [
        "# A learned draft head, simulated (bench/draft_head.py)", "",
        f"- trained on {trained['train_positions']} positions of the "
        f"held-out chat and code prompts in {trained['seconds']} s on this "
        f"CPU: {trained['parameters']} trained parameters (hidden "
        f"{trained['hidden']}), the target's output embedding restricted to "
        f"its {trained['vocab']} most frequent label tokens (covering "
        f"{trained['label_coverage']:.1%} of training labels), "
        f"{trained['epochs']} epochs unrolled {trained['unroll']} steps, "
        f"loss per epoch {trained['losses']}",
        f"- cost curve (ms by rows, {source}): " + " ".join(
            f"{k}:{v}" for k, v in sorted(curve.items())),
        f"- head evaluation estimated at {draft_ms:.3f} ms "
        f"({head_mib(576, trained['hidden'], trained['vocab']):.1f} MiB at "
        f"8 bits, at the target's {ceiling.forward_ms(curve, 1)} ms per "
        f"{target_mib} MiB)", "",
        "| split | workload | depth x width | rows | EDL | speedup bound | "
        "bound, free head |",
        "|---|---|---|---:|---:|---:|---:|"]
    for r in results["evaluate"]:
        accepted, rows = r["accepted"], r["depth"] * r["width"]
        evaluations = 1 + r["width"] * (r["depth"] - 1)
        edl = sum(a + 1 for a in accepted) / len(accepted)
        lines.append(
            f"| {r['split']} | {r['workload']} | {r['depth']} x {r['width']} "
            f"| {rows} | {edl:.2f} | "
            f"{speedup_bound(accepted, rows, evaluations, curve, draft_ms):.2f}x | "
            f"{speedup_bound(accepted, rows, 0, curve, 0):.2f}x |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    print(text)


def main(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("all", "collect", "extra", "head",
                                         "report"))
    parser.add_argument("--out", default=os.path.join(
        BENCH_DIR, "results", "draft_head"))
    parser.add_argument("--bin_dir", default=os.path.join(
        BENCH_DIR, "..", ".bazel", "bin"))
    parser.add_argument("--model", default=os.path.expanduser(
        "~/.cache/lookahead/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--extra_chat", type=int, default=1000,
                        help="extra: questions from the Python docs")
    parser.add_argument("--extra_code", type=int, default=1000,
                        help="extra: prompts from the standard library")
    parser.add_argument("--concurrency", type=int, default=8,
                        help="extra: requests at a time")
    parser.add_argument("--curve", default="",
                        help="report on this cost curve instead of the "
                             "collect run's startup one: rows:ms pairs, "
                             "e.g. 1:3.7,2:4.5,3:5.1,4:6.0,8:13.1")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.step in ("all", "collect"):
        collect(args.out, args.bin_dir)
    if args.step == "extra":
        collect_extra(args.out, args.bin_dir, args.extra_chat, args.extra_code,
                      args.concurrency)
    if args.step in ("all", "head"):
        import hf_peer
        python = hf_peer.ensure_venv(hf_peer.default_venv())
        subprocess.run([python, os.path.abspath(__file__), "worker",
                        f"--out={args.out}", f"--model={args.model}",
                        f"--vocab={args.vocab}", f"--hidden={args.hidden}",
                        f"--epochs={args.epochs}"], check=True)
    if args.step in ("all", "report"):
        with open(os.path.join(args.out, "outputs.json")) as f:
            log = "\n".join(json.load(f)["verifysvc_log"])
        found = re.search(r"(\d+) MiB", log)
        curve = {int(k): float(v) for k, v in
                 (pair.split(":") for pair in args.curve.split(",") if pair)}
        report(args.out, int(found.group(1)) if found else 124, curve)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, BENCH_DIR)
    if sys.argv[1:2] == ["worker"]:
        sys.exit(worker(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
