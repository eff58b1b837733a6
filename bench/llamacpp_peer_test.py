"""Unit tests of the llama.cpp peer's pure parts (no llama.cpp, no servers):

    /usr/bin/python3 -m unittest discover -s bench -p '*_test.py'

The fixtures are llama.cpp's output as its printers write it
(tools/llama-bench/llama-bench.cpp, common/sampling.cpp common_perf_print,
examples/lookup/lookup.cpp, tools/completion/completion.cpp).
"""

import contextlib
import io
import os
import stat
import tempfile
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


# verifysvc's start lines, as bench/run.py keeps them (results.json's
# "verifysvc_log").
VERIFYSVC_LOG = [
    "verifysvc: model /m.gguf (llama, 30 layers), weights native, in 0.9 s",
    "verifysvc: forward ms by tokens 1:21.2 2:20.6 3:20.0 4:21.1 8:24.3 "
    "16:34.5 32:59.7 64:112.5"]

# llama-bench -p 1,2,64 -n 0 -d 128 -o jsonl (fields trimmed).
FORWARD_JSONL = """\
{"n_prompt": 1, "n_gen": 0, "n_depth": 128, "avg_ts": 200.0, "samples_ts": [180.0, 220.0]}
{"n_prompt": 2, "n_gen": 0, "n_depth": 128, "avg_ts": 400.0}
{"n_prompt": 64, "n_gen": 0, "n_depth": 128, "avg_ts": 700.0, "samples_ts": [600.0, 800.0]}
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

    def test_completion_decode_is_the_eval_line(self):
        tokens, seconds = llamacpp_peer.completion_decode(
            llamacpp_peer.parse_perf(PERF))
        self.assertEqual((tokens, seconds), (127, 1.27))
        # The rate llama.cpp prints on that line.
        self.assertAlmostEqual(tokens / seconds, 100.0)
        with self.assertRaisesRegex(ValueError, "no eval timings"):
            llamacpp_peer.completion_decode(llamacpp_peer.parse_perf(
                PERF.replace("        eval time", "        xxxx time")))

    def test_step_cost_line(self):
        cost = llamacpp_peer.parse_step_cost(VERIFYSVC_LOG)
        self.assertEqual(sorted(cost), [1, 2, 3, 4, 8, 16, 32, 64])
        self.assertEqual((cost[1], cost[3], cost[64]), (21.2, 20.0, 112.5))
        self.assertEqual(llamacpp_peer.parse_step_cost(VERIFYSVC_LOG[:1]), {})
        self.assertEqual(llamacpp_peer.parse_step_cost([]), {})

    def test_ms_per_pass(self):
        self.assertAlmostEqual(llamacpp_peer.ms_per_pass(1, 250.0), 4.0)
        self.assertAlmostEqual(llamacpp_peer.ms_per_pass(64, 800.0), 80.0)

    def test_forward_cost_rows_side_by_side(self):
        llama = llamacpp_peer.parse_bench(FORWARD_JSONL)
        self.assertEqual([(r["test"], r["n_depth"]) for r in llama],
                         [("pp1", 128), ("pp2", 128), ("pp64", 128)])
        rows = llamacpp_peer.forward_cost_rows(
            llamacpp_peer.parse_step_cost(VERIFYSVC_LOG),
            {"Q4_1": llama, "F32": llama[1:]}, [1, 2, 64, 128])
        self.assertEqual([r["tokens"] for r in rows], [1, 2, 64, 128])
        one, two, wide, none = rows
        # The fastest repetition: 1 / 220 tok/s, 64 / 800 tok/s; without
        # samples the mean: 2 / 400 tok/s.
        self.assertAlmostEqual(one["ms"]["Q4_1"], 1e3 / 220)
        self.assertAlmostEqual(two["ms"]["Q4_1"], 5.0)
        self.assertAlmostEqual(wide["ms"]["Q4_1"], 80.0)
        self.assertEqual((one["ms"]["ours"], wide["ms"]["ours"]),
                         (21.2, 112.5))
        self.assertAlmostEqual(wide["relative"]["ours"], 112.5 / 21.2)
        self.assertAlmostEqual(wide["relative"]["Q4_1"], 80.0 * 220 / 1e3)
        self.assertAlmostEqual(one["relative"]["ours"], 1.0)
        # F32 has no 1-token pass: its ms, no ratio; no engine has 128.
        self.assertAlmostEqual(two["ms"]["F32"], 5.0)
        self.assertNotIn("F32", two["relative"])
        self.assertNotIn("F32", one["ms"])
        self.assertEqual(none, {"tokens": 128, "ms": {}, "relative": {}})

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

    def test_speculative_drafts_with_the_draft_model_on_the_same_threads(self):
        argv = " ".join(llamacpp_peer.speculative_argv(
            "S", "t.gguf", "d.gguf", "p.txt", 128, 2, 2048))
        for flag in ("S -m t.gguf -md d.gguf", "-n 127 --temp 0", "-t 2",
                     "-td 2", "-c 2048"):
            self.assertIn(flag, argv)
        self.assertNotIn("--spec-type", argv)
        simple = llamacpp_peer.speculative_argv(
            "SS", "t.gguf", "d.gguf", "p.txt", 128, 2, 2048, simple=True)
        self.assertEqual(simple[-2:], ["--spec-type", "draft-simple"])

    def test_speculative_kinds_need_their_binary_and_a_draft_model(self):
        tools = llamacpp_peer.Tools("B", "C", "L", "info", None, "S", "SS")
        self.assertEqual(llamacpp_peer.drafting_kinds(tools, None), ["lookup"])
        self.assertEqual(llamacpp_peer.drafting_kinds(tools, "d.gguf"),
                         ["lookup", "speculative", "speculative-simple"])
        self.assertEqual(llamacpp_peer.drafting_kinds(self.tools, "d.gguf"),
                         ["lookup"])
        self.assertEqual(llamacpp_peer.speculative_kinds(tools, "d.gguf"),
                         ["speculative", "speculative-simple"])
        self.assertEqual(llamacpp_peer.speculative_kinds(tools, None), [])

    def test_filler_repeats(self):
        self.assertEqual(llamacpp_peer.filler([1, 2, 3], 7), [1, 2, 3, 1, 2, 3, 1])
        with self.assertRaises(ValueError):
            llamacpp_peer.filler([], 3)

    def test_rotated_fillers_begin_differently(self):
        self.assertEqual(llamacpp_peer.rotated_filler([1, 2, 3], 5, 1),
                         [2, 3, 1, 2, 3])
        self.assertEqual(llamacpp_peer.rotated_filler([1, 2, 3], 2, 4), [2, 3])
        ids = list(range(100, 140))
        starts = {tuple(llamacpp_peer.rotated_filler(ids, 64, k)[:32])
                  for k in range(1, 26)}
        self.assertEqual(len(starts), 25)

    def test_context_for_the_deepest_test(self):
        # 4000 + 128 generated, rounded up to 512.
        self.assertEqual(llamacpp_peer.context_tokens_needed(
            [64, 1000, 4000], [512, 2000]), 4608)
        self.assertEqual(llamacpp_peer.context_tokens_needed([], [4095]), 4096)
        self.assertEqual(llamacpp_peer.context_tokens_needed([], [4096]), 4608)
        # Never below verifysvc's default, where the peer prompts fit.
        self.assertEqual(llamacpp_peer.context_tokens_needed([64], [128]),
                         2048)


class ModelsTest(unittest.TestCase):
    def test_the_served_file_is_labelled_by_its_quant_type(self):
        self.assertEqual(llamacpp_peer.served_label("Q4_K_M"), "Q4_K_M")
        self.assertEqual(llamacpp_peer.served_label(""), "GGUF")
        qwen = "/cache/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
        self.assertEqual(llamacpp_peer.peer_models(qwen, "Q4_K_M"),
                         {"Q4_K_M": qwen})
        self.assertEqual(list(llamacpp_peer.peer_models(qwen, "Q4_K_M",
                                                        "/f.gguf")),
                         ["Q4_K_M", "F32"])
        # An F32 file is its own F32 copy.
        self.assertEqual(llamacpp_peer.peer_models("/m.gguf", "F32", "/f"),
                         {"F32": "/m.gguf"})

    def test_f32_copy_only_for_small_files_unless_asked(self):
        wants = llamacpp_peer.wants_f32
        smollm2, qwen = 98362432, 1117320768  # tools/models.sh's sizes
        self.assertTrue(wants("auto", "Q4_1", smollm2))
        self.assertFalse(wants("auto", "Q4_K_M", qwen))
        self.assertTrue(wants("on", "Q4_K_M", qwen))
        self.assertFalse(wants("off", "Q4_1", smollm2))
        self.assertFalse(wants("on", "F32", smollm2))
        with self.assertRaisesRegex(ValueError, "one of"):
            wants("yes", "Q4_1", smollm2)

    def test_f32_copies_of_two_quantizations_differ(self):
        self.assertEqual(llamacpp_peer.f32_file_name(
            "/c/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
            "qwen2.5-coder-1.5b-instruct-q4_k_m.F32.gguf")
        self.assertEqual(llamacpp_peer.f32_file_name(
            "SmolLM2-135M-Instruct.Q4_1.gguf"),
            "SmolLM2-135M-Instruct.Q4_1.F32.gguf")
        self.assertEqual(llamacpp_peer.f32_file_name("/c/model"),
                         "model.F32.gguf")


def fake_install(root, binaries, quantize_exit=0):
    """An install folder with executable `binaries` in bin/ and a
    build-info.txt; its llama-quantize (when listed) copies its input to
    its output, logging each call, or fails with `quantize_exit`."""
    os.makedirs(os.path.join(root, "bin"))
    for name in binaries:
        path = os.path.join(root, "bin", name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n")
            if name == "llama-quantize":
                f.write(f'echo "$@" >>"{root}/quantize.log"\n'
                        + (f'touch "$3"; exit {quantize_exit}\n'
                           if quantize_exit else 'cp "$2" "$3"\n'))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    with open(os.path.join(root, "build-info.txt"), "w") as f:
        f.write("llama.cpp test\n")
    return root


class InstallTest(unittest.TestCase):
    def test_tools_name_quantize_and_lookup_where_present(self):
        with tempfile.TemporaryDirectory() as root:
            tools = llamacpp_peer.ensure_build(fake_install(
                root, ["llama-bench", "llama-completion", "llama-quantize"]))
            self.assertEqual(tools.quantize,
                             os.path.join(root, "bin", "llama-quantize"))
            self.assertIsNone(tools.lookup)
            self.assertEqual(tools.build_info, "llama.cpp test")

    def test_f32_copy_made_once_and_again_for_a_newer_file(self):
        with tempfile.TemporaryDirectory() as root:
            install = fake_install(os.path.join(root, "install"), [
                "llama-bench", "llama-completion", "llama-quantize"])
            tools = llamacpp_peer.ensure_build(install)
            model = os.path.join(root, "m-q4_k_m.gguf")
            with open(model, "w") as f:
                f.write("weights")
            with contextlib.redirect_stdout(io.StringIO()):
                path = llamacpp_peer.ensure_f32(tools, model, install)
            self.assertEqual(path, os.path.join(install, "models",
                                                "m-q4_k_m.F32.gguf"))
            with open(path) as f:
                self.assertEqual(f.read(), "weights")
            self.assertEqual(llamacpp_peer.ensure_f32(tools, model, install),
                             path)
            log = os.path.join(install, "quantize.log")
            with open(log) as f:
                self.assertEqual(len(f.readlines()), 1)
            # The model file changed since: a new copy.
            os.utime(model, (os.path.getmtime(path) + 10,) * 2)
            with contextlib.redirect_stdout(io.StringIO()):
                llamacpp_peer.ensure_f32(tools, model, install)
            with open(log) as f:
                self.assertEqual(len(f.readlines()), 2)

    def test_a_failed_f32_copy_leaves_nothing(self):
        with tempfile.TemporaryDirectory() as root:
            install = fake_install(os.path.join(root, "install"), [
                "llama-bench", "llama-completion", "llama-quantize"],
                quantize_exit=3)
            model = os.path.join(root, "m.gguf")
            open(model, "w").close()
            with self.assertRaisesRegex(RuntimeError, "llama-quantize"), \
                    contextlib.redirect_stdout(io.StringIO()):
                llamacpp_peer.ensure_f32(llamacpp_peer.ensure_build(install),
                                         model, install)
            self.assertEqual(os.listdir(os.path.join(install, "models")), [])
            no_quantize = llamacpp_peer.Tools("B", "C", None, "info")
            with self.assertRaisesRegex(RuntimeError, "lacks llama-quantize"):
                llamacpp_peer.ensure_f32(no_quantize, model, install)


class TokensConnection:
    """Answers Generate on tokens= prompts: n_gen output tokens, TTFT 0.5
    s, 0.01 s a token after it; 32 cached prompt tokens when the prompt
    begins like an earlier one (a prefix cache of 32-token blocks)."""

    def __init__(self, early_stops=0):
        self.prompts = []
        self.early_stops = early_stops  # first decodes to end at 1 token

    def generate(self, request_kwargs, *, branch_length=0, timeout=None,
                 **kwargs):
        tokens = request_kwargs["tokens"]
        cached = 32 if any(p[:32] == tokens[:32] for p in self.prompts) else 0
        self.prompts.append(tokens)
        n = kwargs["max_new_tokens"]
        if n > 1 and self.early_stops > 0:
            self.early_stops -= 1
            n = 1  # EOS right away
        usage = types.SimpleNamespace(
            prompt_tokens=len(tokens), output_tokens=n,
            time_to_first_token_seconds=0.5, total_seconds=0.5 + 0.01 * (n - 1),
            cached_prompt_tokens=cached)
        yield types.SimpleNamespace(token_ids=[7] * n,
                                    HasField=lambda name: False)
        yield types.SimpleNamespace(token_ids=[],
                                    HasField=lambda name: True, usage=usage)


class OursSpeedTest(unittest.TestCase):
    def test_points_repetitions_and_no_prefix_cache(self):
        fake = TokensConnection()
        settings = types.SimpleNamespace(
            repetitions=2, prompt_sizes=[100], depths=[64, 4000],
            context_limit=2048, timeout=5)
        rows = llamacpp_peer.ours_speed(fake, list(range(1000, 1300)),
                                        settings)
        self.assertEqual([r["test"] for r in rows],
                         ["pp100", "tg128", "tg128"])
        pp, tg, deep = rows
        self.assertEqual(pp["samples"], [200.0, 200.0])  # 100 tokens / 0.5 s
        self.assertAlmostEqual(tg["tokens_per_second"], 100.0)
        self.assertEqual(tg["n_depth"], 64)
        self.assertEqual((pp["cached_prompt_tokens"],
                          tg["cached_prompt_tokens"]), (0, 0))
        self.assertIn("2048", deep["skipped"])
        # Four prompts, none beginning like another, nor like the filler
        # itself (the first peer prompt).
        self.assertEqual(len(fake.prompts), 4)
        starts = {tuple(p[:32]) for p in fake.prompts}
        self.assertEqual(len(starts), 4)
        self.assertNotIn(tuple(range(1000, 1032)), starts)


    def test_a_decode_that_stops_early_is_retried_not_averaged(self):
        fake = TokensConnection(early_stops=1)
        settings = types.SimpleNamespace(
            repetitions=2, prompt_sizes=[], depths=[64],
            context_limit=2048, timeout=5)
        (tg,) = llamacpp_peer.ours_speed(fake, list(range(1000, 1300)),
                                         settings)
        self.assertEqual(tg["samples"], [100.0, 100.0])
        self.assertEqual(tg["stopped_early"], 1)
        self.assertEqual(len(fake.prompts), 3)
        always = TokensConnection(early_stops=10)
        (tg,) = llamacpp_peer.ours_speed(always, list(range(1000, 1300)),
                                         settings)
        self.assertIn("stopped within", tg["skipped"])


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


def records(workload="chat", ttft=0.5, q4_decode=0.5):
    pieces = {1: "Hi", 2: " there", 3: "!", 9: "<eos>"}
    job = {"id": "q", "workload": workload, "ids": [5, 6], "max_new_tokens": 8,
           "ours": {"ours plain": (2.0, [1, 2, 3, 9]),
                    "ours trie-hierarchical (cold)": (1.0, [1, 2, 3, 9])},
           "usage": {"ours plain": {"ttft_seconds": ttft,
                                    "cached_prompt_tokens": 0},
                     "ours trie-hierarchical (cold)": {
                         "ttft_seconds": 0.25, "cached_prompt_tokens": 1}}}
    lookup = dict(n_draft=3, drafted=8, accepted=6)
    runs = {
        "llama.cpp Q4_1 greedy": run_dict("Hi there?", prompt_ids=[5, 6],
                                          decode_tokens=9,
                                          decode_seconds=q4_decode),
        "llama.cpp Q4_1 lookup": run_dict("Hi there?<|im_end|>", 11, 0.5,
                                          **lookup),
        "llama.cpp F32 greedy": run_dict("Hi there!", 10, 4.0, prompt_ids=[5],
                                         decode_tokens=9, decode_seconds=3.0),
        "llama.cpp F32 lookup": run_dict("Hi there!", 10, 2.0, **lookup),
        "llama.cpp Q4_1 speculative": run_dict(
            "Hi there?", 10, 0.4, n_draft=3, drafted=9, accepted=3),
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
        # A speculative run is a drafting run too: compared with its greedy.
        speculative = by_engine["llama.cpp Q4_1 speculative"]
        self.assertTrue(speculative["same_as_greedy"])
        self.assertEqual((speculative["drafted"], speculative["accepted"]),
                         (9, 3))

    def test_decode_phase_without_the_prompt(self):
        by_engine = {r["engine"]: r for r in records()}
        plain = by_engine["ours plain"]
        # 4 output tokens, 3 after the first; 2.0 s - 0.5 s TTFT.
        self.assertEqual((plain["decode_tokens"], plain["decode_seconds"]),
                         (3, 1.5))
        trie = by_engine["ours trie-hierarchical (cold)"]
        self.assertEqual((trie["decode_seconds"], trie["prompt_tokens"],
                          trie["cached_prompt_tokens"]), (0.75, 2, 1))
        self.assertEqual(by_engine["llama.cpp F32 greedy"]["decode_tokens"], 9)
        self.assertNotIn("decode_tokens", by_engine["llama.cpp F32 lookup"])
        self.assertEqual(llamacpp_peer.ours_decode([7], 1.0, 1.0), (0, 0.0))


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
        "speculative": ["speculative"], "draft_model": "d.gguf",
        "ours_peak_rss": 700 * 2 ** 20, "seconds": 3.0,
        "ours_bench": [pp(512, 400.0), tg(64, 30.0),
                       tg(4000, 0, skipped="over --max_context_tokens (2048)")],
        "bench": {"Q4_1": bench, "F32": dict(bench, rows=[tg(64, 40.0)])},
        "forward_cost": llamacpp_peer.forward_cost_rows(
            {1: 20.0, 2: 21.0, 64: 110.0},
            {"Q4_1": llamacpp_peer.parse_bench(FORWARD_JSONL), "F32": []},
            [1, 2, 64]),
        "forward_depth": {"ours": 128, "Q4_1": 128, "F32": None},
        "records": records() + records("rag", ttft=1.25, q4_decode=0.25)}


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
        self.assertEqual(rows["request tok/s, speculative (d.gguf)"],
                         ("-", "25.0", "n/a"))
        # The fastest llama.cpp mode over every request: Q4_1 speculative
        # (20 tokens in 0.8 s); ours trie 4.0 tok/s.
        self.assertEqual(
            rows["ours drafted / llama.cpp's best mode "
                 "(llama.cpp Q4_1 speculative, 25.0 tok/s)"],
            ("0.16x", "-", "-"))

    def test_request_stats_by_workload(self):
        stats = report.llamacpp_request_stats(section(), "rag")
        self.assertEqual(stats["llama.cpp Q4_1 lookup"]["requests"], 1)
        self.assertAlmostEqual(stats["llama.cpp Q4_1 lookup"]["acceptance"],
                               0.75)
        self.assertAlmostEqual(
            stats["llama.cpp Q4_1 lookup"]["tokens_per_second"], 22.0)

    def test_plain_decode_rows_by_workload(self):
        rows = {r[0]: r[1:] for r in report.llamacpp_decode_rows(section())}
        self.assertEqual(list(rows), ["chat", "rag", "all"])
        # chat: ours 3 tokens / 1.5 s, Q4_1 9 / 0.5 s, F32 9 / 3.0 s.
        self.assertEqual(rows["chat"][0], 1)
        self.assertEqual(rows["chat"][1:4], (2.0, 18.0, 3.0))
        self.assertAlmostEqual(rows["chat"][4], 2.0 / 18.0)
        # rag: ours 3 / 0.75 s, Q4_1 9 / 0.25 s.
        self.assertEqual(rows["rag"][1:3], (4.0, 36.0))
        # all: summed tokens over summed seconds, not a mean of rates.
        self.assertEqual(rows["all"][0], 2)
        self.assertAlmostEqual(rows["all"][1], 6 / 2.25)
        self.assertAlmostEqual(rows["all"][2], 18 / 0.75)

    def test_forward_cost_table(self):
        text = "\n".join(report.llamacpp_forward_lines(section()))
        for expected in (
                "| tokens | ours ms | x1 | llama.cpp Q4_1 ms | x1 | "
                "llama.cpp F32 ms | x1 |",
                "| 1 | 20.0 | 1.00 | 4.5 | 1.00 | n/a | n/a |",
                "| 2 | 21.0 | 1.05 | 5.0 | 1.10 | n/a | n/a |",
                "| 64 | 110.0 | 5.50 | 80.0 | 17.60 | n/a | n/a |",
                "after 128 cached tokens"):
            self.assertIn(expected, text)
        self.assertNotIn("no -d", text)
        no_depth = dict(section(), forward_depth={"ours": 128, "Q4_1": 0})
        self.assertIn("llama.cpp Q4_1 after 0: this llama-bench has no -d",
                      "\n".join(report.llamacpp_forward_lines(no_depth)))
        self.assertEqual(report.llamacpp_forward_lines(
            dict(section(), forward_cost=[])), [])

    def test_section_renders(self):
        text = "\n".join(report.llamacpp_lines(section()))
        for expected in ("## Peer: llama.cpp",
                         "| measure | ours | llama.cpp Q4_1 | llama.cpp F32 |",
                         "| decode tok/s, context 4000 | n/a | 60.0 ± 1.4 | n/a |",
                         "| chat | 1 | 2.0 | 4.0 | 10.0 | 22.0 | 25.0 | 2.5 | 5.0 |",
                         "| chat | 1 | 2.0 | 18.0 | 3.0 | 0.11x |",
                         "| all | 2 | 2.7 | 24.0 | 3.0 | 0.11x |",
                         "| 64 | 110.0 | 5.50 | 80.0 | 17.60 | n/a | n/a |",
                         "and 50% of its prompt tokens came from the prefix",
                         "Requests: the 2 peer prompts",
                         "n-grams of the request only, its default n_draft 3)",
                         "draft with d.gguf (llama.cpp's default draft size",
                         "| Q4_1 speculative |",
                         "llama.cpp draft acceptance (accepted / drafted): "
                         "Q4_1 lookup 75%, Q4_1 speculative 33%, "
                         "F32 lookup 75%."):
            self.assertIn(expected, text)
        results = {"started": "s", "commit": "c", "seconds": 1,
                   "machine": {"usable_cpus": 2, "cpus": 2, "platform": "p",
                               "load_average_start": [0.0]},
                   "args": {"max_new_tokens": 8}, "sources": {},
                   "llamacpp": section()}
        self.assertIn("## Peer: llama.cpp", report.markdown(results, {}, []))
        self.assertNotIn("yet up to", text)
        failed = dict(section(), errors={
            "llama.cpp Q4_1 speculative": "llamacpp_peer: x failed (1):\n"
                                          "E failed to initialize"})
        self.assertIn("llama.cpp Q4_1 speculative failed (its requests are "
                      "left out): `E failed to initialize`",
                      "\n".join(report.llamacpp_lines(failed)))
        hit = section()
        hit["ours_bench"][0]["cached_prompt_tokens"] = 64
        self.assertIn("serves none of it, yet up to 64 tokens came from it",
                      "\n".join(report.llamacpp_lines(hit)))


def qwen_section():
    """section() as a run on Qwen2.5-Coder-1.5B Q4_K_M without an F32
    copy: the Q4_1 column relabelled, the F32 one gone."""
    base = section()
    rename = lambda engine: engine.replace("Q4_1", "Q4_K_M")  # noqa: E731
    return dict(
        base, model_name="Qwen2.5 Coder 1.5B Instruct", f32="auto",
        models={"Q4_K_M": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"},
        bench={"Q4_K_M": base["bench"]["Q4_1"]},
        forward_cost=llamacpp_peer.forward_cost_rows(
            {1: 20.0, 2: 21.0, 64: 110.0},
            {"Q4_K_M": llamacpp_peer.parse_bench(FORWARD_JSONL)}, [1, 2, 64]),
        forward_depth={"ours": 128, "Q4_K_M": 128},
        records=[dict(r, engine=rename(r["engine"])) for r in base["records"]
                 if "F32" not in r["engine"]])


class OtherModelReportTest(unittest.TestCase):
    def test_columns_and_text_come_from_the_served_file(self):
        text = "\n".join(report.llamacpp_lines(qwen_section()))
        for expected in (
                "(Qwen2.5 Coder 1.5B Instruct, "
                "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf, run as Q4_K_M by "
                "llama.cpp's quantized kernels; no F32 copy: bench/run.py "
                "--llamacpp_f32=on makes one).",
                "| measure | ours | llama.cpp Q4_K_M |",
                "| decode tok/s, context 64 | 30.0 ± 1.4 | 100.0 ± 1.4 |",
                "| tokens | ours ms | x1 | llama.cpp Q4_K_M ms | x1 |",
                "| 64 | 110.0 | 5.50 | 80.0 | 17.60 |",
                "| workload | prompts | ours plain | llama.cpp Q4_K_M greedy "
                "| ours / Q4_K_M |",
                "| chat | 1 | 2.0 | 18.0 | 0.11x |",
                "ours / Q4_K_M >= 1.00",
                "llama.cpp draft acceptance (accepted / drafted): "
                "Q4_K_M lookup 75%, Q4_K_M speculative 33%."):
            self.assertIn(expected, text)
        self.assertNotIn("Q4_1", text)
        self.assertNotIn("llama.cpp F32", text)

    def test_results_of_earlier_runs_still_render(self):
        # Their "models" were Q4_1 then F32, without model_name or f32.
        text = "\n".join(report.llamacpp_lines(section()))
        self.assertIn("(m.gguf, run as Q4_1 by llama.cpp's quantized "
                      "kernels) and its F32 copy", text)


if __name__ == "__main__":
    unittest.main()
