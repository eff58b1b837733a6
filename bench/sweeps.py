"""The concurrency sweep and the ablations (run.py --concurrency,
--ablations), through the real services like the main table.

Concurrency: at each level c, c client threads share the prompts (a thread
takes the next prompt when its last one ends, so c requests are in flight
until the tail), once with drafts off and once trie-hierarchical, in an
order that alternates per level. Each level's drafted run has a fresh
namespace, warmed by the warm-up prompts at the same concurrency, so no run
sees another run's output of the same prompt. Every output must equal
plain decoding's at batch 1 (the service is lossless whatever the batch).

Ablations (few prompts each, drafts trie-hierarchical unless said): every
cell gets a fresh namespace, warmed by the same warm-up prompts with the
cell's settings, then runs the measured prompts; plain decoding of the same
prompts (once, on the default service pair) is the baseline of every cell.
  grid          per-request decoding_length x branch_length
                (DraftParams.decoding_length and .branch_length)
  capacity      draftsvc --capacity_nodes: small values vs the default,
                each on its own service pair
  prompt_boost  draftsvc --prompt_boost (score weight of prompt-trie
                evidence): 0, 1 and the default 4, each on its own pair.
                Neither service can switch prompt insertion off: at 0 the
                prompt's nodes still fill whatever budget the output trie
                leaves
  sharing       the output trie shared across requests (warm namespace) vs
                not: a fresh namespace per request and no warm-up, so a
                request drafts only from its prompt and its own output.
                Neither service can switch output insertion off; this is
                the nearest switch they have
"""

import concurrent.futures
import contextlib
import re
import time

import harness

ABLATIONS = ("grid", "capacity", "prompt_boost", "sharing")
CONCURRENCY_MODES = ("plain", "trie-hierarchical")


def log(line):
    """Progress on stdout (tests replace it)."""
    print(line, flush=True)


def run_pool(connection, jobs, mode, namespace, concurrency, settings,
             **draft):
    """Runs `jobs` ([(workload name, Prompt)]) on `concurrency` threads;
    (their measures in job order, wall seconds from the first request to
    the last end)."""
    def one(job):
        return harness.measure(connection, job[1], harness.MODES[mode],
                               namespace, settings.max_new_tokens,
                               settings.timeout, **draft)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        measured = list(pool.map(one, jobs))
    return measured, time.perf_counter() - start


def plain_reference(connection, jobs, settings):
    """Plain decoding's output ids at batch 1, per job."""
    return [harness.measure(connection, prompt, "off", "",
                            settings.max_new_tokens, settings.timeout)[1]
            for _, prompt in jobs]


def run_concurrency(connection, levels, jobs, warmup, prefix, settings,
                    result=None):
    """The concurrency sweep into `result` (a dict, filled run by run so
    that a failure keeps the runs before it; returned): "levels", "runs"
    and "records" (as the main table's, plus "concurrency")."""
    result = {} if result is None else result
    result.update(levels=levels, prompts=len(jobs), warmup=len(warmup),
                  runs=[], records=[])
    # Plain decoding at batch 1 is every output's reference: level 1's plain
    # run (each level's first mode alternates, starting with plain), or a
    # pass of its own.
    reference = None
    if levels[0] != 1:
        reference = plain_reference(connection, jobs, settings)
    for index, level in enumerate(levels):
        namespace = f"{prefix}-concurrency{level}"
        run_pool(connection, warmup, "trie-hierarchical", namespace, level,
                 settings)
        modes = CONCURRENCY_MODES[index % 2:] + CONCURRENCY_MODES[:index % 2]
        for mode in modes:
            measured, wall = run_pool(connection, jobs, mode, namespace, level,
                                      settings)
            if reference is None:
                reference = [ids for _, ids, _ in measured]
            result["runs"].append({"concurrency": level, "mode": mode,
                                   "wall_seconds": wall,
                                   "requests": len(measured)})
            result["records"] += [
                harness.make_record(workload, prompt.id, mode, m, ids,
                                    concurrency=level)
                for (workload, prompt), m, ids in zip(jobs, measured, reference)]
            tokens = sum(usage.output_tokens for usage, _, _ in measured)
            log(f"  concurrency {level} {mode}: {tokens / wall:.1f} tok/s "
                f"({len(jobs)} requests, {wall:.1f} s)")
    return result


def flag_defaults(help_text, names):
    """{name: default} of the absl flags `names`, read from a binary's
    --helpfull text ("--name (help...); default: VALUE;")."""
    defaults = {}
    for name in names:
        match = re.search(r"--%s \(.*?\); default: (.*?);" % re.escape(name),
                          help_text, re.DOTALL)
        if match:
            defaults[name] = match.group(1).strip('"')
    return defaults


def effective_flag(flags, name, default):
    """The value `name` has under `flags` (["--name=value", ...], the last
    one wins, as absl does), else `default`."""
    value = default
    for flag in flags:
        if flag.startswith(f"--{name}="):
            value = flag.split("=", 1)[1]
    return value


class Ablations:
    """Runs ablation cells; each cell = a draftsvc flag set, a per-request
    decoding_length and branch_length (0 = the server's), and whether the
    namespace is shared (warm) or fresh per request (cold), on a fresh
    draftsvc and verifysvc of its own. Cells with the same settings run
    once; plain decoding (the baseline) runs on `connection`."""

    def __init__(self, connection, jobs, warmup, prefix, settings, start_pair):
        self.connection = connection
        self.jobs = jobs
        self.warmup = warmup
        self.prefix = prefix
        self.settings = settings
        # start_pair(stack, draftsvc_flags) -> a verifysvc address, a pair
        # that lives until `stack` closes.
        self.start_pair = start_pair
        self.plain = None
        self._cells = {}

    def baseline(self):
        """Plain decoding of the ablation prompts, once: every cell's
        baseline and the identity reference."""
        if self.plain is None:
            start = time.perf_counter()
            measured = [harness.measure(self.connection, prompt, "off", "",
                                        self.settings.max_new_tokens,
                                        self.settings.timeout)
                        for _, prompt in self.jobs]
            self.plain_seconds = time.perf_counter() - start
            self.plain = [harness.make_record(w, p.id, "plain", m, m[1])
                          for (w, p), m in zip(self.jobs, measured)]
            self._reference = [m[1] for m in measured]
        return self.plain

    def cell(self, draftsvc_flags=(), decoding_length=0, branch_length=0,
             shared=True):
        """({"records", "seconds"}, whether it ran now) of one cell; seconds
        is its whole cost, service start and warm-up included."""
        self.baseline()
        key = (tuple(draftsvc_flags), decoding_length, branch_length, shared)
        if key in self._cells:
            return self._cells[key], False
        draft = {"decoding_length": decoding_length,
                 "branch_length": branch_length}
        start = time.perf_counter()
        with contextlib.ExitStack() as stack:
            # A pair of its own, whatever its flags: a verifier learns from
            # what it verifies (Token Recycling's table is the process's),
            # so a cell after another on the same prompts would draft from
            # the other's predictions for them (bench/results/mode_isolation).
            address = self.start_pair(stack, list(draftsvc_flags))
            connection = stack.enter_context(harness.Connection(address))
            connection.client.wait_ready(timeout=30)
            name = f"{self.prefix}-ablation{len(self._cells)}"
            if shared:
                namespaces = [name] * len(self.jobs)
                for _, prompt in self.warmup:
                    self._measure(connection, prompt, name, draft)
            else:
                namespaces = [f"{name}-{i}" for i in range(len(self.jobs))]
            measured = [self._measure(connection, prompt, namespace, draft)
                        for (_, prompt), namespace in zip(self.jobs, namespaces)]
        seconds = time.perf_counter() - start
        records = [harness.make_record(w, p.id, "trie-hierarchical", m, ref)
                   for (w, p), m, ref in zip(self.jobs, measured,
                                             self._reference)]
        self._cells[key] = {"records": records, "seconds": seconds}
        return self._cells[key], True

    def _measure(self, connection, prompt, namespace, draft):
        return harness.measure(connection, prompt, "hierarchical", namespace,
                               self.settings.max_new_tokens,
                               self.settings.timeout, **draft)


def _label(params):
    return ", ".join(f"{k} {v}" for k, v in params.items())


def run_ablations(ablations, names, options, defaults):
    """The tables of the ablations `names` (of ABLATIONS). `options` has
    grid_decoding, grid_branch, capacity and prompt_boost (lists);
    `defaults` the services' effective capacity_nodes, prompt_boost,
    decoding_length and branch_length. {name: {"description", "cells",
    "seconds"}}; each cell {"params", "records", "seconds"} (a cell shared
    with an earlier table costs 0 here)."""
    tables = {}

    def add(table, params, **cell_args):
        cell, ran = ablations.cell(**cell_args)
        cost = cell["seconds"] if ran else 0.0
        table["cells"].append({"params": params, "records": cell["records"],
                               "seconds": cost})
        table["seconds"] += cost
        status = "identical" if all(r["identical"] for r in cell["records"]) \
            else "MISMATCH"
        log(f"  ablation {_label(params)}: {status}, {cost:.0f} s")

    for name in names:
        table = {"cells": [], "seconds": 0.0}
        tables[name] = table
        if name == "grid":
            table["description"] = ("per-request decoding_length x "
                                    "branch_length (DraftParams)")
            for d in options.grid_decoding:
                for b in options.grid_branch:
                    add(table, {"decoding_length": d, "branch_length": b},
                        decoding_length=d, branch_length=b)
        elif name == "capacity":
            table["description"] = "draftsvc --capacity_nodes"
            for c in options.capacity:
                add(table, {"capacity_nodes": c},
                    draftsvc_flags=(f"--capacity_nodes={c}",))
            add(table, {"capacity_nodes": f"{defaults['capacity_nodes']} "
                                          "(default)"})
        elif name == "prompt_boost":
            table["description"] = (
                "draftsvc --prompt_boost (weight of prompt-trie evidence); "
                "no service switch turns prompt insertion off")
            for b in options.prompt_boost:
                add(table, {"prompt_boost": f"{b:g}"},
                    draftsvc_flags=(f"--prompt_boost={b:g}",))
            add(table, {"prompt_boost": f"{defaults['prompt_boost']} (default)"})
        elif name == "sharing":
            table["description"] = (
                "output trie shared across requests (warm namespace) vs a "
                "fresh namespace per request without warm-up; no service "
                "switch turns output insertion off")
            add(table, {"output trie": "shared, warm"})
            add(table, {"output trie": "per request, cold"}, shared=False)
        else:
            raise ValueError(f"unknown ablation {name!r}; pick from {ABLATIONS}")
    return tables
