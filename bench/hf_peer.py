#!/usr/bin/python3
"""The Hugging Face transformers peer (run.py --peer=hf): the same GGUF,
loaded by transformers (dequantized to float32, like verifysvc's), decoding
the same prompt token ids greedily and with prompt lookup decoding
(generate's prompt_lookup_num_tokens), on the same number of threads.

Two halves, because transformers and torch live in their own venv (never
in CI) while run.py runs on the system Python with grpc:

  ensure_venv()   system Python: creates the venv and pip-installs the
                  pinned PEER_PACKAGES from PyPI (idempotent, ~6 GB: PyPI's
                  torch wheel brings its CUDA libraries along)
  hf_peer.py worker --model GGUF --jobs IN.json --out OUT.json
                  the venv's Python: loads the model, runs every job, writes
                  ids and seconds; imports nothing of ours but this file

A job is {"id", "ids" (prompt token ids from our Tokenize RPC, so both
sides see the same input), "max_new_tokens", "eos" (end ids)}.
"""

import argparse
import json
import os
import subprocess
import sys
import time

# Pinned so that runs stay comparable; bump together, on purpose.
# transformers needs accelerate to load a GGUF file.
PEER_PACKAGES = ("torch==2.15.0", "transformers==5.23.0", "accelerate==1.15.0",
                 "gguf==0.19.0", "numpy==2.4.6")
PROMPT_LOOKUP_TOKENS = 10


def default_venv():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "lookahead", "bench", "hf-venv")


def venv_python(venv):
    return os.path.join(venv, "bin", "python")


def _imports_ok(python):
    return subprocess.run(
        [python, "-c", "import torch, transformers, accelerate, gguf, numpy"],
        capture_output=True).returncode == 0


def ensure_venv(venv):
    """The venv's python, after creating the venv and installing
    PEER_PACKAGES when they are missing. RuntimeError saying what to do
    when that fails."""
    python = venv_python(venv)
    if os.access(python, os.X_OK) and _imports_ok(python):
        return python
    if not os.access(python, os.X_OK):
        result = subprocess.run([sys.executable, "-m", "venv", venv],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"python3 -m venv {venv} failed (apt-get "
                               f"install python3-venv?):\n{result.stderr}")
    print(f"hf_peer: installing {' '.join(PEER_PACKAGES)} into {venv} "
          "(PyPI; several GB the first time)", flush=True)
    result = subprocess.run([python, "-m", "pip", "install", "--quiet",
                             "--progress-bar", "off", *PEER_PACKAGES],
                            capture_output=True, text=True)
    if result.returncode != 0 or not _imports_ok(python):
        raise RuntimeError(f"pip install into {venv} failed:\n"
                           f"{result.stderr[-4000:]}")
    return python


def run_worker(python, model, jobs, threads, work_dir, timeout):
    """Runs the worker half in the venv on `jobs`; its JSON output."""
    jobs_path = os.path.join(work_dir, "hf_jobs.json")
    out_path = os.path.join(work_dir, "hf_out.json")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f)
    result = subprocess.run(
        [python, os.path.abspath(__file__), "worker", f"--model={model}",
         f"--jobs={jobs_path}", f"--out={out_path}", f"--threads={threads}"],
        stdout=sys.stdout, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"hf_peer worker failed ({result.returncode}):\n"
                           f"{result.stderr[-4000:]}")
    with open(out_path) as f:
        return json.load(f)


def compare(ours, theirs):
    """(identical, first differing index or None) of two output id lists."""
    if ours == theirs:
        return True, None
    index = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                 min(len(ours), len(theirs)))
    return False, index


def prompt_ids(client, request):
    """The token ids verifysvc decodes for a Generate request's prompt (one
    of prompt=, chat=, tokens=), through our Tokenize RPC."""
    if "tokens" in request:
        return list(request["tokens"])
    if "chat" in request:
        return client.tokenize(chat=request["chat"])
    return client.tokenize(request["prompt"], add_special=True)


def peer_records(jobs, ours, theirs):
    """results.json records of the peer run: per job, our plain and cold
    trie-hierarchical runs and HF's greedy and prompt-lookup runs, each
    compared token for token with our plain output. `ours` is, per job,
    {"plain": (seconds, ids), "trie-hierarchical": (seconds, ids)};
    `theirs` the worker's "results", in job order."""
    records = []
    for job, mine, hf in zip(jobs, ours, theirs):
        reference = mine["plain"][1]
        runs = [("ours plain", *mine["plain"]),
                ("ours trie-hierarchical (cold)", *mine["trie-hierarchical"]),
                ("hf greedy", hf["greedy"]["seconds"], hf["greedy"]["ids"]),
                ("hf prompt lookup", hf["prompt_lookup"]["seconds"],
                 hf["prompt_lookup"]["ids"])]
        for engine, seconds, ids in runs:
            identical, diverged_at = compare(reference, ids)
            records.append({"workload": job["workload"], "prompt": job["id"],
                            "engine": engine, "output_tokens": len(ids),
                            "seconds": seconds, "identical": identical,
                            "diverged_at": diverged_at})
    return records


# --- The worker half: runs in the venv. ---------------------------------

def _generate(model, torch, job, lookup):
    ids = torch.tensor([job["ids"]], dtype=torch.long)
    kwargs = dict(max_new_tokens=job["max_new_tokens"], do_sample=False,
                  eos_token_id=job["eos"], pad_token_id=job["eos"][0],
                  attention_mask=torch.ones_like(ids))
    if lookup:
        kwargs["prompt_lookup_num_tokens"] = lookup
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, **kwargs)
    seconds = time.perf_counter() - start
    return out[0, ids.shape[1]:].tolist(), seconds


def worker(argv):
    parser = argparse.ArgumentParser(prog="hf_peer.py worker")
    parser.add_argument("--model", required=True, help="GGUF file")
    parser.add_argument("--jobs", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(args.model)),
        gguf_file=os.path.basename(args.model), dtype=torch.float32)
    model.eval()
    load_seconds = time.perf_counter() - start
    with open(args.jobs) as f:
        jobs = json.load(f)
    # One throwaway call each way: first-call costs stay out of the numbers.
    if jobs:
        warm = dict(jobs[0], max_new_tokens=4)
        _generate(model, torch, warm, 0)
        _generate(model, torch, warm, PROMPT_LOOKUP_TOKENS)
    results = []
    for i, job in enumerate(jobs):
        # Alternate which goes first, as run.py rotates its modes.
        order = [0, PROMPT_LOOKUP_TOKENS][::1 if i % 2 == 0 else -1]
        out = {"id": job["id"]}
        for lookup in order:
            ids, seconds = _generate(model, torch, job, lookup)
            key = "prompt_lookup" if lookup else "greedy"
            out[key] = {"ids": ids, "seconds": seconds}
            print(f"  hf {job['id']} {key}: {len(ids) / seconds:.1f} tok/s",
                  flush=True)
        results.append(out)
    with open(args.out, "w") as f:
        json.dump({"torch": torch.__version__,
                   "transformers": transformers.__version__,
                   "threads": torch.get_num_threads(),
                   "load_seconds": load_seconds,
                   "prompt_lookup_num_tokens": PROMPT_LOOKUP_TOKENS,
                   "results": results}, f)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        sys.exit("usage: hf_peer.py worker --model GGUF --jobs IN --out OUT "
                 "(run.py --peer=hf calls it)")
    sys.exit(worker(sys.argv[2:]))
