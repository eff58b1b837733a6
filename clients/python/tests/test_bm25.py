"""Unit tests of lookahead_client.bm25: hand-computed scores, ranking
properties, and random corpora against a brute-force oracle."""

import math
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lookahead_client import bm25  # noqa: E402


def oracle_score(docs, query, k1=1.5, b=0.75):
    """BM25 straight from the formula, one document at a time: no postings,
    no sharing with the implementation beyond tokenize()."""
    tokenized = [bm25.tokenize(d) for d in docs]
    n = len(tokenized)
    avgdl = sum(len(t) for t in tokenized) / n if any(tokenized) else 1.0
    scores = []
    for terms in tokenized:
        score = 0.0
        for q in bm25.tokenize(query):
            tf = terms.count(q)
            if tf == 0:
                continue
            df = sum(1 for t in tokenized if q in t)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(terms) / avgdl))
        scores.append(score)
    return scores


class TokenizeTest(unittest.TestCase):
    def test_lowercases_splits_on_punctuation_and_drops_stopwords(self):
        self.assertEqual(bm25.tokenize("What is GPL-3.0's Section 7?"),
                         ["gpl", "3", "0", "s", "section", "7"])

    def test_plurals_are_stemmed(self):
        self.assertEqual(bm25.tokenize("Derivative Works, licenses, copies, "
                                       "status, access, bus, oes"),
                         ["derivative", "work", "license", "copy", "status",
                          "access", "bus", "oes"])
        self.assertEqual(bm25.stem("agrees"), "agree")
        self.assertEqual(bm25.stem("series"), "sery")  # Harman's rule, as is

    def test_empty(self):
        self.assertEqual(bm25.tokenize(""), [])
        self.assertEqual(bm25.tokenize("the of and ... !!"), [])


class BM25Test(unittest.TestCase):
    def test_hand_computed_score(self):
        # N = 3, avgdl = (2 + 3 + 1) / 3 = 2; "gamma" is in doc 1 only, twice.
        # idf = ln(1 + 2.5 / 1.5) = 0.980829
        # tf part = 2 * 2.5 / (2 + 1.5 * (0.25 + 0.75 * 3 / 2)) = 1.230769
        index = bm25.BM25Index(["alpha beta", "beta gamma gamma", "delta"])
        self.assertAlmostEqual(index.idf("gamma"), 0.980829, places=5)
        scores = index.scores("gamma")
        self.assertAlmostEqual(scores[1], 1.207174, places=5)
        self.assertEqual(scores[0], 0.0)
        self.assertEqual(scores[2], 0.0)
        self.assertEqual(index.search("gamma", k=5), [(1, scores[1])])

    def test_rare_term_outweighs_common_term(self):
        docs = ["license copyright patent", "license copyright", "license",
                "license copyright warranty"]
        index = bm25.BM25Index(docs)
        self.assertGreater(index.idf("patent"), index.idf("copyright"))
        self.assertGreater(index.idf("copyright"), index.idf("license"))
        self.assertEqual(index.search("license patent")[0][0], 0)

    def test_shorter_document_wins_at_equal_frequency(self):
        index = bm25.BM25Index(["patent " + "filler " * 20, "patent filler"])
        self.assertEqual(index.search("patent", k=2)[0][0], 1)
        flat = bm25.BM25Index(["patent " + "filler " * 20, "patent filler"], b=0.0)
        first, second = flat.scores("patent")
        self.assertAlmostEqual(first, second)

    def test_term_frequency_saturates(self):
        docs = [" ".join(["patent"] * tf + ["x"] * (50 - tf)) for tf in (1, 2, 5, 40)]
        docs.append("unrelated words only")
        index = bm25.BM25Index(docs)
        scores = index.scores("patent")[:4]
        self.assertEqual(scores, sorted(scores))
        bound = index.idf("patent") * (index.k1 + 1)
        self.assertTrue(all(s < bound for s in scores), (scores, bound))

    def test_no_hits_and_empty_inputs(self):
        index = bm25.BM25Index(["alpha beta", "gamma"])
        self.assertEqual(index.search("zeta"), [])
        self.assertEqual(index.search(""), [])
        self.assertEqual(len(bm25.BM25Index([])), 0)
        self.assertEqual(bm25.BM25Index([]).search("alpha"), [])
        self.assertEqual(bm25.BM25Index(["", "..."]).search("alpha"), [])

    def test_ties_keep_document_order_and_k_limits(self):
        index = bm25.BM25Index(["patent a1", "other", "patent a1", "patent a1"])
        self.assertEqual([d for d, _ in index.search("patent", k=2)], [0, 2])

    def test_bad_parameters(self):
        with self.assertRaises(ValueError):
            bm25.BM25Index(["a"], k1=0)
        with self.assertRaises(ValueError):
            bm25.BM25Index(["a"], b=1.5)

    def test_random_corpora_match_oracle(self):
        rng = random.Random(20240611)
        vocabulary = [f"w{i}" for i in range(30)]
        for trial in range(200):
            k1 = rng.choice([0.5, 1.2, 1.5, 2.0])
            b = rng.choice([0.0, 0.5, 0.75, 1.0])
            docs = [" ".join(rng.choice(vocabulary)
                             for _ in range(rng.randint(0, 25)))
                    for _ in range(rng.randint(1, 12))]
            query = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 4)))
            index = bm25.BM25Index(docs, k1=k1, b=b)
            want = oracle_score(docs, query, k1, b)
            got = index.scores(query)
            for doc, (g, w) in enumerate(zip(got, want)):
                self.assertAlmostEqual(g, w, places=9,
                                       msg=f"trial {trial} doc {doc}: {docs!r} {query!r}")
            ranked = index.search(query, k=len(docs))
            expected = sorted(((d, s) for d, s in enumerate(want) if s > 0),
                              key=lambda p: (-p[1], p[0]))
            self.assertEqual([d for d, _ in ranked], [d for d, _ in expected],
                             f"trial {trial}")


if __name__ == "__main__":
    unittest.main()
