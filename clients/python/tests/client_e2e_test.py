#!/usr/bin/python3
"""End-to-end test of lookahead_client against a running verifysvc.

    VERIFYSVC_ADDR=127.0.0.1:50051 clients/python/tests/client_e2e_test.py

Skipped (with the reason) when VERIFYSVC_ADDR is unset. Needs the generated
modules (clients/python/gen_protos.sh) and python3-grpcio.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ADDR = os.environ.get("VERIFYSVC_ADDR", "")
# Each call's deadline: generous, the server shares 2 CPU cores with others.
TIMEOUT_S = float(os.environ.get("VERIFYSVC_TIMEOUT_S", "300"))

PROMPT = ("The GNU General Public License is a free, copyleft license for "
          "software and other kinds of works. The GNU General Public License "
          "is")


@unittest.skipUnless(ADDR, "VERIFYSVC_ADDR is unset: set it to a running "
                     "verifysvc's host:port to run the end-to-end client test")
class ClientEndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Imported here so that discovery without a server (or without grpc)
        # reports a skip, not an import error.
        global grpc
        import grpc
        from lookahead_client import Client

        cls.client = Client(ADDR)
        cls.client.wait_ready(timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def test_model_info(self):
        info = self.client.model_info(timeout=TIMEOUT_S)
        self.assertTrue(info.name)
        self.assertGreater(info.vocab_size, 0)
        self.assertGreater(info.context_length, 0)
        self.assertTrue(0 <= info.eos_token_id < info.vocab_size, info)
        self.assertGreater(info.max_new_tokens, 0)
        self.assertGreater(info.max_prompt_tokens, 0)

    def test_tokenize_detokenize_round_trip(self):
        text = "Hello, world! Lossless drafts \u2014 caf\u00e9 \u00fcber 42."
        ids = self.client.tokenize(text, timeout=TIMEOUT_S)
        self.assertGreater(len(ids), 5)
        vocab = self.client.model_info(timeout=TIMEOUT_S).vocab_size
        self.assertTrue(all(0 <= i < vocab for i in ids), ids)
        self.assertEqual(self.client.detokenize(ids, timeout=TIMEOUT_S), text)
        chat_ids = self.client.tokenize(
            chat=[{"role": "user", "content": text}], timeout=TIMEOUT_S)
        self.assertGreater(len(chat_ids), len(ids))
        self.assertIn(text, self.client.detokenize(chat_ids, timeout=TIMEOUT_S))

    def test_streamed_generate_matches_drafts_off(self):
        kwargs = dict(max_new_tokens=48, timeout=TIMEOUT_S)
        streamed_ids, streamed_text, usage, messages = [], [], None, 0
        for message in self.client.generate(PROMPT, **kwargs):
            messages += 1
            streamed_ids.extend(message.token_ids)
            streamed_text.append(message.text)
            self.assertIsNone(usage, "a message arrived after the usage")
            if message.HasField("usage"):
                usage = message.usage
        self.assertIsNotNone(usage, "the stream ended without usage")
        self.assertEqual(usage.output_tokens, len(streamed_ids))
        self.assertGreaterEqual(messages, 1)
        self.assertGreaterEqual(usage.edl, 1.0)

        baseline = self.client.complete(PROMPT, draft_mode="off", **kwargs)
        self.assertEqual(streamed_ids, baseline.token_ids,
                         "drafts changed the output: not lossless")
        self.assertEqual("".join(streamed_text), baseline.text)
        self.assertEqual(baseline.usage.draft_tokens, 0)
        self.assertAlmostEqual(baseline.usage.edl, 1.0)
        # The text is the ids' text (EOS renders as nothing either way).
        self.assertEqual(self.client.detokenize(
            [i for i in baseline.token_ids
             if i != self.client.model_info().eos_token_id]), baseline.text)

    def test_empty_prompt_is_invalid_argument(self):
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.complete("", max_new_tokens=4, timeout=TIMEOUT_S)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("prompt", caught.exception.details().lower())

    def test_bad_sampling_names_the_field(self):
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.complete(PROMPT, max_new_tokens=4, top_p=1.5,
                                 timeout=TIMEOUT_S)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("top_p", caught.exception.details())

    def test_trie_source_usage_is_per_source(self):
        from lookahead_client import source_usage
        # The prompt repeats itself: the prompt trie drafts its second half.
        done = self.client.complete(PROMPT, max_new_tokens=32,
                                    sources=["trie"], timeout=TIMEOUT_S)
        per_source = source_usage(done.usage)
        self.assertLessEqual(set(per_source), {"trie"}, per_source)
        drafted, accepted = per_source.get("trie", (0, 0))
        self.assertEqual(drafted, done.usage.draft_tokens)
        self.assertEqual(accepted, done.usage.accepted_draft_tokens)

    def test_bad_lookahead_window_names_the_field(self):
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.complete(PROMPT, max_new_tokens=4, lookahead=(0, 1, 0),
                                 timeout=TIMEOUT_S)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("draft.lookahead_ngram must be 0 or in [2, ",
                      caught.exception.details())
        self.assertIn("got 1", caught.exception.details())

    def test_window_zero_is_served_and_too_wide_names_the_field(self):
        from lookahead_client.client import NO_WINDOW
        # W = 0 is sent and means no window, whatever --lookahead_window.
        done = self.client.complete(PROMPT, max_new_tokens=4,
                                    lookahead=NO_WINDOW, timeout=TIMEOUT_S)
        self.assertGreaterEqual(len(done.token_ids), 1)
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.complete(PROMPT, max_new_tokens=4,
                                 lookahead=(100000, 0, 0), timeout=TIMEOUT_S)
        self.assertEqual(caught.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("draft.lookahead_window must be in [0, ",
                      caught.exception.details())
        self.assertIn("got 100000", caught.exception.details())

    def test_unknown_source_name_is_a_value_error(self):
        with self.assertRaises(ValueError):
            self.client.complete(PROMPT, sources=["tree"], timeout=TIMEOUT_S)

    def test_stats(self):
        before = self.client.stats(timeout=TIMEOUT_S)
        self.client.complete(PROMPT, max_new_tokens=4, draft_mode="off",
                             timeout=TIMEOUT_S)
        after = self.client.stats(timeout=TIMEOUT_S)
        self.assertGreater(after.requests_finished, before.requests_finished)
        self.assertGreaterEqual(after.output_tokens - before.output_tokens, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
