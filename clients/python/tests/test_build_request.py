#!/usr/bin/python3
"""build_request's DraftParams lookahead fields: what reaches the wire for
each `lookahead` a caller can pass. No server.

Skipped when grpc or the generated modules are missing.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    from lookahead_client import client as client_module
    from lookahead_client.proto import generation_pb2
except ImportError:  # pragma: no cover - depends on the machine
    client_module = None


def on_the_wire(**kwargs):
    """The DraftParams a server parses from build_request's bytes."""
    request = client_module.build_request("hi", **kwargs)
    return generation_pb2.GenerateRequest.FromString(
        request.SerializeToString()).draft


@unittest.skipIf(client_module is None,
                 "grpc or the generated modules are missing "
                 "(clients/python/gen_protos.sh)")
class BuildRequestLookaheadTest(unittest.TestCase):
    def test_no_lookahead_leaves_the_window_to_the_server(self):
        draft = on_the_wire()
        self.assertFalse(draft.HasField("lookahead_window"))
        self.assertEqual(draft.lookahead_ngram, 0)
        self.assertEqual(draft.lookahead_guess, 0)

    def test_window_zero_is_sent_and_means_off(self):
        draft = on_the_wire(lookahead=client_module.NO_WINDOW)
        self.assertTrue(draft.HasField("lookahead_window"))
        self.assertEqual(draft.lookahead_window, 0)
        self.assertEqual(draft.lookahead_ngram, 0)
        self.assertEqual(draft.lookahead_guess, 0)

    def test_window_none_keeps_the_server_window_with_n_and_g(self):
        draft = on_the_wire(lookahead=(None, 3, 2))
        self.assertFalse(draft.HasField("lookahead_window"))
        self.assertEqual(draft.lookahead_ngram, 3)
        self.assertEqual(draft.lookahead_guess, 2)

    def test_a_window_is_sent_as_given(self):
        draft = on_the_wire(lookahead=(5, 3, 5))
        self.assertTrue(draft.HasField("lookahead_window"))
        self.assertEqual((draft.lookahead_window, draft.lookahead_ngram,
                          draft.lookahead_guess), (5, 3, 5))


if __name__ == "__main__":
    unittest.main(verbosity=2)
