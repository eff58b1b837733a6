"""Unit tests of the suite's pure parts (no servers, no cache):

    /usr/bin/python3 -m unittest discover -s bench -p '*_test.py'
"""

import json
import os
import tempfile
import unittest

import report
import workloads


class PercentileTest(unittest.TestCase):
    def test_nearest_rank(self):
        values = list(range(1, 101))
        self.assertEqual(report.percentile(values, 50), 50)
        self.assertEqual(report.percentile(values, 99), 99)
        self.assertEqual(report.percentile([5.0], 99), 5.0)
        self.assertEqual(report.percentile([], 50), 0.0)


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


if __name__ == "__main__":
    unittest.main()
