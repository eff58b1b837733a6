#!/usr/bin/python3
"""Runs the benchmark suite through the real gRPC services and writes
results.json, report.md and PNG plots (bench/report.py).

    bench/run.py                  # full suite, into bench/results/
    bench/run.py --quick          # CI: a few prompts, into bench/results/quick/
    bench/run.py --verifysvc=HOST:PORT   # use running services instead
    bench/run.py --model=qwen2.5-coder-1.5b   # serve another model

Without --verifysvc it starts draftsvc (fresh RocksDB in a temp folder) and
verifysvc from the built binaries (.bazel/bin/...) on loopback, and stops
them at the end; verifysvc serves --model (a name of tools/models.sh or a
GGUF path; default: its own, the embedded SmolLM2-135M), and the peers run
the same file. Each workload's prompts run at batch 1 in three modes:
plain (drafts off), trie-hierarchical and trie-parallel, in an order that
rotates per prompt so no mode always goes first. Each drafted mode has its
own draftsvc namespace per workload, filled by the warm-up split first, and
its own verifysvc process (ModeConnections; Token Recycling's table is the
process's), so no mode ever sees another mode's output of the same prompt.

More, each behind its flags and with its own section in report.md:

    --concurrency=1,4,8,16   that many client threads, drafts off vs
                             trie-hierarchical at each level (sweeps.py)
    --ablations=grid,capacity,prompt_boost,sharing (or all)
                             small tables on a few prompts (sweeps.py)
    --peer=hf                Hugging Face transformers on the same GGUF:
                             greedy and prompt lookup decoding (hf_peer.py;
                             sets up its own venv; never in CI)
    --peer=llamacpp          llama.cpp on the same GGUF as shipped (and an F32
                             copy of small files, --llamacpp_f32):
                             llama-bench decode and prompt speeds, the
                             forward-cost curve, greedy and prompt lookup
                             requests on --peer_prompts prompts per workload
                             (llamacpp_peer.py; builds llama.cpp on first
                             use; raises verifysvc's --max_context_tokens
                             for the deepest context; never in CI);
                             --peer=hf,llamacpp runs both
    --source_modes=plain,trie,ngram,jacobi,assistant,mixed (or all)
                             the draft-source ablation: each workload's
                             prompts in those modes (each a DraftParams.sources
                             choice, harness.SOURCE_MODES), EDL, tok/s,
                             speedup vs plain and accepted/verified draft
                             tokens per source; a mode whose source draftsvc
                             does not run is reported as failed, not fatal
    --ceiling                plain outputs, and the EDL drafts made of
                             seen text could reach on them at best
                             (ceiling.py)
    --all                    --concurrency=1,4,8,16 --ablations=all
    --no_main                skip the three-mode table (e.g. peer only)

Exit status 1 when any output of ours differs from plain decoding's (the
service must be lossless); the quick mode asserts nothing else. The peer's
mismatches are reported, never fatal.
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import types

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import ceiling  # noqa: E402
import fetch_workloads  # noqa: E402
import harness  # noqa: E402  (puts clients/python on sys.path)
import hf_peer  # noqa: E402  (its system-Python half)
import llamacpp_peer  # noqa: E402
import report  # noqa: E402
import sweeps  # noqa: E402
import workloads  # noqa: E402

REPO_ROOT = harness.REPO_ROOT
MODES = harness.MODES
DRAFTED = [m for m in MODES if m != "plain"]
ALL_CONCURRENCY = "1,4,8,16"
PEERS = ("hf", "llamacpp")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="CI mode: defaults --limit=2 --warmup=1 "
                             "--max_new_tokens=32, output under results/quick")
    parser.add_argument("--limit", type=int,
                        help="measured prompts per workload (16; quick 2)")
    parser.add_argument("--warmup", type=int,
                        help="warm-up prompts per workload (4; quick 1)")
    parser.add_argument("--max_new_tokens", type=int,
                        help="output tokens per request (128; quick 32)")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sample every prompt at this temperature, "
                             "seeded per prompt (the adversarial soup keeps "
                             "its own 1.5); 0: greedy (default)")
    parser.add_argument("--workloads", default=",".join(workloads.NAMES),
                        help="comma-separated subset of %(default)s")
    parser.add_argument("--out", help="output folder (bench/results, quick: "
                                      "bench/results/quick)")
    parser.add_argument("--cache", default=fetch_workloads.default_cache(),
                        help="workload cache (default %(default)s)")
    parser.add_argument("--verifysvc", help="address of a running verifysvc; "
                        "default: start both services here (the capacity and "
                        "prompt_boost ablations need that)")
    parser.add_argument("--model",
                        help="the GGUF verifysvc serves and the peers run: a "
                             "name of tools/models.sh (smollm2-135m, "
                             "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b; fetch "
                             "with tools/setup.sh --model=NAME) or a file; "
                             "default: verifysvc's (the embedded "
                             "SmolLM2-135M)")
    parser.add_argument("--bin_dir", default=os.path.join(REPO_ROOT, ".bazel", "bin"))
    parser.add_argument("--verifysvc_flag", action="append", default=[],
                        help="extra verifysvc flag, e.g. --verifysvc_flag="
                             "--decoding_length=16 (repeatable)")
    parser.add_argument("--draftsvc_flag", action="append", default=[],
                        help="extra draftsvc flag (repeatable)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="deadline of each request, seconds")
    parser.add_argument("--no_main", action="store_true",
                        help="skip the main table (plain vs trie modes)")
    parser.add_argument("--all", action="store_true",
                        help=f"--concurrency={ALL_CONCURRENCY} --ablations=all "
                             "unless those are given")

    group = parser.add_argument_group("concurrency (sweeps.py)")
    group.add_argument("--concurrency", default="",
                       help="client thread counts, e.g. " + ALL_CONCURRENCY)
    group.add_argument("--concurrency_prompts", type=int,
                       help="requests per run, mixed over the workloads' "
                            "measured prompts (16; quick 4)")
    group.add_argument("--concurrency_warmup", type=int,
                       help="warm-up requests per drafted namespace (4; "
                            "quick 2)")

    group = parser.add_argument_group("ablations (sweeps.py)")
    group.add_argument("--ablations", default="",
                       help="comma-separated subset of "
                            f"{','.join(sweeps.ABLATIONS)}, or all")
    group.add_argument("--ablation_prompts", type=int, default=4,
                       help="measured prompts per cell, mixed over the "
                            "workloads (default %(default)s)")
    group.add_argument("--ablation_warmup", type=int, default=2,
                       help="warm-up prompts per cell (default %(default)s)")
    group.add_argument("--ablation_max_new_tokens", type=int, default=64,
                       help="output tokens per ablation request "
                            "(default %(default)s)")
    group.add_argument("--grid_decoding", default="4,8,16,32,64",
                       help="grid's decoding_length values (%(default)s)")
    group.add_argument("--grid_branch", default="4,8,12,16",
                       help="grid's branch_length values (%(default)s)")
    group.add_argument("--ablation_capacity", default="256,1024",
                       help="small draftsvc --capacity_nodes values, beside "
                            "the default (%(default)s)")
    group.add_argument("--ablation_prompt_boost", default="0,1",
                       help="draftsvc --prompt_boost values beside the "
                            "default (%(default)s)")

    group = parser.add_argument_group("draft-source ablation")
    group.add_argument("--split_cores", action="store_true",
                       help="after --source_modes, run the drafted modes "
                       "again with draftsvc pinned to CPU 0 and verifysvc "
                       "to CPU 1 (--matmul_threads=1, "
                       "--assistant_cost_share=0); their speedup is "
                       "against plain decoding on both cores from the "
                       "first table")
    group.add_argument("--source_modes", default="",
                       help="comma-separated modes of harness.SOURCE_MODES "
                            "(plain is always run), or all; empty = off")
    group = parser.add_argument_group("EDL ceilings of seen text (ceiling.py)")
    group.add_argument("--ceiling", action="store_true",
                       help="plain outputs of each workload's prompts, and "
                       "the EDL drafts made of seen text could reach on them "
                       "at best")
    group.add_argument("--ceiling_max_draft", type=int, default=16,
                       help="draft tokens a step at most (%(default)s)")
    group.add_argument("--ceiling_budgets", default="4,8,16",
                       help="tree budgets of the replay of draftsvc's own "
                       "trie trees on the same outputs (a fresh draftsvc; "
                       "empty: no replay; %(default)s)")
    group = parser.add_argument_group("peers (hf_peer.py, llamacpp_peer.py)")
    group.add_argument("--peer", default="",
                       help="comma-separated peers to run beside ours on the "
                            f"same GGUF: {','.join(PEERS)}")
    group.add_argument("--peer_prompts", type=int,
                       help="hf: prompts in all, mixed over the workloads' "
                            "measured ones; llamacpp: measured prompts with "
                            "text per workload, at most --limit (8; quick 1)")
    group.add_argument("--peer_venv", default=hf_peer.default_venv(),
                       help="venv with torch and transformers, created if "
                            "missing (default %(default)s)")
    group.add_argument("--peer_threads", type=int, default=2,
                       help="torch.set_num_threads, llama.cpp's -t (default "
                            "%(default)s, verifysvc's --matmul_threads on "
                            "this machine)")
    group.add_argument("--llamacpp_dir", default=llamacpp_peer.default_install(),
                       help="llama.cpp install (tools/llamacpp_build.sh), "
                            "built if missing (default %(default)s)")
    group.add_argument("--llamacpp_repetitions", type=int,
                       help="llama-bench -r, and our runs per speed point "
                            "(5; quick 1)")
    group.add_argument("--llamacpp_depths", default="64,1000,4000",
                       help="context tokens before the decode speed tests "
                            "(llama-bench -d; default %(default)s)")
    group.add_argument("--llamacpp_prompt_sizes", default="512,2000",
                       help="prompt speed tests (llama-bench -p; default "
                            "%(default)s)")
    group.add_argument("--llamacpp_forward_tokens",
                       default=",".join(map(str, llamacpp_peer.FORWARD_TOKENS)),
                       help="the forward-cost curve's tokens per pass "
                            "(llama-bench -p ... -d "
                            f"{llamacpp_peer.FORWARD_DEPTH}; default "
                            "%(default)s)")
    group.add_argument("--llamacpp_context", type=int,
                       help="llama-completion/llama-lookup -c (default: "
                            "verifysvc's --max_context_tokens)")
    group.add_argument("--llamacpp_draft_model",
                       help="llama.cpp's draft model (a name of "
                            "tools/models.sh or a GGUF path): with it "
                            "llama-speculative and llama-speculative-simple "
                            "run too, e.g. qwen2.5-coder-0.5b for the 1.5B; "
                            "give ours the same file with --draftsvc_flag="
                            "--assistant_model=...")
    group.add_argument("--llamacpp_f32", choices=llamacpp_peer.F32_CHOICES,
                       default="auto",
                       help="also run llama.cpp on an F32 copy of the model "
                            "(llama-quantize, kept beside the llama.cpp "
                            "install); auto: only for a GGUF of at most "
                            f"{llamacpp_peer.F32_AUTO_MAX_BYTES >> 20} MiB "
                            "(the default SmolLM2, not the Qwen models; "
                            "default %(default)s)")
    args = parser.parse_args(argv)

    quick = args.quick
    args.limit = args.limit if args.limit is not None else (2 if quick else 16)
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 4)
    args.max_new_tokens = args.max_new_tokens or (32 if quick else 128)
    args.out = args.out or os.path.join(
        BENCH_DIR, "results", "quick" if quick else "")
    args.workloads = [w for w in args.workloads.split(",") if w]
    if args.all:
        args.concurrency = args.concurrency or ALL_CONCURRENCY
        args.ablations = args.ablations or "all"
    try:
        args.concurrency = sorted(set(harness.parse_int_list(args.concurrency)))
        args.grid_decoding = harness.parse_int_list(args.grid_decoding)
        args.grid_branch = harness.parse_int_list(args.grid_branch)
        args.ablation_capacity = harness.parse_int_list(args.ablation_capacity)
        args.ablation_prompt_boost = [
            float(x) for x in args.ablation_prompt_boost.split(",") if x.strip()]
        args.llamacpp_depths = harness.parse_int_list(args.llamacpp_depths)
        args.llamacpp_prompt_sizes = harness.parse_int_list(
            args.llamacpp_prompt_sizes)
        args.llamacpp_forward_tokens = harness.parse_int_list(
            args.llamacpp_forward_tokens)
    except ValueError as e:
        parser.error(str(e))
    args.model_file = None
    if args.model is not None:
        if args.verifysvc:
            parser.error("--model: a running --verifysvc serves its own model")
        if sweeps.effective_flag(args.verifysvc_flag, "model", None) is not None:
            parser.error("--model and --verifysvc_flag=--model: give one")
        try:
            args.model_file = harness.model_path(args.model)
        except ValueError as e:
            parser.error(f"--model: {e}")
        args.verifysvc_flag = args.verifysvc_flag + [
            f"--model={args.model_file}"]
    args.llamacpp_draft_file = None
    if args.llamacpp_draft_model:
        try:
            args.llamacpp_draft_file = harness.model_path(
                args.llamacpp_draft_model)
        except ValueError as e:
            parser.error(f"--llamacpp_draft_model: {e}")
    args.peer = [p for p in args.peer.split(",") if p]
    if set(args.peer) - set(PEERS):
        parser.error(f"--peer: unknown {sorted(set(args.peer) - set(PEERS))}; "
                     f"pick from {','.join(PEERS)}")
    args.llamacpp_repetitions = args.llamacpp_repetitions or (1 if quick else 5)
    context = llamacpp_peer.context_tokens_needed(args.llamacpp_depths,
                                                  args.llamacpp_prompt_sizes)
    if ("llamacpp" in args.peer and not args.verifysvc
            and context > llamacpp_peer.MIN_CONTEXT
            and sweeps.effective_flag(args.verifysvc_flag,
                                      "max_context_tokens", None) is None):
        # Room for the deepest decode test; verifysvc caps it at the
        # model's context length, and ours_speed skips what is past that.
        args.verifysvc_flag = args.verifysvc_flag + [
            f"--max_context_tokens={context}"]
    if ("hf" in args.peer and not args.verifysvc and sweeps.effective_flag(
            args.verifysvc_flag, "activations", None) is None):
        # HF transformers' tokens are the exact form's: compare with it
        # (verifysvc's default, int8 activations, is a slightly different
        # model).
        args.verifysvc_flag = args.verifysvc_flag + ["--activations=f32"]
    if (not args.verifysvc and sweeps.effective_flag(
            args.verifysvc_flag, "prefix_cache_mib", None) is None):
        # The modes run one after another on each prompt: with the prefix
        # cache on, the later ones would skip the prefill the first one
        # paid for, and the ratios would credit drafts with the cache's
        # gain (prefix_cache_bench measures that on its own).
        args.verifysvc_flag = args.verifysvc_flag + ["--prefix_cache_mib=0"]
    args.source_modes = (list(harness.SOURCE_MODES)
                         if args.source_modes == "all" else
                         [m for m in args.source_modes.split(",") if m])
    unknown = sorted(set(args.source_modes) - set(harness.SOURCE_MODES))
    if unknown:
        parser.error(f"--source_modes: unknown {unknown}; pick from "
                     f"{','.join(harness.SOURCE_MODES)} or all")
    if args.source_modes and "plain" not in args.source_modes:
        args.source_modes = ["plain"] + args.source_modes
    if (args.source_modes and not args.verifysvc and sweeps.effective_flag(
            args.verifysvc_flag, "lookahead_window", None) is None):
        # No Jacobi window unless a mode asks for one. Each mode sends its
        # window itself (W = 0: none, whatever the server's default); the
        # flag keeps the server's default window off as well, which the
        # report lists with the other server flags.
        args.verifysvc_flag = args.verifysvc_flag + ["--lookahead_window=0"]
    args.ablations = (list(sweeps.ABLATIONS) if args.ablations == "all" else
                      [a for a in args.ablations.split(",") if a])
    unknown = sorted(set(args.ablations) - set(sweeps.ABLATIONS))
    if unknown:
        parser.error(f"--ablations: unknown {unknown}; pick from "
                     f"{','.join(sweeps.ABLATIONS)} or all")
    if args.verifysvc and set(args.ablations) & {"capacity", "prompt_boost"}:
        parser.error("the capacity and prompt_boost ablations restart "
                     "draftsvc: leave out --verifysvc")
    args.concurrency_prompts = args.concurrency_prompts or (4 if quick else 16)
    args.concurrency_warmup = (args.concurrency_warmup
                               if args.concurrency_warmup is not None
                               else (2 if quick else 4))
    args.peer_prompts = args.peer_prompts or (1 if quick else 8)
    return args


def throwaway_request(connection, args):
    """One plain request on a new verifier: first-call costs stay out of
    the numbers."""
    harness.measure(connection, workloads.Prompt("warm", {"prompt": "Hello"}),
                    "off", "", args.max_new_tokens, args.timeout)


class ModeConnections:
    """The verifysvc connection of each mode: plain decoding on the main one,
    each drafted mode on a process of its own, started on first use as a
    sibling of the main verifysvc (same flags and draftsvc). A verifier
    learns from what it verifies (Token Recycling keeps one table per
    process, across namespaces), so a mode that ran the same prompt right
    after another would draft from the other's predictions for it: on the
    2-core machine the second of two drafted modes on a prompt reached chat
    EDL 1.63-1.87 where the first reached 1.25-1.37
    (bench/results/mode_isolation). With services given by --verifysvc
    (`service` None) every mode shares that one."""

    def __init__(self, stack, connection, service, args):
        self.stack, self.main, self.service = stack, connection, service
        self.args = args
        self.by_mode = {}
        self.services = {}  # drafted mode: its verifysvc

    def cost_curves(self):
        """{mode: {tokens: ms}}: each started verifier's cost model now
        (plain: the main one), as the draft budget and the cut charge rows
        after the passes it served; none with services given."""
        services = dict(self.services)
        if self.service is not None:
            services["plain"] = self.service
        curves = {}
        for mode, service in services.items():
            try:
                curves[mode] = ceiling.served_cost_curve(service.metrics())
            except OSError as e:
                print(f"{mode}: no cost model scraped: {e}", flush=True)
        return curves

    @property
    def shared(self):
        return self.service is None

    def __call__(self, mode):
        if mode == "plain" or self.service is None:
            return self.main
        if mode not in self.by_mode:
            sibling = self.service.sibling(f"verifysvc-{mode}")
            self.stack.callback(sibling.stop)
            self.services[mode] = sibling
            connection = self.stack.enter_context(
                harness.Connection(sibling.wait_address()))
            connection.client.wait_ready(timeout=30)
            throwaway_request(connection, self.args)
            self.by_mode[mode] = connection
        return self.by_mode[mode]


def run_workload(connect, workload, namespace_prefix, args):
    """Warm-up, then the measured prompts in every mode (each on
    connect(mode)); their records."""
    namespace = {m: f"{namespace_prefix}-{workload.name}-{m}" for m in DRAFTED}
    measure = lambda prompt, mode: harness.measure(  # noqa: E731
        connect(mode), prompt, MODES[mode], namespace.get(mode, ""),
        args.max_new_tokens, args.timeout)
    for prompt in workload.warmup:
        for mode in DRAFTED:
            measure(prompt, mode)
    records = []
    names = list(MODES)
    for i, prompt in enumerate(workload.measured):
        order = names[i % len(names):] + names[:i % len(names)]
        results = {mode: (measure(prompt, mode), position)
                   for position, mode in enumerate(order)}
        plain_ids = results["plain"][0][1]
        line = []
        for mode in names:
            measured, position = results[mode]
            record = harness.make_record(workload.name, prompt.id, mode,
                                         measured, plain_ids, position=position)
            records.append(record)
            usage = measured[0]
            line.append(f"{mode} {usage.output_tokens / usage.total_seconds:.1f} "
                        f"tok/s EDL {usage.edl:.2f}"
                        + ("" if record["identical"] else " MISMATCH"))
        print(f"  {workload.name} {i + 1}/{len(workload.measured)} {prompt.id}: "
              + " | ".join(line), flush=True)
    return records


# The verifier's flags with draftsvc on a core of its own: one matmul thread
# on its one core, and none of the assistant's pass time charged to the
# verify pass (the assistant drafts on draftsvc's core).
SPLIT_VERIFYSVC_FLAGS = ["--matmul_threads=1", "--assistant_cost_share=0"]


def run_split_cores(args, selected, prefix):
    """The drafted source modes with draftsvc on CPU 0 and verifysvc on CPU
    1 (one matmul thread), on a fresh pair; plain decoding is not rerun:
    the report compares with the first table's (both cores)."""
    start = time.perf_counter()
    split_args = types.SimpleNamespace(**vars(args))
    split_args.source_modes = ["plain"] + [m for m in args.source_modes
                                           if m != "plain"]
    section = {"modes": split_args.source_modes, "records": [], "errors": {},
               "draftsvc_cpus": "0", "verifysvc_cpus": "1",
               "verifysvc_flags": SPLIT_VERIFYSVC_FLAGS}
    print("draft sources, split cores: draftsvc on CPU 0, verifysvc on CPU 1",
          flush=True)
    with contextlib.ExitStack() as stack:
        address, verifysvc = harness.start_services(
            stack, args.bin_dir, args.draftsvc_flag,
            args.verifysvc_flag + SPLIT_VERIFYSVC_FLAGS,
            draftsvc_cpus="0", verifysvc_cpus="1")
        connection = stack.enter_context(harness.Connection(address))
        connection.client.wait_ready(timeout=30)
        connect = ModeConnections(stack, connection, verifysvc, args)
        for workload in selected:
            records, errors = run_source_ablation(connect, workload,
                                                  prefix, split_args)
            section["records"] += records
            if errors:
                section["errors"][workload.name] = errors
    section["seconds"] = time.perf_counter() - start
    return section


def run_source_ablation(connect, workload, namespace_prefix, args):
    """The draft-source ablation on one workload: warm-up, then every
    measured prompt in each of args.source_modes (order rotating per
    prompt), each drafted mode in its own namespace on connect(mode)
    (ModeConnections). Returns (records,
    {mode: error}) where a mode that failed (e.g. FAILED_PRECONDITION: its
    source is not served) is left out of the records after its error."""
    import grpc
    modes = args.source_modes
    namespace = {m: f"{namespace_prefix}-src-{workload.name}-{m}"
                 for m in modes if m != "plain"}
    errors = {}

    def measure(prompt, mode):
        spec = harness.SOURCE_MODES[mode]
        try:
            return harness.measure(
                connect(mode), prompt, spec["draft_mode"],
                namespace.get(mode, ""),
                args.max_new_tokens, args.timeout,
                sources=spec.get("sources", ()),
                lookahead=spec["lookahead"])
        except grpc.RpcError as e:
            if mode == "plain":
                raise  # the baseline: nothing to compare without it
            errors[mode] = f"{e.code().name}: {e.details()}"
            return None

    for prompt in workload.warmup:
        for mode in modes:
            if mode != "plain" and mode not in errors:
                measure(prompt, mode)
    records = []
    for i, prompt in enumerate(workload.measured):
        order = modes[i % len(modes):] + modes[:i % len(modes)]
        results = {}
        for position, mode in enumerate(order):
            if mode in errors:
                continue
            measured = measure(prompt, mode)
            if measured is not None:
                results[mode] = (measured, position)
        plain_ids = results["plain"][0][1]
        line = []
        for mode in modes:
            if mode not in results:
                continue
            measured, position = results[mode]
            record = harness.make_record(workload.name, prompt.id, mode,
                                         measured, plain_ids,
                                         position=position)
            records.append(record)
            usage = measured[0]
            line.append(f"{mode} EDL {usage.edl:.2f}"
                        + ("" if record["identical"] else " MISMATCH"))
        print(f"  sources {workload.name} {i + 1}/{len(workload.measured)} "
              f"{prompt.id}: " + " | ".join(line), flush=True)
    return records, errors


def mixed_jobs(selected, split, count):
    """The first `count` (workload name, Prompt) of the workloads' `split`
    ("warmup" or "measured"), taken round-robin over the workloads."""
    return harness.interleave([[(w.name, p) for p in getattr(w, split)]
                               for w in selected])[:count]


def server_defaults(args):
    """The flags the ablations vary, as the default service pair runs them:
    the binaries' defaults (--helpfull), overridden by --*svc_flag."""
    wanted = {"draftsvc": ("capacity_nodes", "prompt_boost"),
              "verifysvc": ("decoding_length", "branch_length")}
    extra = {"draftsvc": args.draftsvc_flag, "verifysvc": args.verifysvc_flag}
    values = {}
    for name, flags in wanted.items():
        binary = os.path.join(args.bin_dir, name, name)
        try:
            text = subprocess.run([binary, "--helpfull"], capture_output=True,
                                  text=True, timeout=60).stdout
        except OSError:  # --verifysvc without local binaries: unknown.
            text = ""
        defaults = sweeps.flag_defaults(text, flags)
        for flag in flags:
            values[flag] = sweeps.effective_flag(extra[name], flag,
                                                 defaults.get(flag, "?"))
    return values


def peer_namespace(results, peer, n):
    """A fresh draftsvc namespace for a peer's n-th prompt."""
    stamp = results["started"].replace(":", "").replace("-", "")[:15]
    return f"bench-{peer}-{stamp}-{n}"


def ours_on_peer_prompt(connection, prompt, namespace, args):
    """Ours on one peer prompt: its token ids (our Tokenize RPC) and, for
    plain and trie-hierarchical (in `namespace`, fresh: drafts from the
    prompt and its own output only), (server seconds, output ids) and
    {ttft_seconds, cached_prompt_tokens} (trie-hierarchical runs second:
    its prompt may come from the prefix cache)."""
    ids = hf_peer.prompt_ids(connection.client, prompt.request)
    mine, usages = {}, {}
    for mode in ("plain", "trie-hierarchical"):
        usage, out, _ = harness.measure(connection, prompt, MODES[mode],
                                        namespace, args.max_new_tokens,
                                        args.timeout)
        if usage.prompt_tokens != len(ids):
            raise RuntimeError(
                f"peer: Tokenize gave {len(ids)} ids for {prompt.id} but "
                f"Generate saw {usage.prompt_tokens}; the peer would "
                "decode another prompt")
        mine[mode] = (usage.total_seconds, out)
        usages[mode] = {
            "ttft_seconds": usage.time_to_first_token_seconds,
            "cached_prompt_tokens": getattr(usage, "cached_prompt_tokens", 0)}
    return ids, mine, usages


def peer_text_jobs(selected, per_workload):
    """(workload name, Prompt) of the first `per_workload` measured prompts
    with text (token soup has none) of every workload, round-robin over
    the workloads."""
    return harness.interleave([
        [(w.name, p) for p in w.measured if "tokens" not in p.request][
            :per_workload] for w in selected])


def run_llamacpp(connection, selected, info, args, results, verifysvc):
    """--peer=llamacpp (llamacpp_peer.py): llama.cpp's speeds and requests
    on the GGUF verifysvc serves (labelled by its quant type) and, per
    --llamacpp_f32, its F32 copy, ours beside them on the same prompts
    (--peer_prompts per workload, those with text: token soup has none)
    and our forward-cost line from verifysvc's start
    (results["verifysvc_log"]). Fills results["llamacpp"]."""
    if not os.path.isfile(info.model_file):
        raise RuntimeError(f"llamacpp: {info.model_file}, the file verifysvc "
                           "serves, is not on this machine")
    tools = llamacpp_peer.ensure_build(args.llamacpp_dir)
    served = llamacpp_peer.served_label(info.file_type)
    f32 = None
    if llamacpp_peer.wants_f32(args.llamacpp_f32, served,
                               os.path.getsize(info.model_file)):
        f32 = llamacpp_peer.ensure_f32(tools, info.model_file,
                                       args.llamacpp_dir)
    models = llamacpp_peer.peer_models(info.model_file, served, f32)
    settings = types.SimpleNamespace(
        threads=args.peer_threads, repetitions=args.llamacpp_repetitions,
        depths=args.llamacpp_depths, prompt_sizes=args.llamacpp_prompt_sizes,
        max_new_tokens=args.max_new_tokens, timeout=args.timeout,
        context_limit=info.context_length,
        context=args.llamacpp_context or info.context_length,
        forward_tokens=args.llamacpp_forward_tokens,
        draft_model=args.llamacpp_draft_file,
        ours_forward_ms=llamacpp_peer.parse_step_cost(
            results.get("verifysvc_log", [])))
    texts = [(w, p) for w, p in mixed_jobs(selected, "measured", 10 ** 6)
             if "tokens" not in p.request]
    jobs, filler_ids = [], []
    engines = {"plain": "ours plain",
               "trie-hierarchical": "ours trie-hierarchical (cold)"}
    for n, (workload, prompt) in enumerate(
            peer_text_jobs(selected, args.peer_prompts)):
        ids, mine, usages = ours_on_peer_prompt(
            connection, prompt, peer_namespace(results, "llamacpp", n), args)
        jobs.append({"id": prompt.id, "workload": workload, "ids": ids,
                     "text": connection.client.detokenize(ids),
                     "max_new_tokens": args.max_new_tokens,
                     "ours": {e: mine[m] for m, e in engines.items()},
                     "usage": {e: usages[m] for m, e in engines.items()}})
    # Real text for the long contexts of the speed tests.
    for workload, prompt in texts:
        if len(filler_ids) > max(args.llamacpp_depths + args.llamacpp_prompt_sizes,
                                 default=0):
            break
        filler_ids += hf_peer.prompt_ids(connection.client, prompt.request)
    section = llamacpp_peer.run(connection, tools, models, jobs, filler_ids,
                                settings)
    ours_rss = None
    if verifysvc is not None:
        with open(f"/proc/{verifysvc.process.pid}/status") as f:
            ours_rss = llamacpp_peer.parse_vm_hwm(f.read())
    results["llamacpp"] = dict(
        section, version=tools.build_info.splitlines()[0],
        build_info=tools.build_info, threads=args.peer_threads,
        repetitions=args.llamacpp_repetitions, context=settings.context,
        context_limit=info.context_length, max_new_tokens=args.max_new_tokens,
        peer_prompts=args.peer_prompts,
        decode_tokens=llamacpp_peer.DECODE_TOKENS, model_name=info.name,
        f32=args.llamacpp_f32,
        models={k: os.path.basename(v) for k, v in models.items()},
        lookup=tools.lookup is not None, ours_peak_rss=ours_rss,
        draft_model=(os.path.basename(args.llamacpp_draft_file)
                     if args.llamacpp_draft_file else None),
        speculative=llamacpp_peer.speculative_kinds(
            tools, args.llamacpp_draft_file))


def run_peer(connection, selected, info, args, results):
    """--peer=hf: ours (plain, and trie-hierarchical with a fresh namespace
    per request, i.e. drafts from the prompt and its own output only, like
    prompt lookup) and HF's greedy and prompt lookup, same prompts, same
    token ids, one at a time. Fills results["peer"]."""
    python = hf_peer.ensure_venv(args.peer_venv)
    jobs, ours = [], []
    for n, (workload, prompt) in enumerate(
            mixed_jobs(selected, "measured", args.peer_prompts)):
        ids, mine, _ = ours_on_peer_prompt(
            connection, prompt, peer_namespace(results, "hf", n), args)
        # Our end-of-generation ids: the model's EOS, and the token our plain
        # run stopped on (the chat template's end of turn may differ).
        eos = [info.eos_token_id]
        plain = mine["plain"][1]
        if plain and plain[-1] != eos[0] and len(plain) < args.max_new_tokens:
            eos.append(plain[-1])
        jobs.append({"id": prompt.id, "workload": workload, "ids": ids,
                     "max_new_tokens": args.max_new_tokens, "eos": eos})
        ours.append(mine)
    with tempfile.TemporaryDirectory(prefix="bench-peer.") as work:
        # Generous: 4 s a token, both ways; the load alone takes ~10 s.
        timeout = 600.0 + 8.0 * len(jobs) * args.max_new_tokens
        out = hf_peer.run_worker(python, info.model_file, jobs,
                                 args.peer_threads, work, timeout)
    results["peer"] = {
        "name": "hf", "torch": out["torch"],
        "transformers": out["transformers"], "threads": out["threads"],
        "load_seconds": out["load_seconds"],
        "prompt_lookup_num_tokens": out["prompt_lookup_num_tokens"],
        "max_new_tokens": args.max_new_tokens,
        "records": hf_peer.peer_records(jobs, ours, out["results"])}


def machine_info():
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)),
            "load_average_start": os.getloadavg()}
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((line.split(":", 1)[1].strip() for line in f
                                if line.startswith("model name")), "")
    return info


def git_commit():
    def git(*cmd):
        return subprocess.run(["git", *cmd], cwd=REPO_ROOT, capture_output=True,
                              text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("-dirty" if git("status", "--porcelain") else "")


def our_mismatches(results):
    """Records of ours (main, concurrency, ablations) that differ from plain
    decoding; the peer's are not ours."""
    found = [r for r in results.get("records", []) if not r["identical"]]
    found += [r for r in results.get("concurrency", {}).get("records", [])
              if not r["identical"]]
    for section, label in (("source_ablation", "sources"),
                           ("source_ablation_split", "sources, split cores")):
        found += [dict(r, mode=f"{label} {r['mode']}")
                  for r in results.get(section, {}).get("records", [])
                  if not r["identical"]]
    for table in results.get("ablations", {}).get("tables", {}).values():
        for cell in table["cells"]:
            found += [dict(r, mode=f"{r['mode']} {cell['params']}")
                      for r in cell["records"] if not r["identical"]]
    return found


def start_draftsvc(stack, args):
    """A draftsvc of its own (fresh RocksDB in a temp folder, the run's
    --draftsvc_flag), stopped when `stack` closes; its address."""
    work = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench."))
    service = harness.Service(
        "draftsvc", [os.path.join(args.bin_dir, "draftsvc", "draftsvc"),
                     f"--db_path={work}/db", *args.draftsvc_flag], work)
    stack.callback(service.stop)
    return service.wait_address()


def run_all(stack, args, results, started_services):
    """Everything that talks to the services; fills `results`. The
    verifysvc it starts goes into `started_services` (for its log)."""
    address = args.verifysvc
    if address is None:
        address, verifysvc = harness.start_services(
            stack, args.bin_dir, args.draftsvc_flag, args.verifysvc_flag)
        started_services.append(verifysvc)
    connection = stack.enter_context(harness.Connection(address))
    connection.client.wait_ready(timeout=30)
    info = connection.client.model_info()
    results["model"] = {"name": info.name, "file": os.path.basename(info.model_file),
                        "file_type": info.file_type, "dtype": info.dtype,
                        "device": info.device}
    if started_services:
        # The model it loaded and its measured forward cost by tokens.
        results["verifysvc_log"] = [
            line for line in started_services[0].log().splitlines()
            if line.startswith(("verifysvc: model", "verifysvc: forward"))]
    selected = workloads.load(args.cache, args.workloads, info.vocab_size,
                              args.warmup, args.limit)
    if args.temperature > 0:
        selected = [workloads.sampled(w, args.temperature) for w in selected]
    results["workloads"] = {w.name: {"description": w.description,
                                     "warmup": len(w.warmup),
                                     "measured": len(w.measured)} for w in selected}
    throwaway_request(connection, args)
    prefix = "bench-" + results["started"][:19].replace("-", "").replace(":", "")
    connect = ModeConnections(
        stack, connection, started_services[0] if started_services else None,
        args)
    results["modes_share_a_verifier"] = connect.shared
    results["records"] = []
    if not args.no_main:
        for workload in selected:
            print(f"{workload.name}: {len(workload.warmup)} warm-up, "
                  f"{len(workload.measured)} measured prompts", flush=True)
            results["records"] += run_workload(connect, workload, prefix, args)
        # What each mode's verifier came to charge a pass by tokens.
        results["served_cost_curves"] = connect.cost_curves()
    if args.source_modes:
        start = time.perf_counter()
        print(f"draft sources {args.source_modes}", flush=True)
        results["source_ablation"] = {
            "modes": args.source_modes, "records": [], "errors": {},
            "jacobi_window": list(harness.JACOBI_WINDOW)}
        for workload in selected:
            records, errors = run_source_ablation(connect, workload,
                                                  prefix, args)
            results["source_ablation"]["records"] += records
            if errors:
                results["source_ablation"]["errors"][workload.name] = errors
        results["source_ablation"]["seconds"] = time.perf_counter() - start
    if args.ceiling:
        start = time.perf_counter()
        print(f"ceiling: max {args.ceiling_max_draft} draft tokens a step",
              flush=True)
        results["ceiling"] = {
            "max_draft": args.ceiling_max_draft,
            "records": ceiling.run(connection, selected, args.max_new_tokens,
                                   args.timeout, args.ceiling_max_draft,
                                   harness.measure),
            "seconds": time.perf_counter() - start}
        budgets = harness.parse_int_list(args.ceiling_budgets)
        if budgets and args.verifysvc is None:
            replayed = ceiling.replay(
                start_draftsvc(stack, args), results["ceiling"]["records"],
                budgets, info.vocab_size)
            results["ceiling"]["replay"] = {
                w: {str(b): lengths for b, lengths in by_budget.items()}
                for w, by_budget in replayed.items()}
            # The verifier's draft_ask_tokens tree, cut by its scores as
            # the verifier cuts it: on the startup cost curve, and on the
            # curve the default mode's verifier served with.
            ask = sweeps.effective_flag(args.verifysvc_flag,
                                        "draft_ask_tokens", 8)
            curves = {"trimmed": ceiling.cost_curve(
                results.get("verifysvc_log"))}
            curves["trimmed_served"] = results.get(
                "served_cost_curves", {}).get(ceiling.SERVED_CURVE_MODE)
            for key, curve in curves.items():
                if not curve:
                    continue
                trimmed = ceiling.replay(
                    start_draftsvc(stack, args),
                    results["ceiling"]["records"], [int(ask)],
                    info.vocab_size, curve=curve)
                results["ceiling"][key] = {
                    w: {str(b): lengths for b, lengths in by_budget.items()}
                    for w, by_budget in trimmed.items()}
            results["ceiling"]["seconds"] = time.perf_counter() - start
    if args.source_modes and args.split_cores:
        results["source_ablation_split"] = run_split_cores(
            args, selected, prefix + "-split")
    if args.concurrency:
        start = time.perf_counter()
        print(f"concurrency {args.concurrency}", flush=True)
        settings = types.SimpleNamespace(max_new_tokens=args.max_new_tokens,
                                         timeout=args.timeout)
        results["concurrency"] = {"max_new_tokens": args.max_new_tokens}
        try:
            sweeps.run_concurrency(
                connection, args.concurrency,
                mixed_jobs(selected, "measured", args.concurrency_prompts),
                mixed_jobs(selected, "warmup", args.concurrency_warmup),
                prefix, settings, results["concurrency"])
        finally:
            results["concurrency"]["seconds"] = time.perf_counter() - start
    if args.ablations:
        start = time.perf_counter()
        print(f"ablations {args.ablations}", flush=True)
        settings = types.SimpleNamespace(
            max_new_tokens=args.ablation_max_new_tokens, timeout=args.timeout)

        def start_pair(pair_stack, draftsvc_flags):
            return harness.start_services(
                pair_stack, args.bin_dir, args.draftsvc_flag + draftsvc_flags,
                args.verifysvc_flag)[0]
        ablations = sweeps.Ablations(
            connection, mixed_jobs(selected, "measured", args.ablation_prompts),
            mixed_jobs(selected, "warmup", args.ablation_warmup),
            prefix, settings, start_pair)
        options = types.SimpleNamespace(
            grid_decoding=args.grid_decoding, grid_branch=args.grid_branch,
            capacity=args.ablation_capacity, prompt_boost=args.ablation_prompt_boost)
        defaults = server_defaults(args)
        tables = sweeps.run_ablations(ablations, args.ablations, options,
                                      defaults)
        results["ablations"] = {
            "prompts": len(ablations.jobs), "warmup": len(ablations.warmup),
            "max_new_tokens": args.ablation_max_new_tokens,
            "defaults": defaults, "plain": ablations.baseline(),
            "plain_seconds": ablations.plain_seconds, "tables": tables,
            "seconds": time.perf_counter() - start}
    if "hf" in args.peer:
        start = time.perf_counter()
        print(f"peer hf: {args.peer_prompts} prompts", flush=True)
        run_peer(connection, selected, info, args, results)
        results["peer"]["seconds"] = time.perf_counter() - start
    if "llamacpp" in args.peer:
        start = time.perf_counter()
        print(f"peer llamacpp: {args.peer_prompts} prompts per workload",
              flush=True)
        run_llamacpp(connection, selected, info, args, results,
                     started_services[0] if started_services else None)
        results["llamacpp"]["seconds"] = time.perf_counter() - start


def main(argv):
    args = parse_args(argv)
    import grpc  # after argparse, so --help works without grpc

    # A SIGTERM (CI timeout) unwinds like Ctrl-C, so the servers are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"),
               "commit": git_commit(), "machine": machine_info(),
               "args": {k: v for k, v in vars(args).items() if k != "cache"}}
    with open(os.path.join(args.cache, "manifest.json")) as f:
        results["sources"] = json.load(f)
    with contextlib.ExitStack() as stack:
        started_services = []
        try:
            run_all(stack, args, results, started_services)
        except grpc.RpcError as e:
            for verifysvc in started_services:
                print(verifysvc.log()[-4000:], file=sys.stderr)
            # The sections finished before the failure are still reported.
            results["error"] = f"Generate failed: {e.code().name}: {e.details()}"
            results.setdefault("records", [])
    results["machine"]["load_average_end"] = os.getloadavg()
    results["seconds"] = round(time.time() - started.timestamp(), 1)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    report.write(results, args.out)
    mismatches = our_mismatches(results)
    for r in mismatches:
        print(f"run: NOT LOSSLESS: {r['workload']} {r['prompt']} {r['mode']}"
              + (f" at concurrency {r['concurrency']}" if "concurrency" in r else "")
              + f" diverges from plain at output token {r['diverged_at']}",
              file=sys.stderr)
    peer = results.get("peer", {}).get("records", [])
    peer_differ = [r for r in peer if r["engine"].startswith("hf")
                   and not r["identical"]]
    if peer:
        print(f"run: peer: {len(peer_differ)} of "
              f"{sum(r['engine'].startswith('hf') for r in peer)} HF outputs "
              "differ from our plain decoding (reported, not fatal)")
    theirs = [r for r in results.get("llamacpp", {}).get("records", [])
              if r["engine"].startswith("llama.cpp")]
    if theirs:
        print(f"run: llamacpp: {sum(not r['identical'] for r in theirs)} of "
              f"{len(theirs)} llama.cpp outputs differ from our plain "
              "decoding (reported, not fatal)")
    checked = len(results["records"]) + len(
        results.get("concurrency", {}).get("records", [])) + len(
        results.get("source_ablation", {}).get("records", [])) + len(
        results.get("source_ablation_split", {}).get("records", [])) + sum(
        len(c["records"]) for t in results.get("ablations", {}).get(
            "tables", {}).values() for c in t["cells"])
    print(f"run: {checked - len(mismatches)} identical, {len(mismatches)} "
          f"different from plain; report in {os.path.relpath(args.out)}"
          f"/report.md ({results['seconds']} s)")
    if "error" in results:
        print(f"run: {results['error']} (the report has the sections "
              "finished before it)", file=sys.stderr)
    return 1 if mismatches or "error" in results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
