"""Unit tests of the suite's pure parts (no servers, no cache):

    /usr/bin/python3 -m unittest discover -s bench -p '*_test.py'
"""

import contextlib
import io
import json
import os
import tempfile
import threading
import types
import unittest
from unittest import mock

import ab
import ceiling
import draft_head
import harness
import hf_peer
import report
import run
import sweeps
import workloads


class PercentileTest(unittest.TestCase):
    def test_nearest_rank(self):
        values = list(range(1, 101))
        self.assertEqual(report.percentile(values, 50), 50)
        self.assertEqual(report.percentile(values, 99), 99)
        self.assertEqual(report.percentile([5.0], 99), 5.0)
        self.assertEqual(report.percentile([], 50), 0.0)


class AbTest(unittest.TestCase):
    def test_rows_compare_each_side_with_its_own_plain(self):
        def rec(side, mode, seconds, tokens, edl, rpc=0, identical=True):
            return {"workload": "rag", "side": side, "mode": mode,
                    "seconds": seconds, "tokens": tokens, "edl": edl,
                    "rpc": rpc, "rpc_seconds": rpc * 1e-3,
                    "identical": identical}
        records = [rec("A", "plain", 2.0, 100, 1.0),
                   rec("B", "plain", 4.0, 100, 1.0),
                   rec("A", "trie", 1.0, 100, 2.0, rpc=10),
                   rec("B", "trie", 2.0, 100, 4.0, rpc=4, identical=False),
                   rec("B", "trie", 2.0, 100, 1.0, rpc=6)]
        runs = [("A", "plain"), ("B", "plain"), ("A", "trie"), ("B", "trie")]
        rows = ab.report_rows("rag", records, runs)
        self.assertEqual(rows[0], "| rag | A | plain | 50.0 | 1.000x | 1.00 "
                                  "| 0 (0.00) | 1/1 |")
        self.assertEqual(rows[2], "| rag | A | trie | 100.0 | 2.000x | 2.00 "
                                  "| 10 (1.00) | 1/1 |")
        # 200 tokens in 100 / 4 + 100 / 1 = 125 steps; 4 s against 4 s plain.
        self.assertEqual(rows[3], "| rag | B | trie | 50.0 | 1.000x | 1.60 "
                                  "| 10 (1.00) | 1/2 |")

    def test_a_side_is_named_by_its_flags_and_own_binaries(self):
        args = ab.parse_args(["--a_flag=--x=1", "--b_bin_dir=/b"])
        self.assertEqual(ab.side_name(args, "A"), "--x=1")
        self.assertEqual(ab.side_name(args, "B"), "(defaults) (/b)")

    def test_rejects_plain_and_unknown_modes(self):
        for modes in ("plain,trie", "trie,nonesuch"):
            with self.assertRaises(SystemExit):
                with contextlib.redirect_stderr(io.StringIO()):
                    ab.parse_args([f"--modes={modes}"])


class CeilingTest(unittest.TestCase):
    def test_each_step_adds_its_accepted_tokens_and_one(self):
        prompt, output = [1, 2, 3, 4, 5], [3, 4, 5, 9]
        for policy in ceiling.POLICIES:
            # Nothing follows 5 yet; then 3 continues with 4 5 (3 is last
            # of the step's limit: 4 tokens - 1 - its own).
            self.assertEqual(
                ceiling.accepted_lengths(prompt, output, [], 16, policy),
                [0, 2], policy)

    def test_pairs_chain_n_grams_no_one_occurrence_holds(self):
        prompt, output = [5, 1, 2, 9, 2, 3, 9, 3, 4, 9, 5], [1, 2, 3, 4, 7]
        # Every pair 5-1, 1-2, 2-3, 3-4 was seen: all 4 allowed tokens.
        self.assertEqual(
            ceiling.accepted_lengths(prompt, output, [], 16, "pairs"), [4])
        # Verbatim, 5 continues with 1 2 only; then 3 continues with 4.
        self.assertEqual(
            ceiling.accepted_lengths(prompt, output, [], 16, "copy"), [2, 1])

    def test_suffix_takes_the_longest_match_not_the_right_one(self):
        # The context ends 3 1; position 4's 1 follows 3 (suffix 2) and
        # goes on 6, position 1's follows 2 (suffix 1) and goes on 5.
        prompt, output = [2, 1, 5, 3, 1, 6, 3, 1], [5, 0]
        self.assertEqual(
            ceiling.accepted_lengths(prompt, output, [], 16, "copy"), [1])
        self.assertEqual(
            ceiling.accepted_lengths(prompt, output, [], 16, "suffix"), [0, 0])

    def test_others_count_and_max_draft_caps(self):
        output = [7, 8, 9, 10, 11, 12]
        others = [[6, 7, 8, 9, 10, 11, 12]]
        self.assertEqual(
            ceiling.accepted_lengths([6], output, [], 16, "pairs"),
            [0, 0, 0, 0, 0, 0])
        self.assertEqual(
            ceiling.accepted_lengths([6], output, others, 16, "copy"), [5])
        self.assertEqual(
            ceiling.accepted_lengths([6], output, others, 2, "suffix"),
            [2, 2])
        with self.assertRaises(ValueError):
            ceiling.accepted_lengths([6], output, others, 2, "oracle")

    def test_tree_accepted_takes_the_deepest_matching_path(self):
        # 5 -> 6 -> 7 and 5 -> 8; 9 under the root; 6 under the wrong 8.
        tokens, parents = [5, 6, 8, 9, 7, 6], [-1, 0, 0, -1, 1, 2]
        self.assertEqual(ceiling.tree_accepted(tokens, parents,
                                               [0, 5, 6, 7, 1], 1, 3), 3)
        self.assertEqual(ceiling.tree_accepted(tokens, parents,
                                               [0, 5, 6, 7, 1], 1, 2), 2)
        self.assertEqual(ceiling.tree_accepted(tokens, parents,
                                               [5, 8, 6], 0, 2), 2)
        self.assertEqual(ceiling.tree_accepted(tokens, parents, [4, 6], 0, 1),
                         0)
        self.assertEqual(ceiling.tree_accepted([], [], [4, 6], 0, 1), 0)

    def test_trim_by_score_keeps_what_pays_on_the_curve(self):
        curve = {1: 10.0, 2: 11.0, 4: 13.0, 8: 21.0}
        # One node at 0.9: 1.9 tokens for 11 ms beats 1 for 10.
        self.assertEqual(ceiling.trim_by_score([0.9], curve), 1)
        # At 0.05 it does not pay (1.05 / 11 < 1 / 10).
        self.assertEqual(ceiling.trim_by_score([0.05], curve), 0)
        # Three sure nodes, then long shots: keep the three.
        self.assertEqual(
            ceiling.trim_by_score([1.0, 1.0, 1.0, 0.01, 0.01], curve), 3)
        self.assertEqual(ceiling.trim_by_score([], curve), 0)

    def test_cost_curve_and_speedup_bound(self):
        curve = ceiling.cost_curve(
            ["verifysvc: model x", "verifysvc: forward ms by tokens 1:10.0 "
             "2:11.0 4:13.0 8:21.0"])
        self.assertEqual(curve, {1: 10.0, 2: 11.0, 4: 13.0, 8: 21.0})
        self.assertAlmostEqual(ceiling.forward_ms(curve, 3), 12.0)
        self.assertAlmostEqual(ceiling.forward_ms(curve, 6), 17.0)
        self.assertAlmostEqual(ceiling.forward_ms(curve, 10), 25.0)
        # Steps of 1, 4 and 8 tokens: 13 tokens for 10 + 13 + 21 ms.
        self.assertAlmostEqual(ceiling.speedup_bound([0, 3, 7], curve),
                               13 * 10.0 / 44.0)
        self.assertIsNone(ceiling.speedup_bound([0, 3], {}))
        rows = ceiling.summary_rows(
            {"records": [{"workload": "chat", "pairs_session": [0, 3],
                          "copy_session": [1, 1], "suffix_session": [0, 0, 0],
                          "pairs_namespace": [4], "copy_namespace": [1, 1],
                          "suffix_namespace": [3]}]}, curve)
        edl = {(r["scope"], r["policy"]): r["edl"] for r in rows}
        self.assertEqual(edl[("session", "pairs")], 2.5)
        self.assertEqual(edl[("session", "suffix")], 1.0)
        self.assertEqual(edl[("namespace", "pairs")], 5.0)
        lines = report.ceiling_lines(
            {"max_draft": 16, "records": []}, {"verifysvc_log": []})
        self.assertIn("No cost curve", " ".join(lines))

    def test_cut_by_score_on_the_startup_and_the_served_curve(self):
        # Startup: a row looked free; served: it costs half a pass. The
        # same replayed steps (accepted, kept) are charged by each.
        section = {"max_draft": 16, "records": [
            {"workload": "code", "phase": "measured", "pairs_session": [1],
             "copy_session": [1], "suffix_session": [1],
             "pairs_namespace": [1], "copy_namespace": [1],
             "suffix_namespace": [1]}],
            "trimmed": {"code": {"8": [[[1, 1], [0, 1]]]}},
            "trimmed_served": {"code": {"8": [[[1, 1], [0, 0]]]}}}
        results = {"verifysvc_log": [
            "verifysvc: forward ms by tokens 1:4.0 2:4.0 4:5.0"],
            "served_cost_curves": {"trie-hierarchical": {1: 2.0, 2: 3.0,
                                                         4: 5.0}}}
        text = "\n".join(report.ceiling_lines(section, results))
        # 3 tokens in 2 passes of 2 tokens at 4.0 ms: 3 * 4 / 8.
        self.assertIn("| replay | 8 nodes cut by score | 2 | 1.50 | 1.50x "
                      "(1.0 kept a step) |", text)
        # 3 tokens, one 2-token pass (3 ms) and one 1-token (2 ms).
        self.assertIn("| replay | 8 nodes cut by score, served curve | 2 | "
                      "1.50 | 1.20x (0.5 kept a step) |", text)
        self.assertIn("1:2.0 2:3.0 4:5.0 ms", text)


class SalientPhraseTest(unittest.TestCase):
    def test_picks_the_rare_repeated_pair_as_spelled(self):
        text = ("The Licensor grants a Patent License. The Patent License "
                "ends when the work is distributed. Common words appear.")
        counts, _ = workloads.candidate_phrases(text)
        frequency = {pair: 5 for pair in counts}
        frequency[("patent", "license")] = 1
        self.assertEqual(workloads.salient_phrase(text, frequency, 10),
                         "Patent License")

    def test_skips_stopwords_short_words_and_punctuation(self):
        counts, _ = workloads.candidate_phrases("of the, cat. Dog bird is it")
        self.assertEqual(set(counts), {("dog", "bird")})
        self.assertIsNone(workloads.salient_phrase("it is of the", {}, 1))


class SplitTest(unittest.TestCase):
    def test_warmup_and_measured_are_disjoint_and_stable(self):
        with tempfile.TemporaryDirectory() as cache:
            with open(os.path.join(cache, "chat.jsonl"), "w") as f:
                for i in range(10):
                    f.write(json.dumps({"id": f"q{i}", "question": f"Q{i}?"}) + "\n")
            first, = workloads.load(cache, ["chat"], 100, warmup=3, limit=5)
            again, = workloads.load(cache, ["chat"], 100, warmup=3, limit=5)
            self.assertEqual(first, again)
            self.assertEqual((len(first.warmup), len(first.measured)), (3, 5))
            ids = [p.id for p in first.warmup + first.measured]
            self.assertEqual(len(set(ids)), 8)
            with self.assertRaisesRegex(ValueError, "fewer than"):
                workloads.load(cache, ["chat"], 100, warmup=6, limit=5)

    def test_adversarial_token_ids_fit_the_vocabulary(self):
        soup = [p for p in workloads.adversarial_prompts(300)
                if "tokens" in p.request]
        self.assertTrue(soup)
        for p in soup:
            self.assertTrue(all(256 <= t < 300 for t in p.request["tokens"]))
            # Sampled hot, each prompt with its own seed: EDL near 1.
            self.assertEqual(p.request["temperature"], 1.5)
        self.assertEqual(len({p.request["seed"] for p in soup}), len(soup))

    def test_every_drafted_table_counts_as_a_mismatch(self):
        record = lambda mode, same: {  # noqa: E731
            "workload": "chat", "prompt": "q", "mode": mode,
            "identical": same, "diverged_at": None if same else 3}
        results = {"records": [record("trie-hierarchical", True)],
                   "source_ablation": {"records": [record("mixed", False)]},
                   "source_ablation_split": {"records": [
                       record("default", False), record("plain", True)]}}
        self.assertEqual([r["mode"] for r in run.our_mismatches(results)],
                         ["sources mixed", "sources, split cores default"])

    def test_sampled_seeds_every_prompt_stably_and_keeps_the_soups(self):
        chat = workloads.Workload("chat", "d", [workloads.Prompt(
            "w", {"chat": [("user", "hi")]})], [workloads.Prompt(
                f"q{i}", {"prompt": f"Q{i}"}) for i in range(4)])
        hot = workloads.sampled(chat, 0.8)
        prompts = hot.warmup + hot.measured
        self.assertTrue(all(p.request["temperature"] == 0.8 for p in prompts))
        self.assertEqual(len({p.request["seed"] for p in prompts}), 5)
        self.assertEqual(hot, workloads.sampled(chat, 0.8))  # Every run.
        self.assertEqual(hot.measured[0].request["prompt"], "Q0")
        self.assertNotIn("temperature", chat.measured[0].request)
        soup = workloads.adversarial_prompts(300)[:2]
        kept = workloads.sampled(workloads.Workload("adversarial", "d", [],
                                                    soup), 0.8)
        self.assertEqual(kept.measured, soup)
        self.assertEqual(run.parse_args(["--temperature=0.8"]).temperature,
                         0.8)


class SummarizeTest(unittest.TestCase):
    def record(self, mode, seconds, steps, identical=True):
        return {"workload": "w", "prompt": "p", "mode": mode,
                "identical": identical, "output_tokens": 10,
                "decoding_steps": steps, "draft_tokens": 8,
                "accepted_draft_tokens": 4, "ttft_seconds": 0.5,
                "total_seconds": seconds, "token_latencies_ms": [1.0, 3.0]}

    def test_speedup_and_edl_against_plain_of_the_same_run(self):
        summary = report.summarize([
            self.record("plain", 2.5, 10), self.record("trie-parallel", 1.5, 4),
            self.record("trie-hierarchical", 1.0, 2, identical=False)])["w"]
        self.assertAlmostEqual(summary["trie-hierarchical"]["speedup"], 2.5)
        self.assertAlmostEqual(summary["trie-hierarchical"]["decode_speedup"], 4.0)
        self.assertAlmostEqual(summary["trie-hierarchical"]["edl"], 5.0)
        self.assertAlmostEqual(summary["trie-parallel"]["acceptance"], 0.5)
        self.assertEqual(summary["trie-hierarchical"]["identical"], 0)
        self.assertEqual(summary["plain"]["p99_ms"], 3.0)


class HarnessTest(unittest.TestCase):
    def test_interleave_mixes_every_list_first(self):
        self.assertEqual(harness.interleave([[1, 2, 3], ["a"], [], ["b", "c"]]),
                         [1, "a", "b", 2, "c", 3])
        self.assertEqual(harness.interleave([]), [])

    def test_parse_int_list(self):
        self.assertEqual(harness.parse_int_list("1, 4,8,,16"), [1, 4, 8, 16])
        self.assertEqual(harness.parse_int_list(""), [])
        with self.assertRaisesRegex(ValueError, "'x' in"):
            harness.parse_int_list("1,x")
        with self.assertRaisesRegex(ValueError, ">= 1"):
            harness.parse_int_list("0")

    def test_token_latencies_share_a_gap_among_its_tokens(self):
        # First message (TTFT) left out; 3 tokens 30 ms later: 10 ms each.
        self.assertEqual(harness.token_latencies([(1.0, 1), (1.03, 3), (1.04, 1)]),
                         [10.0, 10.0, 10.0, 10.0])
        self.assertEqual(harness.token_latencies([(1.0, 2)]), [])

    def test_first_difference(self):
        self.assertEqual(harness.first_difference([1, 2, 3], [1, 5, 3]), 1)
        self.assertEqual(harness.first_difference([1, 2], [1, 2, 3]), 2)


class FakeMessage:
    def __init__(self, token_ids, usage=None):
        self.token_ids = token_ids
        self.usage = usage

    def HasField(self, name):
        return name == "usage" and self.usage is not None


class FakeConnection:
    """Answers Generate like a lossless server would: the output depends on
    the prompt only. Logs each call's draft settings. `diverge` makes one
    prompt's drafted output differ (a lossy server). Also a context manager
    with a ready client, as harness.Connection."""

    def __init__(self, diverge=None):
        self.calls = []
        self.lock = threading.Lock()
        self.diverge = diverge
        self.client = types.SimpleNamespace(wait_ready=lambda timeout: None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def generate(self, request_kwargs, *, branch_length=0, timeout=None,
                 **kwargs):
        with self.lock:
            self.calls.append(dict(kwargs, branch_length=branch_length,
                                   prompt=request_kwargs["prompt"]))
        ids = [len(request_kwargs["prompt"]), 7, 8, 9]
        if (request_kwargs["prompt"] == self.diverge
                and kwargs["draft_mode"] != "off"):
            ids[2] = 0
        drafted = kwargs["draft_mode"] != "off"
        usage = types.SimpleNamespace(
            prompt_tokens=3, output_tokens=len(ids),
            decoding_steps=2 if drafted else len(ids),
            draft_tokens=4 if drafted else 0,
            accepted_draft_tokens=2 if drafted else 0,
            time_to_first_token_seconds=0.1, queue_seconds=0.0,
            total_seconds=0.5 if drafted else 1.0, finish_reason=1)
        yield FakeMessage(ids[:1])
        yield FakeMessage(ids[1:])
        yield FakeMessage([], usage)


def jobs(*texts):
    return [("w", workloads.Prompt(t, {"prompt": t})) for t in texts]


SETTINGS = types.SimpleNamespace(max_new_tokens=4, timeout=5)
sweeps.log = lambda line: None  # Quiet progress lines.


class ConcurrencyTest(unittest.TestCase):
    def test_levels_modes_and_fresh_namespaces(self):
        fake = FakeConnection()
        result = sweeps.run_concurrency(fake, [1, 4], jobs("a", "bb", "ccc"),
                                        jobs("warm"), "p", SETTINGS)
        self.assertEqual([(r["concurrency"], r["mode"]) for r in result["runs"]],
                         [(1, "plain"), (1, "trie-hierarchical"),
                          (4, "trie-hierarchical"), (4, "plain")])
        self.assertEqual(len(result["records"]), 12)
        self.assertTrue(all(r["identical"] for r in result["records"]))
        drafted = {c["namespace"] for c in fake.calls if c["draft_mode"] != "off"}
        self.assertEqual(drafted, {"p-concurrency1", "p-concurrency4"})
        # The warm-up ran drafted in each level's namespace before measuring.
        warm = [c for c in fake.calls if c["prompt"] == "warm"]
        self.assertEqual([c["namespace"] for c in warm],
                         ["p-concurrency1", "p-concurrency4"])

    def test_a_drafted_difference_is_caught_against_batch_one(self):
        fake = FakeConnection(diverge="bb")
        result = sweeps.run_concurrency(fake, [2], jobs("a", "bb"), [], "p",
                                        SETTINGS)
        bad = [r for r in result["records"] if not r["identical"]]
        self.assertEqual([(r["prompt"], r["mode"], r["diverged_at"]) for r in bad],
                         [("bb", "trie-hierarchical", 2)])

    def test_a_failure_keeps_the_runs_before_it(self):
        fake = FakeConnection()
        original = fake.generate

        def generate(request_kwargs, **kwargs):
            if kwargs["namespace"] == "p-concurrency2":
                raise RuntimeError("server died")
            return original(request_kwargs, **kwargs)
        fake.generate = generate
        result = {}
        with self.assertRaisesRegex(RuntimeError, "server died"):
            sweeps.run_concurrency(fake, [1, 2], jobs("a"), jobs("w"), "p",
                                   SETTINGS, result)
        self.assertEqual([(r["concurrency"], r["mode"]) for r in result["runs"]],
                         [(1, "plain"), (1, "trie-hierarchical")])
        self.assertEqual(len(result["records"]), 2)
        report.summarize_concurrency(result)  # Renders what there is.

    def test_report_rows(self):
        result = sweeps.run_concurrency(FakeConnection(), [1, 2], jobs("a", "b"),
                                        [], "p", SETTINGS)
        for run in result["runs"]:
            run["wall_seconds"] = 2.0 if run["mode"] == "plain" else 1.0
        rows = report.summarize_concurrency(result)
        self.assertEqual([(level, mode) for level, mode, _ in rows],
                         [(1, "plain"), (1, "trie-hierarchical"),
                          (2, "plain"), (2, "trie-hierarchical")])
        level1 = rows[1][2]
        self.assertAlmostEqual(level1["throughput"], 8.0)  # 8 tokens / 1 s
        self.assertAlmostEqual(level1["throughput_speedup"], 2.0)
        self.assertEqual(level1["identical"], 2)


class AblationsTest(unittest.TestCase):
    def make(self, fake, pairs):
        # Every cell's pair answers as `fake` does, and logs into it.
        def start_pair(stack, flags):
            pairs.append(flags)
            return "fake:1"
        patch = mock.patch.object(harness, "Connection", lambda address: fake)
        patch.start()
        self.addCleanup(patch.stop)
        ablations = sweeps.Ablations(fake, jobs("a", "bb"), jobs("w"), "p",
                                     SETTINGS, start_pair)
        return ablations

    def test_cells_run_once_in_fresh_namespaces(self):
        fake, pairs = FakeConnection(), []
        ablations = self.make(fake, pairs)
        options = types.SimpleNamespace(grid_decoding=[4, 8], grid_branch=[4],
                                        capacity=[], prompt_boost=[])
        tables = sweeps.run_ablations(
            ablations, ["grid", "sharing"], options,
            {"capacity_nodes": "9", "prompt_boost": "4"})
        self.assertEqual([c["params"] for c in tables["grid"]["cells"]],
                         [{"decoding_length": 4, "branch_length": 4},
                          {"decoding_length": 8, "branch_length": 4}])
        grid_calls = [c for c in fake.calls if c["decoding_length"] == 8]
        self.assertEqual({c["branch_length"] for c in grid_calls}, {4})
        self.assertEqual(len(grid_calls), 3)  # 1 warm-up + 2 measured.
        cold = [c for c in fake.calls if c["namespace"].startswith("p-ablation3")]
        self.assertEqual([c["namespace"] for c in cold],
                         ["p-ablation3-0", "p-ablation3-1"])  # No warm-up.
        namespaces = [c["namespace"] for c in fake.calls if c["draft_mode"] != "off"]
        self.assertEqual(len(set(namespaces)), 5)  # 3 warm cells + 2 cold.
        # Each cell on a pair of its own (none learns from another's run).
        self.assertEqual(pairs, [[]] * 4)
        self.assertTrue(all(r["identical"] for t in tables.values()
                            for c in t["cells"] for r in c["records"]))

    def test_shared_cell_costs_once(self):
        fake, pairs = FakeConnection(), []
        ablations = self.make(fake, pairs)
        first, ran = ablations.cell()
        again, ran_again = ablations.cell(shared=True)
        self.assertTrue(ran)
        self.assertFalse(ran_again)
        self.assertIs(first, again)

    def test_flag_defaults_from_helpfull(self):
        text = ("  --capacity_nodes (Nodes a namespace's global trie may hold "
                "before it is\n      pruned.); default: 4194304;\n"
                "    --prompt_boost (Score multiplier.); default: 4;\n"
                '    --db_path (Where.); default: "";\n')
        self.assertEqual(sweeps.flag_defaults(
            text, ["capacity_nodes", "prompt_boost", "db_path", "missing"]),
            {"capacity_nodes": "4194304", "prompt_boost": "4", "db_path": ""})
        self.assertEqual(sweeps.effective_flag(
            ["--prompt_boost=2", "--x=1", "--prompt_boost=3"], "prompt_boost",
            "4"), "3")
        self.assertEqual(sweeps.effective_flag([], "prompt_boost", "4"), "4")


def stats(decode_speedup, tokens_per_second):
    return {"decode_speedup": decode_speedup,
            "tokens_per_second": tokens_per_second}


class ReportSectionsTest(unittest.TestCase):
    def test_grid_noise_note_separates_ties_from_leads(self):
        def cell(speedup):
            return ({"decoding_length": 8, "branch_length": 8},
                    {"decode_speedup": speedup}, 1.0)
        self.assertIn("no reason to change",
                      report.grid_noise_note(cell(1.31), cell(1.26), 4))
        self.assertIn("beyond 5%",
                      report.grid_noise_note(cell(1.50), cell(1.26), 4))
        self.assertEqual(report.grid_noise_note(cell(1.3), None, 4), "")

    def test_best_grid_cell_prefers_speed_then_cheaper_drafts(self):
        rows = [({"decoding_length": 32, "branch_length": 8}, stats(1.2, 10), 0),
                ({"decoding_length": 16, "branch_length": 8}, stats(1.3, 9), 0),
                ({"decoding_length": 8, "branch_length": 8}, stats(1.3, 9), 0)]
        self.assertEqual(report.best_grid_cell(rows)[0]["decoding_length"], 8)
        self.assertIsNone(report.best_grid_cell([]))

    def record(self, prompt, mode, seconds):
        return {"workload": "adversarial", "prompt": prompt, "mode": mode,
                "identical": True, "output_tokens": 10, "decoding_steps": 10,
                "draft_tokens": 0, "accepted_draft_tokens": 0,
                "ttft_seconds": 0.1, "total_seconds": seconds,
                "token_latencies_ms": [1.0]}

    def test_worst_case_against_the_target(self):
        records = [self.record("a", "plain", 1.0), self.record("b", "plain", 1.0),
                   self.record("a", "trie-hierarchical", 1.0),
                   self.record("b", "trie-hierarchical", 1.25),
                   self.record("a", "trie-parallel", 1.0),
                   self.record("b", "trie-parallel", 1.0)]
        rows = report.worst_case(report.summarize(records), records)
        by_mode = {mode: (speedup, worst, meets)
                   for mode, speedup, worst, meets in rows}
        speedup, worst, meets = by_mode["trie-hierarchical"]
        self.assertAlmostEqual(speedup, 2.0 / 2.25)
        self.assertAlmostEqual(worst, 0.8)
        self.assertFalse(meets)
        self.assertEqual(by_mode["trie-parallel"], (1.0, 1.0, True))

    def test_peer_rows_and_records(self):
        job = {"id": "q", "workload": "chat"}
        ours = {"plain": (2.0, [1, 2, 3]), "trie-hierarchical": (1.0, [1, 2, 3])}
        theirs = {"greedy": {"ids": [1, 2, 4], "seconds": 4.0},
                  "prompt_lookup": {"ids": [1, 2, 4], "seconds": 2.0}}
        records = hf_peer.peer_records([job], [ours], [theirs])
        self.assertEqual([(r["engine"], r["identical"], r["diverged_at"])
                          for r in records],
                         [("ours plain", True, None),
                          ("ours trie-hierarchical (cold)", True, None),
                          ("hf greedy", False, 2), ("hf prompt lookup", False, 2)])
        rows = dict(report.peer_rows({"records": records}))
        self.assertAlmostEqual(rows["hf prompt lookup"]["speedup"], 2.0)
        self.assertAlmostEqual(rows["ours trie-hierarchical (cold)"]["speedup"], 2.0)
        self.assertAlmostEqual(rows["hf greedy"]["tokens_per_second"], 0.75)
        self.assertEqual(rows["hf greedy"]["diverged_at"], [2])

    def test_compare(self):
        self.assertEqual(hf_peer.compare([1, 2], [1, 2]), (True, None))
        self.assertEqual(hf_peer.compare([1, 2], [1, 2, 2]), (False, 2))

    def test_full_report_renders_every_section(self):
        fake = FakeConnection()
        concurrency = sweeps.run_concurrency(fake, [1], jobs("a"), [], "p",
                                             SETTINGS)
        concurrency.update(max_new_tokens=4, seconds=1.0)
        ablations = sweeps.Ablations(fake, jobs("a"), [], "p", SETTINGS,
                                     lambda stack, flags: "fake:1")
        patch = mock.patch.object(harness, "Connection", lambda address: fake)
        patch.start()
        self.addCleanup(patch.stop)
        options = types.SimpleNamespace(grid_decoding=[32], grid_branch=[8],
                                        capacity=[], prompt_boost=[])
        defaults = {"capacity_nodes": "9", "prompt_boost": "4",
                    "decoding_length": "32", "branch_length": "8"}
        tables = sweeps.run_ablations(ablations, ["grid"], options, defaults)
        records = [self.record("a", "plain", 1.0),
                   self.record("a", "trie-hierarchical", 0.5)]
        peer = {"transformers": "t", "torch": "t", "threads": 2,
                "load_seconds": 1.0, "prompt_lookup_num_tokens": 10,
                "max_new_tokens": 4, "records": hf_peer.peer_records(
                    [{"id": "a", "workload": "chat"}],
                    [{"plain": (1.0, [1]), "trie-hierarchical": (1.0, [1])}],
                    [{"greedy": {"ids": [1], "seconds": 1.0},
                      "prompt_lookup": {"ids": [1], "seconds": 1.0}}])}
        results = {
            "started": "s", "commit": "c", "seconds": 1,
            "machine": {"usable_cpus": 2, "cpus": 2, "platform": "p",
                        "load_average_start": [0.0]},
            "args": {"max_new_tokens": 4}, "sources": {},
            "workloads": {"adversarial": {"description": "d", "warmup": 0,
                                          "measured": 1}},
            "records": records, "concurrency": concurrency,
            "ablations": {"prompts": 1, "warmup": 0, "max_new_tokens": 4,
                          "defaults": defaults, "plain": ablations.baseline(),
                          "plain_seconds": 1.0, "tables": tables,
                          "seconds": 1.0},
            "peer": peer}
        text = report.markdown(results, report.summarize(records), [])
        for heading in ("## adversarial", "## Concurrency", "## Ablations",
                        "### grid", "Defaults from the grid: decoding_length 32",
                        "servers' defaults (32, 8) give",
                        "## Worst case: adversarial", "| trie-hierarchical | 2.00x",
                        "## Peer: Hugging Face transformers", "| hf greedy |",
                        "| chat | 1 | 1.00x (1.0) | 1.00x (1.0) | no |"):
            self.assertIn(heading, text)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return
        with tempfile.TemporaryDirectory() as out:
            written = report.plot(report.summarize(records), out, concurrency,
                                  records, results["ablations"])
            self.assertEqual(sorted(written),
                             ["concurrency.png", "edl.png", "grid.png",
                              "latency.png", "throughput.png"])
            for name in written:
                self.assertGreater(os.path.getsize(os.path.join(out, name)), 1000)

    def test_split_cores_compares_with_plain_on_both_cores(self):
        def rec(mode, seconds, steps=10, prompt="p"):
            return {"workload": "chat", "prompt": prompt, "mode": mode,
                    "identical": True, "output_tokens": 10,
                    "decoding_steps": steps, "draft_tokens": 4,
                    "accepted_draft_tokens": 2, "ttft_seconds": 0.1,
                    "total_seconds": seconds, "token_latencies_ms": [1.0]}
        shared = {"modes": ["plain", "trie"],
                  "records": [rec("plain", 1.0), rec("trie", 0.9, 8)]}
        split = {"modes": ["plain", "trie"], "draftsvc_cpus": "0",
                 "verifysvc_cpus": "1", "verifysvc_flags": ["--matmul_threads=1"],
                 "records": [rec("plain", 2.0), rec("trie", 0.5, 5)],
                 "errors": {"chat": {"assistant": "FAILED_PRECONDITION: x"}}}
        text = "\n".join(report.split_cores_lines(shared, split))
        # Plain on both cores took 1.0 s: the split trie's 0.5 s is 2x, the
        # verifier alone on one core 0.5x.
        self.assertIn("| trie | 20.0 | 2.00 | 2.00x | 1/1 |", text)
        self.assertIn("| plain (1 core) | 5.0 | 1.00 | 0.50x | 1/1 |", text)
        self.assertIn("| assistant | failed: FAILED_PRECONDITION: x", text)

    def test_peer_rows_by_workload(self):
        records = hf_peer.peer_records(
            [{"id": "a", "workload": "rag"}, {"id": "b", "workload": "code"}],
            [{"plain": (2.0, [1]), "trie-hierarchical": (1.0, [1])},
             {"plain": (1.0, [1]), "trie-hierarchical": (1.0, [1])}],
            [{"greedy": {"ids": [1], "seconds": 1.0},
              "prompt_lookup": {"ids": [1], "seconds": 1.0}},
             {"greedy": {"ids": [1], "seconds": 3.0},
              "prompt_lookup": {"ids": [1], "seconds": 1.0}}])
        rag = dict(report.peer_rows({"records": records}, "rag"))
        code = dict(report.peer_rows({"records": records}, "code"))
        self.assertAlmostEqual(rag["ours trie-hierarchical (cold)"]["speedup"], 2.0)
        self.assertAlmostEqual(rag["hf prompt lookup"]["speedup"], 1.0)
        self.assertAlmostEqual(code["hf prompt lookup"]["speedup"], 3.0)
        self.assertEqual(code["ours plain"]["requests"], 1)


class ModeConnectionsTest(unittest.TestCase):
    """Each drafted mode on a verifier process of its own (Token Recycling's
    table would carry one mode's predictions for a prompt into the next)."""

    class FakeService:
        def __init__(self, name="verifysvc"):
            self.name, self.stopped, self.siblings = name, False, []

        def sibling(self, name):
            child = ModeConnectionsTest.FakeService(name)
            self.siblings.append(child)
            return child

        def wait_address(self):
            return f"address of {self.name}"

        def metrics(self):
            if self.name == "verifysvc-trie-parallel":
                raise OSError("connection refused")
            return ("# HELP lookahead_step_cost_seconds x\n"
                    f'lookahead_step_cost_seconds{{model="{self.name}",'
                    'tokens="2"} 0.0037\n'
                    f'lookahead_step_cost_seconds{{model="{self.name}",'
                    'tokens="1"} 0.0027\n'
                    'lookahead_draftsvc_up{model="m"} 1\n')

        def stop(self):
            self.stopped = True

    class FakeClientConnection(FakeConnection):
        def __init__(self, address):
            super().__init__()
            self.address = address

    def test_drafted_modes_get_a_verifier_each_plain_the_main_one(self):
        main = FakeConnection()
        service = self.FakeService()
        args = types.SimpleNamespace(max_new_tokens=4, timeout=5)
        with contextlib.ExitStack() as stack, mock.patch.object(
                harness, "Connection", self.FakeClientConnection):
            connect = run.ModeConnections(stack, main, service, args)
            self.assertFalse(connect.shared)
            self.assertIs(connect("plain"), main)
            hierarchical = connect("trie-hierarchical")
            parallel = connect("trie-parallel")
            self.assertIsNot(hierarchical, main)
            self.assertIsNot(hierarchical, parallel)
            self.assertIs(connect("trie-hierarchical"), hierarchical)
            self.assertEqual(hierarchical.address,
                             "address of verifysvc-trie-hierarchical")
            self.assertEqual([s.name for s in service.siblings],
                             ["verifysvc-trie-hierarchical",
                              "verifysvc-trie-parallel"])
            # Each new verifier answered a throwaway request first.
            self.assertEqual(len(hierarchical.calls), 1)
            # Each verifier's cost model as it serves; one that cannot be
            # scraped is left out, not fatal.
            self.assertEqual(connect.cost_curves(),
                             {"plain": {1: 2.7, 2: 3.7},
                              "trie-hierarchical": {1: 2.7, 2: 3.7}})
        self.assertTrue(all(s.stopped for s in service.siblings))

    def test_given_services_are_shared(self):
        main = FakeConnection()
        connect = run.ModeConnections(None, main, None,
                                      types.SimpleNamespace())
        self.assertTrue(connect.shared)
        self.assertIs(connect("trie-parallel"), main)
        self.assertEqual(connect.cost_curves(), {})


class RunArgsTest(unittest.TestCase):
    def test_llamacpp_peer_raises_the_context_limit(self):
        def flags(*argv):
            return [f for f in run.parse_args(["--peer=llamacpp", *argv])
                    .verifysvc_flag if "prefix_cache" not in f]
        # Depth 4000 + 128 generated, rounded up to 512.
        self.assertEqual(flags(), ["--max_context_tokens=4608"])
        self.assertEqual(flags("--llamacpp_depths=6000"),
                         ["--max_context_tokens=6144"])
        # Not where the default does, over the user's own value, for
        # services it does not start, nor without the peer.
        self.assertEqual(flags("--llamacpp_depths=64",
                               "--llamacpp_prompt_sizes=128"), [])
        self.assertEqual(flags("--verifysvc_flag=--max_context_tokens=3000"),
                         ["--max_context_tokens=3000"])
        self.assertEqual(flags("--verifysvc=localhost:1"), [])
        self.assertFalse([f for f in run.parse_args(["--peer=hf"])
                          .verifysvc_flag if "max_context_tokens" in f])

    def test_the_prefix_cache_is_off_unless_asked_for(self):
        self.assertEqual(run.parse_args([]).verifysvc_flag,
                         ["--prefix_cache_mib=0"])
        self.assertEqual(run.parse_args(
            ["--verifysvc_flag=--prefix_cache_mib=64"]).verifysvc_flag,
            ["--prefix_cache_mib=64"])
        self.assertEqual(run.parse_args(
            ["--verifysvc=localhost:1"]).verifysvc_flag, [])

    def parse_error(self, *argv):
        """parse_args' error message for `argv` (it must fail)."""
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
            run.parse_args(list(argv))
        return err.getvalue()

    def test_model_by_name_or_path_is_what_verifysvc_serves(self):
        with tempfile.TemporaryDirectory() as cache, mock.patch.dict(
                os.environ, {"LOOKAHEAD_MODEL_DIR": cache}):
            qwen = os.path.join(cache, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
            open(qwen, "wb").close()
            # A name: tools/models.sh's file in the model cache.
            args = run.parse_args(["--model=qwen2.5-coder-1.5b",
                                   "--peer=llamacpp"])
            self.assertEqual(args.model_file, qwen)
            self.assertIn(f"--model={qwen}", args.verifysvc_flag)
            self.assertEqual(args.llamacpp_f32, "auto")
            # A path, as given.
            self.assertEqual(run.parse_args([f"--model={qwen}"]).model_file,
                             qwen)
            self.assertIn("unknown model 'qwen-9b'",
                          self.parse_error("--model=qwen-9b"))
            self.assertIn("tools/setup.sh --model=qwen2.5-coder-0.5b",
                          self.parse_error("--model=qwen2.5-coder-0.5b"))
            self.assertIn("no such file",
                          self.parse_error(f"--model={cache}/none.gguf"))
            self.assertIn("serves its own model", self.parse_error(
                "--model=qwen2.5-coder-1.5b", "--verifysvc=localhost:1"))
            self.assertIn("give one", self.parse_error(
                "--model=qwen2.5-coder-1.5b", f"--verifysvc_flag=--model={qwen}"))
            # llama.cpp's draft model, by name too; unknown: an error.
            self.assertEqual(run.parse_args([
                "--model=qwen2.5-coder-1.5b",
                "--llamacpp_draft_model=qwen2.5-coder-1.5b"]
            ).llamacpp_draft_file, qwen)
            self.assertIn("--llamacpp_draft_model: ", self.parse_error(
                "--llamacpp_draft_model=qwen2.5-coder-0.5b"))
        # Without --model, verifysvc's own default.
        args = run.parse_args([])
        self.assertIsNone(args.model_file)
        self.assertIsNone(args.llamacpp_draft_file)
        self.assertFalse([f for f in args.verifysvc_flag
                          if f.startswith("--model=")])
        self.assertIn("--llamacpp_f32", self.parse_error("--llamacpp_f32=yes"))

    def test_llamacpp_prompts_per_workload_with_text(self):
        def workload(name, ids):
            return workloads.Workload(name, "", [], [
                workloads.Prompt(i, {"tokens": [1]} if i.startswith("soup")
                                 else {"prompt": i}) for i in ids])
        selected = [workload("rag", ["r1", "r2", "r3"]),
                    workload("chat", ["c1"]),
                    workload("adversarial", ["soup1", "e1", "soup2", "e2"])]
        jobs = run.peer_text_jobs(selected, 2)
        self.assertEqual([(w, p.id) for w, p in jobs],
                         [("rag", "r1"), ("chat", "c1"), ("adversarial", "e1"),
                          ("rag", "r2"), ("adversarial", "e2")])


class DraftHeadTest(unittest.TestCase):
    def test_a_step_keeps_the_longest_matching_chain_prefix(self):
        ids = [1, 2, 3, 4, 5]
        self.assertEqual(draft_head.chain_accepted([[3, 9], [3, 4, 7]], ids, 1), 2)
        self.assertEqual(draft_head.chain_accepted([[9]], ids, 1), 0)
        # A chain running past the output's end accepts only what is there.
        self.assertEqual(draft_head.chain_accepted([[4, 5, 6]], ids, 2), 2)

    def test_simulate_steps_over_accepted_drafts_and_one_more_token(self):
        ids = [7, 1, 2, 3, 4, 5, 6]
        seen = []

        def propose(s):
            seen.append(s)
            return [ids[s + 1:s + 3]] if s == 1 else [[0]]
        # Root 1 accepts 2 and 3 (+ token 4); then one token a step.
        self.assertEqual(draft_head.simulate(ids, 1, propose), [2, 0, 0, 0])
        self.assertEqual(seen, [1, 4, 5, 6])

    def test_speedup_bound_charges_rows_and_head_evaluations(self):
        curve = {1: 4.0, 3: 6.0}
        # Two steps of 2 accepted: 6 tokens for 2 passes of 3 rows.
        self.assertAlmostEqual(
            draft_head.speedup_bound([2, 2], 2, 0, curve, 0), 6 * 4 / 12)
        self.assertAlmostEqual(
            draft_head.speedup_bound([2, 2], 2, 2, curve, 0.5), 6 * 4 / 14)

    def test_the_bench_split_is_held_out(self):
        self.assertEqual(draft_head.split_of("a", {"a", "b"}, {"a"}), "measured")
        self.assertEqual(draft_head.split_of("b", {"a", "b"}, {"a"}), "warmup")
        self.assertEqual(draft_head.split_of("c", {"a", "b"}, {"a"}), "train")

    def test_extra_chat_questions_come_from_titles_and_terms(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "library"))
            with open(os.path.join(root, "glossary.rst.txt"), "w") as f:
                f.write(".. glossary::\n\n   bytecode\n      What the "
                        "interpreter runs.\n\n   ``>>>``\n      A prompt.\n")
            with open(os.path.join(root, "library", "json.rst.txt"), "w") as f:
                f.write(":mod:`json` --- JSON encoder and decoder\n"
                        "========================================\n\n"
                        "Basic Usage\n-----------\n\nPOP3 Objects\n"
                        "------------\n\nNot a title\n--\n")
            questions = draft_head.extra_chat_questions(root, 100)
            self.assertCountEqual(questions, [
                "What is bytecode in Python?",
                "How do I use Python's json module?",
                "What is the json module in Python used for (JSON encoder "
                "and decoder)?",
                "Can you show an example of JSON encoder and decoder with "
                "Python's json module?",
                "Explain basic Usage in Python's json module.",
                "Explain POP3 Objects in Python's json module."])
            self.assertEqual(draft_head.extra_chat_questions(root, 2),
                             questions[:2])

    def test_extra_code_prompts_stop_after_the_docstring(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "test"))
            body = ('    """Returns the sum of a and b, or a alone when b '
                    'is None."""\n    return a + (b or 0)\n')
            with open(os.path.join(root, "m.py"), "w") as f:
                f.write("def add(a, b=None):\n" + body +
                        "def _private(a, b):\n" + body +
                        "@cache\ndef decorated(a, b):\n" + body +
                        'def only_doc(a, b):\n    """Returns nothing at all, '
                        'only a docstring here."""\n')
            with open(os.path.join(root, "test", "t.py"), "w") as f:
                f.write("def skipped(a, b=None):\n" + body)
            self.assertEqual(draft_head.extra_code_prompts(root, 10), [
                'def add(a, b=None):\n    """Returns the sum of a and b, or '
                'a alone when b is None."""\n'])


if __name__ == "__main__":
    unittest.main()
