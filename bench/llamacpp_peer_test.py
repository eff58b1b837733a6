"""Unit tests of the llama.cpp peer's pure parts (no llama.cpp, no servers):

    /usr/bin/python3 -m unittest discover -s bench -p '*_test.py'

The fixtures are llama.cpp's output as its printers write it
(tools/llama-bench/llama-bench.cpp, common/sampling.cpp common_perf_print,
examples/lookup/lookup.cpp, tools/completion/completion.cpp).
"""

import types
import unittest

import llamacpp_peer
import report

BENCH_JSON = """\
load_backend: loaded CPU backend
[
  {
    "build_commit": "llama-cpp-python-0.3.36",
    "build_number": 0,
    "model_type": "llama ?B Q4_1",
    "n_threads": 2,
    "n_prompt": 512,
    "n_gen": 0,
    "n_depth": 0,
    "avg_ns": 1000000000,
    "stddev_ns": 1000,
    "avg_ts": 512.000000,
    "stddev_ts": 4.500000,
    "samples_ns": [ 1000000000, 1000000000 ],
    "samples_ts": [ 508.0, 516.0 ]
  },
  {
    "build_commit": "llama-cpp-python-0.3.36",
    "build_number": 0,
    "model_type": "llama ?B Q4_1",
    "n_threads": 2,
    "n_prompt": 0,
    "n_gen": 128,
    "n_depth": 1000,
    "avg_ns": 2000000000,
    "stddev_ns": 1000,
    "avg_ts": 64.000000,
    "stddev_ts": 0.000000,
    "samples_ns": [ 2000000000 ],
    "samples_ts": [ 64.0 ]
  }
]
"""

# stderr lines carry a time and level prefix; a piece's newline breaks
# its line.
PERF = """\
0.03.441.966 I common_perf_print:    sampling time =      12.50 ms
0.03.441.968 I common_perf_print:    samplers time =       4.00 ms /   140 tokens
0.03.441.970 I common_perf_print:        load time =     300.00 ms
0.03.441.971 I common_perf_print: prompt eval time =     100.00 ms /    12 tokens (    8.33 ms per token,   120.00 tokens per second)
0.03.441.972 I common_perf_print:        eval time =    1270.00 ms /   127 runs   (   10.00 ms per token,   100.00 tokens per second)
0.03.441.972 I common_perf_print:       total time =    1500.00 ms /   139 tokens
"""

LOOKUP = """\
0.03.918.059 I encoded   12 tokens in    0.100 seconds, speed:  120.000 t/s
0.03.918.078 I decoded  130 tokens in    0.900 seconds, speed:  144.444 t/s
0.03.918.091 I
0.03.918.105 I n_draft      = 3
0.03.918.118 I n_predict    = 130
0.03.918.131 I n_drafted    = 60
0.03.918.145 I t_draft_flat = 0.01 ms
0.03.918.159 I t_draft      = 0.50 ms, 8.33 us per token, 120000.00 tokens per second
0.03.918.173 I n_accept     = 45
0.03.918.186 I accept       = 75.000%
0.03.918.199 I
target:

""" + PERF

VERBOSE_PROMPT = """\
0.00.366.780 I llama_completion: prompt: 'Hi
there'
0.00.366.782 I llama_completion: number of tokens in prompt = 3
0.00.366.784 I  12345 -> 'Hi'
0.00.366.784 I    198 -> '
'
0.00.366.785 I   7865 -> 'there'
0.00.366.786 I
0.00.366.810 I sampler chain: logits -> ?penalties -> top-k -> dist
"""


class ParseTest(unittest.TestCase):
    def test_bench_json_after_log_lines(self):
        rows = llamacpp_peer.parse_bench(BENCH_JSON)
        self.assertEqual([(r["test"], r["n_depth"], r["tokens_per_second"])
                          for r in rows], [("pp512", 0, 512.0),
                                           ("tg128", 1000, 64.0)])
        self.assertEqual(rows[0]["samples"], [508.0, 516.0])
        self.assertEqual(rows[0]["build"], "llama-cpp-python-0.3.36")

    def test_bench_jsonl_and_versions_without_depth(self):
        rows = llamacpp_peer.parse_bench(
            '{"n_prompt": 0, "n_gen": 128, "avg_ts": 50.5}\n'
            '{"n_prompt": 64, "n_gen": 16, "avg_ts": 40}\n')
        self.assertEqual([(r["test"], r["n_depth"]) for r in rows],
                         [("tg128", 0), ("pp64+tg16", 0)])
        with self.assertRaisesRegex(ValueError, "no JSON"):
            llamacpp_peer.parse_bench("error: failed to load model\n")

    def test_perf_and_completion_result(self):
        perf = llamacpp_peer.parse_perf(PERF)
        self.assertEqual((perf["prompt_tokens"], perf["eval_runs"]), (12, 127))
        self.assertEqual((perf["prompt_ms"], perf["eval_ms"]), (100.0, 1270.0))
        tokens, seconds = llamacpp_peer.completion_result(perf)
        # Every eval run plus the last sample (the samplers' 140 count the
        # prompt too).
        self.assertEqual(tokens, 128)
        self.assertAlmostEqual(seconds, 1.3825)
        with self.assertRaisesRegex(ValueError, "no timings"):
            llamacpp_peer.completion_result(llamacpp_peer.parse_perf(""))

    def test_lookup_summary(self):
        summary = llamacpp_peer.parse_lookup(LOOKUP)
        self.assertEqual(summary, {
            "prompt_tokens": 12, "prompt_seconds": 0.1, "output_tokens": 130,
            "decode_seconds": 0.9, "n_draft": 3, "drafted": 60,
            "accepted": 45})

    def test_prompt_ids_with_a_newline_piece(self):
        self.assertEqual(llamacpp_peer.parse_prompt_ids(VERBOSE_PROMPT),
                         [12345, 198, 7865])
        self.assertIsNone(llamacpp_peer.parse_prompt_ids(PERF))

    def test_generated_texts(self):
        self.assertEqual(llamacpp_peer.completion_text(
            "Hello.\n [end of text]\n\n\n"), "Hello.\n")
        self.assertEqual(llamacpp_peer.completion_text("Hello\n\n\n"),
                         "Hello\n")
        self.assertEqual(llamacpp_peer.lookup_text(
            "\n\nQ: A\n<|im_end|>\n\n\n\n", "Q:"), " A\n<|im_end|>")
        self.assertIsNone(llamacpp_peer.lookup_text("\n\nX: A", "Q:"))

    def test_vm_hwm(self):
        self.assertEqual(llamacpp_peer.parse_vm_hwm(
            "VmPeak:\t 900 kB\nVmHWM:\t  2048 kB\n"), 2 * 2 ** 20)
        self.assertIsNone(llamacpp_peer.parse_vm_hwm("Name: x\n"))


class CommandLineTest(unittest.TestCase):
    tools = llamacpp_peer.Tools("B", "C", "L", "info")

    def test_bench_argv(self):
        self.assertEqual(
            llamacpp_peer.bench_argv(self.tools, "m.gguf", 2, 5, [0], [128],
                                     [64, 1000]),
            ["B", "-m", "m.gguf", "-t", "2", "-r", "5", "-p", "0", "-n", "128",
             "-o", "json", "-d", "64,1000"])
        self.assertNotIn("-d", llamacpp_peer.bench_argv(
            self.tools, "m", 2, 1, [512, 2000], [0]))
        self.assertTrue(llamacpp_peer.bench_supports_depth(
            "  -d, --n-depth <n>    (default: 0)"))
        self.assertFalse(llamacpp_peer.bench_supports_depth("  -p, --n-prompt"))

    def test_requests_are_raw_greedy_and_threaded(self):
        argv = llamacpp_peer.completion_argv(self.tools, "m", "p.txt", 128, 2,
                                             2048)
        for flag in (["--temp", "0"], ["-t", "2"], ["-n", "128"],
                     ["-c", "2048"], ["-no-cnv"], ["--no-escape"]):
            self.assertIn(" ".join(flag), " ".join(argv))
        lookup = llamacpp_peer.lookup_argv(self.tools, "m", "p.txt", 128, 2, 2048)
        self.assertEqual(lookup[0], "L")
        self.assertIn("-n 127 --temp 0", " ".join(lookup))

    def test_filler_repeats(self):
        self.assertEqual(llamacpp_peer.filler([1, 2, 3], 7), [1, 2, 3, 1, 2, 3, 1])
        with self.assertRaises(ValueError):
            llamacpp_peer.filler([], 3)


class CompareTest(unittest.TestCase):
    def test_compare_text(self):
        self.assertEqual(llamacpp_peer.compare_text("abc", "abc"), (True, None))
        self.assertEqual(llamacpp_peer.compare_text("abc", "abd"), (False, 2))
        self.assertEqual(llamacpp_peer.compare_text("abc", "ab"), (False, 2))
        self.assertEqual(llamacpp_peer.compare_text("abc", "abcd", prefix=True),
                         (True, None))
        self.assertEqual(llamacpp_peer.compare_text("abc", None), (False, 0))

    def test_diverged_token_bisects_our_prefixes(self):
        pieces = {1: "The", 2: " cat", 3: " sat", 4: "."}
        detokenize = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
        ids = [1, 2, 3, 4]
        self.assertEqual(llamacpp_peer.diverged_token(ids, detokenize,
                                                      "The cat ran."), 2)
        self.assertEqual(llamacpp_peer.diverged_token(ids, detokenize,
                                                      "A cat"), 0)
        self.assertEqual(llamacpp_peer.diverged_token(ids, detokenize,
                                                      "The cat sat."), 4)


def run_dict(text, tokens=10, seconds=1.0, **extra):
    return dict({"text": text, "output_tokens": tokens, "seconds": seconds,
                 "wall_seconds": seconds + 0.5, "peak_rss": 2 ** 20}, **extra)


def records(workload="chat"):
    pieces = {1: "Hi", 2: " there", 3: "!", 9: "<eos>"}
    job = {"id": "q", "workload": workload, "ids": [5, 6], "max_new_tokens": 8,
           "ours": {"ours plain": (2.0, [1, 2, 3, 9]),
                    "ours trie-hierarchical (cold)": (1.0, [1, 2, 3, 9])}}
    lookup = dict(n_draft=3, drafted=8, accepted=6)
    runs = {
        "llama.cpp Q4_1 greedy": run_dict("Hi there?", prompt_ids=[5, 6]),
        "llama.cpp Q4_1 lookup": run_dict("Hi there?<|im_end|>", 11, 0.5,
                                          **lookup),
        "llama.cpp F32 greedy": run_dict("Hi there!", 10, 4.0, prompt_ids=[5]),
        "llama.cpp F32 lookup": run_dict("Hi there!", 10, 2.0, **lookup),
    }
    return llamacpp_peer.request_records(
        job, runs, lambda ids: "".join(pieces[i] for i in ids))


class RecordsTest(unittest.TestCase):
    def test_text_against_our_plain_without_its_stop_token(self):
        by_engine = {r["engine"]: r for r in records()}
        self.assertTrue(by_engine["ours trie-hierarchical (cold)"]["identical"])
        q4 = by_engine["llama.cpp Q4_1 greedy"]
        self.assertEqual((q4["identical"], q4["diverged_at"],
                          q4["prompt_identical"]), (False, 2, True))
        f32 = by_engine["llama.cpp F32 greedy"]
        self.assertEqual((f32["identical"], f32["prompt_identical"]),
                         (True, False))
        # Lookup runs on past its greedy text (the end piece, overshoot).
        self.assertTrue(by_engine["llama.cpp Q4_1 lookup"]["same_as_greedy"])
        self.assertFalse(by_engine["llama.cpp Q4_1 lookup"]["identical"])
        self.assertTrue(by_engine["llama.cpp F32 lookup"]["identical"])


def section():
    tg = lambda depth, ts, **extra: dict(  # noqa: E731
        {"test": "tg128", "n_prompt": 0, "n_gen": 128, "n_depth": depth,
         "tokens_per_second": ts, "samples": [ts - 1, ts + 1]}, **extra)
    pp = lambda n, ts: {"test": f"pp{n}", "n_prompt": n, "n_gen": 0,  # noqa: E731
                        "n_depth": 0, "tokens_per_second": ts, "samples": [ts]}
    bench = {"rows": [pp(512, 900.0), tg(64, 100.0), tg(4000, 60.0)],
             "peak_rss": 300 * 2 ** 20}
    return {
        "version": "llama.cpp 0.5.0 (ggml 0.25.3), vendored in "
                   "llama-cpp-python 0.3.36",
        "threads": 2, "repetitions": 2, "context": 2048,
        "context_limit": 2048, "max_new_tokens": 8, "decode_tokens": 128,
        "models": {"Q4_1": "m.gguf", "F32": "m.f32.gguf"}, "lookup": True,
        "ours_peak_rss": 700 * 2 ** 20, "seconds": 3.0,
        "ours_bench": [pp(512, 400.0), tg(64, 30.0),
                       tg(4000, 0, skipped="over --max_context_tokens (2048)")],
        "bench": {"Q4_1": bench, "F32": dict(bench, rows=[tg(64, 40.0)])},
        "records": records() + records("rag")}


class ReportTest(unittest.TestCase):
    def test_comparison_rows(self):
        rows = {r[0]: r[1:] for r in report.llamacpp_comparison_rows(section())}
        self.assertEqual(rows["decode tok/s, context 64"],
                         ("30.0 ± 1.4", "100.0 ± 1.4", "40.0 ± 1.4"))
        self.assertEqual(rows["decode tok/s, context 4000"],
                         ("n/a", "60.0 ± 1.4", "n/a"))
        self.assertEqual(rows["prompt tok/s, 512 tokens"],
                         ("400.0", "900.0", "n/a"))
        self.assertEqual(rows["peak RSS MiB, requests (-c 2048)"],
                         ("700", "1", "1"))
        self.assertEqual(rows["request tok/s, plain / greedy"],
                         ("2.0", "10.0", "2.5"))
        self.assertEqual(rows["outputs = our plain decoding's (ours: trie's)"],
                         ("2/2", "0/2", "2/2"))
        self.assertEqual(rows["prompt token ids = ours"], ("-", "2/2", "0/2"))
        self.assertEqual(rows["prompt lookup output = own greedy's"],
                         ("-", "2/2", "2/2"))

    def test_request_stats_by_workload(self):
        stats = report.llamacpp_request_stats(section(), "rag")
        self.assertEqual(stats["llama.cpp Q4_1 lookup"]["requests"], 1)
        self.assertAlmostEqual(stats["llama.cpp Q4_1 lookup"]["acceptance"],
                               0.75)
        self.assertAlmostEqual(
            stats["llama.cpp Q4_1 lookup"]["tokens_per_second"], 22.0)

    def test_section_renders(self):
        text = "\n".join(report.llamacpp_lines(section()))
        for expected in ("## Peer: llama.cpp",
                         "| measure | ours | llama.cpp Q4_1 | llama.cpp F32 |",
                         "| decode tok/s, context 4000 | n/a | 60.0 ± 1.4 | n/a |",
                         "| chat | 1 | 2.0 | 4.0 | 10.0 | 22.0 | 2.5 | 5.0 |",
                         "Requests: the 2 peer prompts",
                         "n-grams of the request only, its default n_draft 3)",
                         "llama-lookup draft acceptance: Q4_1 75%, F32 75%."):
            self.assertIn(expected, text)
        results = {"started": "s", "commit": "c", "seconds": 1,
                   "machine": {"usable_cpus": 2, "cpus": 2, "platform": "p",
                               "load_average_start": [0.0]},
                   "args": {"max_new_tokens": 8}, "sources": {},
                   "llamacpp": section()}
        self.assertIn("## Peer: llama.cpp", report.markdown(results, {}, []))


if __name__ == "__main__":
    unittest.main()
