#!/usr/bin/python3
"""Metrics end to end: a real Prometheus scrapes the real service pair.

Run by tools/metrics_test.sh, which starts draftsvc, verifysvc and
Debian's prometheus (1 s scrapes, the rules of dashboards/rules/) and sets
VERIFYSVC_ADDR and PROMETHEUS_URL. The test runs generations, then asks
Prometheus' HTTP API for every expression the dashboard and the rules use
(dashboards/queries.txt): each must return data. Alert expressions
(dashboards/alert_queries.txt) must evaluate, and every rule must be healthy.
The EDL Prometheus reports must equal the EDL of the Generate responses.
"""

import json
import math
import os
import sys
import time
import unittest
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

VERIFYSVC_ADDR = os.environ.get("VERIFYSVC_ADDR", "")
PROMETHEUS_URL = os.environ.get("PROMETHEUS_URL", "")

PASSAGE = (
    "3. Grant of Patent License. Subject to the terms and conditions of this "
    "License, each Contributor hereby grants to You a perpetual, worldwide, "
    "non-exclusive, no-charge, royalty-free, irrevocable (except as stated in "
    "this section) patent license to make, have made, use, offer to sell, "
    "sell, import, and otherwise transfer the Work, where such license applies "
    "only to those patent claims licensable by such Contributor that are "
    "necessarily infringed by their Contribution(s) alone or by combination "
    "of their Contribution(s) with the Work to which such Contribution(s) was "
    "submitted.")


def read_lines(name):
    with open(os.path.join(ROOT, "dashboards", name)) as f:
        return [line.strip() for line in f if line.strip()]


def prometheus(path, **params):
    url = f"{PROMETHEUS_URL}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise AssertionError(f"{path} {params}: {body}")
    return body["data"]


def query(expr):
    """The instant vector of `expr` as a list of (labels, value)."""
    data = prometheus("/api/v1/query", query=expr)
    if data["resultType"] == "scalar":
        return [({}, float(data["result"][1]))]
    return [(r["metric"], float(r["value"][1])) for r in data["result"]]


def wait_for(condition, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@unittest.skipUnless(VERIFYSVC_ADDR and PROMETHEUS_URL,
                     "run through tools/metrics_test.sh")
class PrometheusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from lookahead_client import Client
        cls.client = Client(VERIFYSVC_ADDR)
        cls.client.wait_ready(timeout=60)
        # Both targets scraped once before any request, so every counter's
        # series starts at 0 inside the rate windows.
        wait_for(lambda: sorted(v for _, v in query("up")) == [1.0, 1.0],
                 "both targets up")
        chat = [{"role": "user",
                 "content": f"Read the passage and answer the question.\n\n"
                            f"Passage:\n{PASSAGE}\n\nQuestion: What does each "
                            f"Contributor grant to You? Answer with the exact "
                            f"words of the passage."}]
        cls.usages = []
        for kwargs in (dict(chat=chat, max_new_tokens=48),
                       dict(chat=chat, max_new_tokens=48, draft_mode="off"),
                       dict(prompt="The GNU General Public License is",
                            max_new_tokens=24, temperature=0.8, top_p=0.95,
                            seed=3),
                       dict(chat=chat, max_new_tokens=32),
                       # A Jacobi window (W=4, N=3, G=4): its cost gate
                       # decides every step, for the cost-gate panels.
                       dict(prompt="The GNU General Public License is",
                            max_new_tokens=24, lookahead=(4, 3, 4))):
            cls.usages.append(cls.client.complete(**kwargs).usage)
        cls.output = sum(u.output_tokens for u in cls.usages)
        cls.steps = sum(u.decoding_steps for u in cls.usages)
        # The last scrape holds every request, and the rules ran on it.
        wait_for(lambda: [v for _, v in
                          query("sum(lookahead_generation_tokens_total)")]
                 == [float(cls.output)], "a scrape after the last request")
        time.sleep(3)

    def test_edl_matches_the_responses(self):
        expected = self.output / self.steps
        raw = query("sum(lookahead_generation_tokens_total) / "
                    "sum(lookahead_decoding_steps_total)")
        self.assertEqual(len(raw), 1)
        self.assertAlmostEqual(raw[0][1], expected, places=9)
        rule = query("lookahead:edl:rate5m")
        self.assertEqual(len(rule), 1, rule)
        print(f"EDL: responses {expected:.4f}, counters {raw[0][1]:.4f}, "
              f"recording rule {rule[0][1]:.4f}", file=sys.stderr)
        # rate() extrapolates both counters over the same window by slightly
        # different amounts near their start; agree to rounding.
        self.assertAlmostEqual(rule[0][1], expected, delta=0.01 * expected)
        self.assertGreater(expected, 1.0)  # Drafts were used.

    def test_prefix_cache_hits_match_the_responses(self):
        # The same chat prompt ran three times: the later runs restore its
        # whole blocks from the prefix cache.
        cached = sum(u.cached_prompt_tokens for u in self.usages)
        self.assertGreater(cached, 0)
        hits = query("sum(lookahead_prefix_cache_hit_tokens_total)")
        self.assertEqual([v for _, v in hits], [float(cached)])
        lookups = query("sum(lookahead_prefix_cache_lookup_tokens_total)")
        self.assertGreaterEqual(lookups[0][1], float(cached))

    def test_every_dashboard_and_rule_query_returns_data(self):
        empty = []
        for expr in read_lines("queries.txt"):
            values = [v for _, v in query(expr)]
            if not any(math.isfinite(v) for v in values):
                empty.append(expr)
        self.assertEqual(empty, [], "queries without data")

    def test_alert_expressions_evaluate_and_rules_are_healthy(self):
        for expr in read_lines("alert_queries.txt"):
            query(expr)  # Raises unless Prometheus evaluates it.
        groups = prometheus("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        self.assertTrue(rules, "no rules loaded")
        unhealthy = [(r["name"], r.get("lastError")) for r in rules
                     if r["health"] != "ok"]
        self.assertEqual(unhealthy, [])
        firing = [r["name"] for r in rules
                  if r["type"] == "alerting" and r["state"] == "firing"]
        self.assertEqual(firing, [], "alerts firing on a healthy pair")

    def test_draftsvc_series_are_scraped(self):
        nodes = query('lookahead_trie_nodes{trie_namespace="default"}')
        self.assertEqual(len(nodes), 1)
        self.assertGreater(nodes[0][1], 0)
        inserted = query("lookahead_trie_inserted_tokens_total")
        self.assertGreater(inserted[0][1], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
