#!/usr/bin/python3
"""The llama.cpp peer (run.py --peer=llamacpp): the GGUF verifysvc serves
(any of tools/models.sh's, run.py --model) run by llama.cpp's own tools on
the same number of threads, beside ours in the same run: as shipped,
labelled by its quant type (served_label: "Q4_1", "Q4_K_M"; llama.cpp's
quantized kernels), and, for small files or on request (wants_f32), also
dequantized to F32 (llama.cpp without its quantized kernels).

llama.cpp is built apart, never in CI: tools/llamacpp_build.sh (run here on
first use, like hf_peer's venv) installs the pinned VERSION's llama-bench,
llama-completion (or, in older versions, llama-cli), llama-lookup,
llama-speculative, llama-speculative-simple and llama-quantize into ~/.cache/lookahead/llama.cpp/VERSION/bin/; the F32
copies go to its models/ folder as they are first needed (ensure_f32).

Per model (e.g. Q4_K_M, and F32) it measures:
  decode    llama-bench -p 0 -n 128 -d 64,1000,4000: tok/s generating 128
            tokens after that many in the context (without -d in the
            version: llama-completion on a prompt that long, its eval rate)
  prompt    llama-bench -p 512,2000 -n 0: prompt processing tok/s
  forward   llama-bench -p 1,2,4,...,64 -n 0 -d 128: ms of one batch of N
            prompt tokens after 128 in the context (N / tok/s, fastest
            repetition), beside verifysvc's own start-up measure of one
            tree-verify forward of N tokens after 128 (its "forward ms by
            tokens" line): the forward-cost curve
  requests  llama-completion, greedy (--temp 0), and llama-lookup (prompt
            lookup decoding: drafts from n-grams of this request only), on
            the peer prompts' text (--peer_prompts per workload), and with
            a draft model (run.py --llamacpp_draft_model, the assistant's
            file) llama-speculative and llama-speculative-simple on the
            served file (llama.cpp's default draft size): output
            tokens / (prompt + decode seconds of llama.cpp's own timings,
            model load left out), and greedy's decode rate alone (eval runs
            / eval seconds)
  rss       each process's peak resident set (wait4's ru_maxrss)
and the same speeds of ours through the running services (tokens= prompts
of that length, drafts off, each repetition's prompt a different rotation
of the filler text so that the prefix cache never serves it; decode rate
of a request: (output tokens - 1) / (seconds - TTFT)). run.py raises
verifysvc's --max_context_tokens to context_tokens_needed, so that ours
runs at the deepest context too. Outputs are compared as text with our
plain decoding's, and llama.cpp's prompt token ids (--verbose-prompt) with
ours.
"""

import collections
import json
import os
import re
import subprocess
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
BUILD_SCRIPT = os.path.join(REPO_ROOT, "tools", "llamacpp_build.sh")

# llama-cpp-python's version, whose sdist vendors the llama.cpp we build;
# tools/llamacpp_build.sh builds it when given LLAMA_CPP_PYTHON_VERSION.
# Pinned so that runs stay comparable; bump on purpose.
VERSION = "0.3.36"
# run.py --llamacpp_f32: whether llama.cpp also runs an F32 copy of the
# served file. "auto" makes one only for a file of at most
# F32_AUTO_MAX_BYTES: the copy is ~6x a 4-bit file on disk and in memory,
# and llama.cpp's F32 decode streams all of it per token. For the default
# SmolLM2-135M (98 MB; F32 540 MB) that is cheap and keeps the F32 column
# of the earlier reports; for Qwen2.5-Coder-1.5B (1.1 GB; F32 6.2 GB, a
# few tok/s on 2 cores) it would add over an hour to a run and 6 GB of
# memory, and ours decodes the quantized blocks themselves, so the
# file as shipped is the comparison that matters. "on" makes it for any
# file, "off" for none.
F32_CHOICES = ("auto", "on", "off")
F32_AUTO_MAX_BYTES = 256 << 20
DECODE_TOKENS = 128  # llama-bench -n: tokens generated per decode test.
# Ours decodes with EOS on: a decode sample needs at least this many tokens.
MIN_DECODE_TOKENS = 32
# The forward-cost curve: tokens per pass, after FORWARD_DEPTH in the
# context (verifysvc measures its own at start, MeasureStepCost's context).
FORWARD_TOKENS = (1, 2, 4, 8, 16, 32, 64)
FORWARD_DEPTH = 128
# verifysvc's default --max_context_tokens, which the peer prompts fit; the
# peer raises it, in steps of CONTEXT_STEP, where a speed test needs more.
MIN_CONTEXT = 2048
CONTEXT_STEP = 512
COMPLETION_NAMES = ("llama-completion", "llama-cli")  # Newest first.

# Paths of the installed binaries (those after build_info: None where
# missing).
Tools = collections.namedtuple(
    "Tools", "bench completion lookup build_info quantize speculative "
    "speculative_simple", defaults=[None, None, None])
# run_request's drafting kinds: kind -> (Tools field, whether it needs a
# draft model). Their outputs run on past -n (compare_text's prefix).
DRAFTING_KINDS = {"lookup": ("lookup", False),
                  "speculative": ("speculative", True),
                  "speculative-simple": ("speculative_simple", True)}
Run = collections.namedtuple("Run", "returncode stdout stderr seconds peak_rss")


def default_install():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "lookahead", "llama.cpp", VERSION)


def ensure_build(install):
    """The installed Tools, after running tools/llamacpp_build.sh when
    `install` lacks its build-info.txt. RuntimeError when that fails."""
    info_path = os.path.join(install, "build-info.txt")
    if not os.path.exists(info_path):
        if os.path.abspath(install) != os.path.abspath(default_install()):
            raise RuntimeError(f"{info_path} is missing: build it with "
                               f"LLAMA_CPP_PYTHON_VERSION=... {BUILD_SCRIPT}")
        print(f"llamacpp_peer: building llama.cpp ({BUILD_SCRIPT}, ~10 min)",
              flush=True)
        result = subprocess.run([BUILD_SCRIPT], env=dict(
            os.environ, LLAMA_CPP_PYTHON_VERSION=VERSION))
        if result.returncode != 0 or not os.path.exists(info_path):
            raise RuntimeError(f"{BUILD_SCRIPT} failed ({result.returncode})")
    binary = lambda name: os.path.join(install, "bin", name)  # noqa: E731
    completion = next((binary(n) for n in COMPLETION_NAMES
                       if os.access(binary(n), os.X_OK)), None)
    if completion is None or not os.access(binary("llama-bench"), os.X_OK):
        raise RuntimeError(f"{install}/bin lacks llama-bench or "
                           f"{'/'.join(COMPLETION_NAMES)}: delete {install} "
                           f"and run {BUILD_SCRIPT}")
    present = lambda name: (  # noqa: E731
        binary(name) if os.access(binary(name), os.X_OK) else None)
    with open(info_path) as f:
        build_info = f.read().strip()
    return Tools(binary("llama-bench"), completion, present("llama-lookup"),
                 build_info, present("llama-quantize"),
                 present("llama-speculative"),
                 present("llama-speculative-simple"))


def ensure_f32(tools, model, install):
    """The F32 copy of the GGUF `model` in `install`/models/
    (f32_file_name), made by llama-quantize --allow-requantize unless one
    at least as new as `model` is there (written under a temporary name,
    then renamed: an interrupted run leaves no half copy). RuntimeError
    when llama-quantize is missing or fails."""
    path = os.path.join(install, "models", f32_file_name(model))
    if (os.path.exists(path)
            and os.path.getmtime(path) >= os.path.getmtime(model)):
        return path
    if tools.quantize is None:
        raise RuntimeError(f"{install}/bin lacks llama-quantize: delete "
                           f"{install} and run {BUILD_SCRIPT}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = path + ".partial"
    print(f"llamacpp_peer: dequantizing {os.path.basename(model)} to "
          f"{path}", flush=True)
    try:
        checked(run_measured([tools.quantize, "--allow-requantize", model,
                              partial, "F32"], 3600.0), "llama-quantize")
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return path


def run_measured(argv, timeout):
    """Runs `argv` (stdin closed) to its end; its Run, with the seconds it
    took and its peak RSS in bytes. RuntimeError past `timeout` seconds."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=err)
        try:
            # wait4, not wait: the child's own rusage, hence its peak RSS.
            while True:
                pid, status, usage = os.wait4(process.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() - start > timeout:
                    raise RuntimeError(f"{argv[0]} ran over {timeout:.0f} s")
                time.sleep(0.02)
        except BaseException:
            process.kill()
            process.wait()
            raise
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        return Run(process.returncode, out.read().decode(errors="replace"),
                   err.read().decode(errors="replace"), seconds,
                   usage.ru_maxrss * 1024)


def checked(run, what):
    if run.returncode != 0:
        raise RuntimeError(f"llamacpp_peer: {what} failed ({run.returncode}):"
                           f"\n{run.stderr[-3000:]}")
    return run


# --- Pure parts: models, command lines and llama.cpp's output. -----------

def served_label(file_type):
    """The served model's label in records and the report: its quant type
    as verifysvc reads it from the file (ModelInfo.file_type: "Q4_1",
    "Q4_K_M"; "GGUF" when empty)."""
    return file_type.strip() or "GGUF"


def wants_f32(choice, served, size_bytes):
    """Whether llama.cpp runs an F32 copy beside the served file of
    `size_bytes`, labelled `served`, for --llamacpp_f32 `choice` (one of
    F32_CHOICES; auto: a file of at most F32_AUTO_MAX_BYTES). Never when
    the served file is F32 itself."""
    if choice not in F32_CHOICES:
        raise ValueError(f"--llamacpp_f32={choice}: one of {F32_CHOICES}")
    if served == "F32" or choice == "off":
        return False
    return choice == "on" or size_bytes <= F32_AUTO_MAX_BYTES


def f32_file_name(model):
    """The file name of the F32 copy of the GGUF `model`: its own name with
    ".F32" before ".gguf" (qwen2.5-coder-1.5b-instruct-q4_k_m.gguf ->
    qwen2.5-coder-1.5b-instruct-q4_k_m.F32.gguf), so that copies of two
    quantizations of one model never share a name."""
    name = os.path.basename(model)
    stem = name[:-len(".gguf")] if name.lower().endswith(".gguf") else name
    return stem + ".F32.gguf"


def peer_models(served_path, served, f32_path=None):
    """llama.cpp's models, label -> GGUF path in the report's column order:
    the served file under `served` (served_label), then its F32 copy, if
    any, under "F32"."""
    models = {served: served_path}
    if f32_path is not None and served != "F32":
        models["F32"] = f32_path
    return models


def bench_argv(tools, model, threads, repetitions, n_prompt, n_gen,
               depths=()):
    """llama-bench's command line for prompt sizes `n_prompt` and generated
    lengths `n_gen` (lists), at context depths `depths` (none: no -d)."""
    join = lambda values: ",".join(str(v) for v in values)  # noqa: E731
    argv = [tools.bench, "-m", model, "-t", str(threads), "-r",
            str(repetitions), "-p", join(n_prompt), "-n", join(n_gen),
            "-o", "json"]
    return argv + (["-d", join(depths)] if depths else [])


def bench_supports_depth(help_text):
    """Whether llama-bench's --help offers -d/--n-depth (added in 2025)."""
    return "--n-depth" in help_text


def parse_bench(text):
    """Rows of llama-bench's `-o json` (or jsonl) output: test ("pp512",
    "tg128", "pp512+tg128"), n_prompt, n_gen, n_depth (0 in versions
    without it), tokens_per_second (mean over the repetitions), stddev,
    samples (tok/s per repetition), n_threads, model_type, build."""
    text = text.strip()
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0),
                default=-1)
    if start < 0:
        raise ValueError("no JSON in llama-bench's output")
    text = text[start:]
    if text.startswith("["):
        tests = json.loads(text)
    else:
        tests = [json.loads(line) for line in text.splitlines() if line.strip()]
    rows = []
    for t in tests:
        n_prompt, n_gen = int(t.get("n_prompt", 0)), int(t.get("n_gen", 0))
        name = "+".join(([f"pp{n_prompt}"] if n_prompt else [])
                        + ([f"tg{n_gen}"] if n_gen else []))
        rows.append({"test": name, "n_prompt": n_prompt, "n_gen": n_gen,
                     "n_depth": int(t.get("n_depth", 0)),
                     "tokens_per_second": float(t["avg_ts"]),
                     "stddev": float(t.get("stddev_ts", 0.0)),
                     "samples": [float(x) for x in t.get("samples_ts", [])],
                     "n_threads": t.get("n_threads"),
                     "model_type": t.get("model_type"),
                     "build": t.get("build_commit")})
    return rows


def write_prompt(path, text):
    """Writes a prompt file that llama.cpp's -f reads back as `text` (it
    drops one trailing newline; --no-escape keeps backslashes); `path`."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return path


def completion_argv(tools, model, prompt_file, n_predict, threads, context,
                    ignore_eos=False):
    """llama-completion's (or classic llama-cli's) command line: the raw
    prompt (no chat template: the file already holds it), greedy, the
    prompt's token ids on stderr, only the generated text on stdout."""
    return ([tools.completion, "-m", model, "-f", prompt_file, "-n",
             str(n_predict), "--temp", "0", "--seed", "0", "-t", str(threads),
             "-c", str(context), "--no-escape", "-no-cnv",
             "--no-display-prompt", "--verbose-prompt"]
            + (["--ignore-eos"] if ignore_eos else []))


def lookup_argv(tools, model, prompt_file, n_predict, threads, context):
    """llama-lookup's command line: greedy, llama.cpp's default draft size,
    n-grams of this request only (no static or dynamic cache files). It
    stops once it has more than -n tokens, so -n is one less."""
    return [tools.lookup, "-m", model, "-f", prompt_file, "-n",
            str(max(1, n_predict - 1)), "--temp", "0", "--seed", "0", "-t",
            str(threads), "-c", str(context), "--no-escape"]


def speculative_argv(binary, model, draft_model, prompt_file, n_predict,
                     threads, context, simple=False):
    """llama-speculative's (`simple`: llama-speculative-simple's) command
    line: `draft_model` drafts (-md) for `model`, both on `threads` threads
    (one after the other, as llama.cpp runs them), llama.cpp's default
    draft size, greedy. Like llama-lookup it stops once past -n: one less.
    The simple one runs only the speculative types it is given: the draft
    model's (without --spec-type it fails to initialize)."""
    return ([binary, "-m", model, "-md", draft_model, "-f", prompt_file, "-n",
             str(max(1, n_predict - 1)), "--temp", "0", "--seed", "0", "-t",
             str(threads), "-td", str(threads), "-c", str(context),
             "--no-escape"]
            + (["--spec-type", "draft-simple"] if simple else []))


def drafting_kinds(tools, draft_model):
    """The DRAFTING_KINDS this install can run: those whose binary it has,
    and those needing a draft model only with `draft_model`."""
    return [kind for kind, (field, needs_draft) in DRAFTING_KINDS.items()
            if getattr(tools, field) and (draft_model or not needs_draft)]


def speculative_kinds(tools, draft_model):
    """The drafting_kinds that draft with `draft_model` (on the served file
    only: its F32 copy gets none)."""
    return [kind for kind in drafting_kinds(tools, draft_model)
            if DRAFTING_KINDS[kind][1]]


def _number(pattern, text, cast=float, default=None):
    match = re.search(pattern, text, re.MULTILINE)
    return cast(match.group(1)) if match else default


def parse_perf(text):
    """llama.cpp's timing lines (common_perf_print, on stderr): load,
    prompt and eval milliseconds, prompt tokens, eval runs and sampling
    milliseconds (None where a line is missing)."""
    return {
        "load_ms": _number(r"load time =\s*([\d.]+) ms", text),
        "prompt_ms": _number(r"prompt eval time =\s*([\d.]+) ms", text),
        "prompt_tokens": _number(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+)",
                                 text, int),
        "eval_ms": _number(r"(?<!prompt) eval time =\s*([\d.]+) ms", text),
        "eval_runs": _number(r"(?<!prompt) eval time =\s*[\d.]+ ms /\s*(\d+)",
                             text, int),
        "sampling_ms": _number(r"sampling time =\s*([\d.]+) ms", text),
    }


def completion_result(perf):
    """(output tokens, request seconds) of a llama-completion run from its
    parse_perf. Every sampled token but the last is run through the model
    once, so the output (its end-of-generation token included, as ours
    count it) is eval runs + 1; seconds are prompt + eval + sampling. (The
    samplers' own count also holds the prompt's tokens.)"""
    if None in (perf["eval_runs"], perf["eval_ms"], perf["prompt_ms"]):
        raise ValueError("no timings in llama.cpp's output")
    ms = perf["prompt_ms"] + perf["eval_ms"] + (perf["sampling_ms"] or 0.0)
    return perf["eval_runs"] + 1, ms / 1e3


def completion_decode(perf):
    """(decode tokens, decode seconds) of a llama-completion run from its
    parse_perf: its eval runs (one forward pass each) and their time, the
    rate llama.cpp prints as the eval line's tokens per second (sampling
    and the prompt left out)."""
    if None in (perf["eval_runs"], perf["eval_ms"]):
        raise ValueError("no eval timings in llama.cpp's output")
    return perf["eval_runs"], perf["eval_ms"] / 1e3


def parse_lookup(text):
    """llama-lookup's summary (stderr; llama-speculative and
    llama-speculative-simple print the same): prompt tokens and seconds
    (encoded), output tokens and seconds (decoded), draft size, drafted and
    accepted tokens."""
    return {
        "prompt_tokens": _number(r"encoded\s+(\d+) tokens", text, int),
        "prompt_seconds": _number(r"encoded\s+\d+ tokens in\s+([\d.]+)", text),
        "output_tokens": _number(r"decoded\s+(\d+) tokens", text, int),
        "decode_seconds": _number(r"decoded\s+\d+ tokens in\s+([\d.]+)", text),
        "n_draft": _number(r"n_draft\s+=\s*(\d+)", text, int),
        "drafted": _number(r"n_drafted\s+=\s*(\d+)", text, int),
        "accepted": _number(r"n_accept\s+=\s*(\d+)", text, int),
    }


def parse_prompt_ids(text):
    """The prompt token ids that --verbose-prompt lists on stderr ("number
    of tokens in prompt = N", then N lines "[time level] id -> 'piece'"; a
    piece may hold newlines); None without that listing."""
    count = _number(r"number of tokens in prompt = (\d+)", text, int)
    if count is None:
        return None
    listing = text[text.index("number of tokens in prompt"):]
    ids = [int(m.group(1)) for m in re.finditer(
        r"^(?:[\d.]+ [A-Z] )?\s*(\d+) -> '", listing, re.MULTILINE)]
    return ids[:count]


def completion_text(stdout):
    """The generated text of a llama-completion run with
    --no-display-prompt: its stdout less the end-of-text marker (after an
    end-of-generation token, whose piece it does not print) and the two
    newlines it ends with."""
    text = stdout[:-2] if stdout.endswith("\n\n") else stdout
    marker = " [end of text]\n"
    return text[:-len(marker)] if text.endswith(marker) else text


def lookup_text(stdout, prompt):
    """The generated text of a llama-lookup (or llama-speculative) run: its
    stdout is two
    newlines, the prompt's pieces, the output's pieces (special ones such
    as the end of turn printed), four newlines. None when the echoed prompt
    is not `prompt` (other tokens than ours)."""
    body = stdout[2:] if stdout.startswith("\n\n") else stdout
    if not body.startswith(prompt):
        return None
    body = body[len(prompt):]
    return body[:-4] if body.endswith("\n" * 4) else body


def compare_text(reference, text, prefix=False):
    """(identical, first differing character or None). With `prefix`,
    `text` may run on past `reference` (lookup overshoots -n)."""
    if text is None:
        return False, 0
    if text == reference or (prefix and text.startswith(reference)):
        return True, None
    return False, next((i for i, (a, b) in enumerate(zip(reference, text))
                        if a != b), min(len(reference), len(text)))


def diverged_token(ids, detokenize, text):
    """The first of our output `ids` whose text `text` does not continue:
    the largest k with detokenize(ids[:k]) a prefix of `text`, found by
    bisection (the prefixes' texts grow with k)."""
    low, high = 0, len(ids)
    while low < high:
        mid = (low + high + 1) // 2
        if text.startswith(detokenize(ids[:mid])):
            low = mid
        else:
            high = mid - 1
    return low


def parse_vm_hwm(status_text):
    """Peak resident set in bytes from /proc/PID/status (VmHWM); None
    without it."""
    kib = _number(r"^VmHWM:\s*(\d+) kB", status_text, int)
    return None if kib is None else kib * 1024


def context_tokens_needed(depths, prompt_sizes):
    """The --max_context_tokens verifysvc needs for ours_speed at `depths`
    and `prompt_sizes`: DECODE_TOKENS after the deepest context, one token
    after the largest prompt, rounded up to CONTEXT_STEP and never below
    MIN_CONTEXT (where the peer prompts fit)."""
    needed = max([d + DECODE_TOKENS for d in depths]
                 + [n + 1 for n in prompt_sizes] + [MIN_CONTEXT])
    return -(-needed // CONTEXT_STEP) * CONTEXT_STEP


def parse_step_cost(lines):
    """{tokens: ms} of verifysvc's start line "verifysvc: forward ms by
    tokens 1:5.7 2:6.6 ... 64:92.1" (one tree-verify forward pass of that
    many tokens after FORWARD_DEPTH cached ones, its fastest of two) among
    `lines`; {} without it."""
    marker = "forward ms by tokens"
    for line in lines:
        if marker in line:
            return {int(n): float(ms) for n, ms in re.findall(
                r"(\d+):([\d.]+)", line.split(marker, 1)[1])}
    return {}


def ms_per_pass(tokens, tokens_per_second):
    """Milliseconds of one forward pass over `tokens` tokens processed at
    `tokens_per_second`."""
    return tokens / tokens_per_second * 1e3


def forward_cost_rows(ours_ms, llama_rows, sizes):
    """The forward-cost curve, a row per tree size in `sizes`: {"tokens":
    N, "ms": {engine: ms of one pass}, "relative": {engine: that / its ms
    at 1 token}}, engines "ours" (`ours_ms`: parse_step_cost's) and each
    model of `llama_rows` (model -> llama-bench pp rows; the fastest
    repetition's ms_per_pass, as verifysvc keeps its fastest). An engine
    without N is left out of that row, and out of "relative" without 1."""
    costs = {"ours": dict(ours_ms)}
    for model, rows in llama_rows.items():
        costs[model] = {
            r["n_prompt"]: ms_per_pass(r["n_prompt"], max(
                r.get("samples") or [r["tokens_per_second"]]))
            for r in rows if r["n_prompt"] and not r["n_gen"]}
    return [{"tokens": n,
             "ms": {e: c[n] for e, c in costs.items() if n in c},
             "relative": {e: c[n] / c[1] for e, c in costs.items()
                          if n in c and c.get(1)}} for n in sizes]


# --- The runs. ------------------------------------------------------------

def bench_model(tools, model, settings, depth_prompt):
    """llama-bench's decode and prompt rows for `model`, its forward-cost
    rows (settings.forward_tokens prompt tokens after FORWARD_DEPTH, kept
    apart from the prompt rows) and its peak RSS. Without -d in this
    llama-bench, decode at depth d is llama-completion on depth_prompt(d),
    a file of d tokens, with --ignore-eos, and the forward cost is at depth
    0."""
    rows, forward, peak = [], [], 0
    # A safety net only: F32 at depth 4000 on a busy machine is slow.
    timeout = 600.0 * settings.repetitions * (
        2 + len(settings.depths) + len(settings.prompt_sizes))
    help_text = subprocess.run([tools.bench, "--help"], capture_output=True,
                               text=True).stdout
    if settings.forward_tokens:
        depths = [FORWARD_DEPTH] if bench_supports_depth(help_text) else []
        run = checked(run_measured(bench_argv(
            tools, model, settings.threads, settings.repetitions,
            settings.forward_tokens, [0], depths), timeout),
            "llama-bench (forward cost)")
        forward = parse_bench(run.stdout)
        peak = max(peak, run.peak_rss)
    if settings.prompt_sizes:
        run = checked(run_measured(bench_argv(
            tools, model, settings.threads, settings.repetitions,
            settings.prompt_sizes, [0]), timeout), "llama-bench -p")
        rows += parse_bench(run.stdout)
        peak = max(peak, run.peak_rss)
    if settings.depths and bench_supports_depth(help_text):
        run = checked(run_measured(bench_argv(
            tools, model, settings.threads, settings.repetitions, [0],
            [DECODE_TOKENS], settings.depths), timeout), "llama-bench -d")
        rows += parse_bench(run.stdout)
        peak = max(peak, run.peak_rss)
    elif settings.depths:
        for depth in settings.depths:
            samples = []
            for _ in range(settings.repetitions):
                run = checked(run_measured(completion_argv(
                    tools, model, depth_prompt(depth), DECODE_TOKENS,
                    settings.threads, depth + DECODE_TOKENS + 16,
                    ignore_eos=True), timeout), "llama-completion (depth)")
                perf = parse_perf(run.stderr)
                samples.append(perf["eval_runs"] / perf["eval_ms"] * 1e3)
                peak = max(peak, run.peak_rss)
            rows.append({"test": f"tg{DECODE_TOKENS}", "n_prompt": 0,
                         "n_gen": DECODE_TOKENS, "n_depth": depth,
                         "tokens_per_second": sum(samples) / len(samples),
                         "samples": samples, "via": "llama-completion"})
    return {"rows": rows, "forward": forward, "peak_rss": peak}


def run_request(tools, model, kind, prompt_path, prompt, settings):
    """One whole request of `kind` ("greedy", or one of DRAFTING_KINDS, the
    speculative ones with settings.draft_model) on the prompt in
    `prompt_path`; a dict of its text, tokens, seconds and the rest."""
    if kind == "greedy":
        run = checked(run_measured(completion_argv(
            tools, model, prompt_path, settings.max_new_tokens,
            settings.threads, settings.context), 600.0), "llama-completion")
        perf = parse_perf(run.stderr)
        tokens, seconds = completion_result(perf)
        decode_tokens, decode_seconds = completion_decode(perf)
        return {"text": completion_text(run.stdout), "output_tokens": tokens,
                "seconds": seconds, "wall_seconds": run.seconds,
                "peak_rss": run.peak_rss,
                "prompt_ids": parse_prompt_ids(run.stderr),
                "decode_tokens": decode_tokens,
                "decode_seconds": decode_seconds}
    binary = getattr(tools, DRAFTING_KINDS[kind][0])
    if kind == "lookup":
        argv = lookup_argv(tools, model, prompt_path, settings.max_new_tokens,
                           settings.threads, settings.context)
    else:
        argv = speculative_argv(binary, model, settings.draft_model,
                                prompt_path, settings.max_new_tokens,
                                settings.threads, settings.context,
                                simple=kind == "speculative-simple")
    name = os.path.basename(binary)
    run = checked(run_measured(argv, 600.0), name)
    summary = parse_lookup(run.stderr)
    if summary["output_tokens"] is None or summary["decode_seconds"] is None:
        raise RuntimeError(f"llamacpp_peer: no summary in {name}'s "
                           f"output:\n{run.stderr[-3000:]}")
    return {"text": lookup_text(run.stdout, prompt),
            "output_tokens": summary["output_tokens"],
            "seconds": summary["prompt_seconds"] + summary["decode_seconds"],
            "wall_seconds": run.seconds, "peak_rss": run.peak_rss,
            "n_draft": summary["n_draft"], "drafted": summary["drafted"],
            "accepted": summary["accepted"]}


def ours_decode(ids, seconds, ttft):
    """(decode tokens, decode seconds) of one request of ours: every output
    token after the first is one forward pass of the decode phase, which
    runs from the first token (TTFT) to the last."""
    return max(0, len(ids) - 1), seconds - ttft


def request_records(job, runs, detokenize):
    """results.json records of one prompt: ours (job["ours"]: engine ->
    (seconds, ids); job["usage"], if there: engine -> ttft_seconds and
    cached_prompt_tokens) and llama.cpp's (`runs`: engine -> run_request
    dict), each compared as text with our plain output (its stop token left
    out); drafting runs (lookup, speculative) also with the same model's
    greedy text, as a prefix.
    decode_tokens / decode_seconds, where known (ours with usage, llama.cpp
    greedy), is the decode rate without the prompt's time."""
    plain_ids = job["ours"]["ours plain"][1]
    if plain_ids and len(plain_ids) < job["max_new_tokens"]:
        plain_ids = plain_ids[:-1]  # The token it stopped on.
    reference = detokenize(plain_ids)
    records = []
    for engine, (seconds, ids) in job["ours"].items():
        record = {"workload": job["workload"], "prompt": job["id"],
                  "engine": engine, "output_tokens": len(ids),
                  "seconds": seconds, "identical": ids[:len(plain_ids)]
                  == plain_ids, "diverged_at": None}
        usage = job.get("usage", {}).get(engine)
        if usage is not None:
            tokens, decode = ours_decode(ids, seconds, usage["ttft_seconds"])
            record.update(decode_tokens=tokens, decode_seconds=decode,
                          ttft_seconds=usage["ttft_seconds"],
                          prompt_tokens=len(job["ids"]),
                          cached_prompt_tokens=usage["cached_prompt_tokens"])
        records.append(record)
    for engine, run in runs.items():
        drafting = "n_draft" in run
        identical, at = compare_text(reference, run["text"], prefix=drafting)
        record = {"workload": job["workload"], "prompt": job["id"],
                  "engine": engine, "output_tokens": run["output_tokens"],
                  "seconds": run["seconds"],
                  "wall_seconds": run["wall_seconds"],
                  "peak_rss": run["peak_rss"], "identical": identical,
                  "diverged_at": None if identical else diverged_token(
                      plain_ids, detokenize, run["text"] or "")}
        if "prompt_ids" in run:
            record["prompt_identical"] = run["prompt_ids"] == job["ids"]
        if run.get("decode_tokens") is not None:
            record.update(decode_tokens=run["decode_tokens"],
                          decode_seconds=run["decode_seconds"])
        if drafting:
            greedy = runs.get(engine.rsplit(" ", 1)[0] + " greedy")
            record.update(n_draft=run["n_draft"], drafted=run["drafted"],
                          accepted=run["accepted"],
                          same_as_greedy=greedy is not None and compare_text(
                              greedy["text"], run["text"], prefix=True)[0])
        records.append(record)
    return records


def filler(ids, length):
    """`length` token ids: `ids` repeated (a long context of real text)."""
    if not ids:
        raise ValueError("no filler ids")
    return (ids * (length // len(ids) + 1))[:length]


def rotated_filler(ids, length, offset):
    """filler() of `ids` rotated left by `offset`: for offsets smaller than
    the first text in `ids`, a prompt that begins like no other, so that
    verifysvc's prefix cache has none of it."""
    offset %= len(ids) if ids else 1
    return filler(ids[offset:] + ids[:offset], length)


def ours_speed(connection, filler_ids, settings):
    """Ours at llama-bench's points, drafts off, through the services:
    decode tok/s generating DECODE_TOKENS after `depth` prompt tokens
    ((output tokens - 1) / (seconds - TTFT): the first token is the
    prefill's) and prompt tok/s (prompt tokens / TTFT, one new token).
    Every repetition of every point gets its own rotation of the filler
    (rotated_filler), so no prompt is served from the prefix cache
    (cached_prompt_tokens, the most of any repetition, says if one was).
    Rows as parse_bench's; a point past the server's context limit
    (settings.context_limit, --max_context_tokens) is skipped."""
    import harness  # Here: the pure parts above load without grpc.
    import workloads
    offsets = iter(range(1, 10 ** 6))  # 0 is the first peer prompt's start.

    def rate(kind, n_prompt, n_gen, depth):
        row = {"test": f"{kind}{n_gen or n_prompt}", "n_prompt": n_prompt,
               "n_gen": n_gen, "n_depth": depth}
        if depth + n_prompt + n_gen > settings.context_limit:
            return dict(row, skipped=f"over --max_context_tokens "
                                     f"({settings.context_limit})")
        samples, cached, stopped_early = [], 0, 0
        # A rotation the model ends early (EOS within MIN_DECODE_TOKENS) is
        # no decode measurement: llama-bench always generates n_gen. Try
        # the next rotation instead, a few times at most.
        for _ in range(3 * settings.repetitions):
            if len(samples) == settings.repetitions:
                break
            prompt = workloads.Prompt(row["test"], {"tokens": rotated_filler(
                filler_ids, depth + n_prompt, next(offsets))})
            usage, _, _ = harness.measure(connection, prompt, "off", "",
                                          max(1, n_gen), settings.timeout)
            ttft = usage.time_to_first_token_seconds
            cached = max(cached, getattr(usage, "cached_prompt_tokens", 0))
            if n_gen and usage.output_tokens < min(n_gen, MIN_DECODE_TOKENS):
                stopped_early += 1
            elif n_gen:
                samples.append((usage.output_tokens - 1)
                               / max(1e-9, usage.total_seconds - ttft))
            else:
                samples.append(usage.prompt_tokens / max(1e-9, ttft))
        if not samples:
            return dict(row, skipped=f"the model stopped within "
                                     f"{MIN_DECODE_TOKENS} tokens every time")
        return dict(row, tokens_per_second=sum(samples) / len(samples),
                    samples=samples, cached_prompt_tokens=cached,
                    stopped_early=stopped_early)

    return ([rate("pp", n, 0, 0) for n in settings.prompt_sizes]
            + [rate("tg", 0, DECODE_TOKENS, d) for d in settings.depths])


def run(connection, tools, models, jobs, filler_ids, settings):
    """The whole peer: ours_speed, bench_model per model (name -> GGUF),
    the forward-cost curve (forward_cost_rows of settings.ours_forward_ms,
    verifysvc's, and llama-bench's), then every job (run.py's: id,
    workload, ids, text, max_new_tokens, ours: engine -> (seconds, ids),
    usage: engine -> ttft_seconds, cached_prompt_tokens) through
    llama-completion and llama-lookup on every model, and the speculative
    kinds (settings.draft_model) on the served one. results.json's
    "llamacpp" section, less what run.py adds."""
    detokenize = connection.client.detokenize
    print(f"  llamacpp: ours at {settings.prompt_sizes} prompt and "
          f"{settings.depths} context tokens", flush=True)
    section = {"ours_bench": ours_speed(connection, filler_ids, settings),
               "bench": {}, "records": []}
    with tempfile.TemporaryDirectory(prefix="bench-llamacpp.") as work:
        def depth_prompt(depth):
            return write_prompt(os.path.join(work, f"depth-{depth}.txt"),
                                detokenize(filler(filler_ids, depth)))
        for name, model in models.items():
            print(f"  llamacpp: llama-bench {name}", flush=True)
            section["bench"][name] = bench_model(tools, model, settings,
                                                 depth_prompt)
        section["forward_cost"] = forward_cost_rows(
            settings.ours_forward_ms, {name: bench["forward"] for name, bench
                                       in section["bench"].items()},
            settings.forward_tokens)
        # Context tokens before each engine's passes (0: no -d here).
        section["forward_depth"] = {"ours": FORWARD_DEPTH, **{
            name: bench["forward"][0]["n_depth"] if bench["forward"] else None
            for name, bench in section["bench"].items()}}
        kinds = ["greedy"] + drafting_kinds(tools, settings.draft_model)
        served = next(iter(models))
        speculative = speculative_kinds(tools, settings.draft_model)
        engines = [(name, kind) for name in models for kind in kinds
                   if name == served or kind not in speculative]
        for i, job in enumerate(jobs):
            path = write_prompt(os.path.join(work, f"prompt-{i}.txt"),
                                job["text"])
            runs = {}
            # Rotate the order per prompt, as run.py rotates its modes.
            for name, kind in engines[i % len(engines):] + engines[
                    :i % len(engines)]:
                engine = f"llama.cpp {name} {kind}"
                try:
                    runs[engine] = run_request(tools, models[name], kind, path,
                                               job["text"], settings)
                except RuntimeError as e:
                    # One mode failing (a draft model it cannot use) costs
                    # its records, not the run: the report lists the error.
                    print(f"  llamacpp: {engine}: {e}", flush=True)
                    section.setdefault("errors", {})[engine] = str(e)[:2000]
            records = request_records(job, {
                engine: runs[engine] for engine in
                (f"llama.cpp {name} {kind}" for name, kind in engines)
                if engine in runs}, detokenize)
            section["records"] += records
            print(f"  llamacpp {job['workload']} {job['id']}: " + " | ".join(
                f"{r['engine']} {r['output_tokens'] / r['seconds']:.1f} tok/s"
                + ("" if r["identical"] else " (differs)") for r in records),
                flush=True)
    return section
