#!/usr/bin/env python3
"""rag.py through verifysvc's OpenAI-compatible HTTP front, with the
official `openai` package: BM25 picks a passage, the answer streams over
server-sent events, and with --stats the same request runs with drafts off
first (the `lookahead` extension object, {"mode": "off"}); the two answers
must be identical, else the exit status is 1. EDL comes from the response's
usage.lookahead; times are the client's (wall clock around the stream).

    .venv/bin/python clients/python/examples/rag_openai.py \\
        --base_url=http://127.0.0.1:8000/v1 --stats
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rag  # noqa: E402  (retrieve, user_message)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base_url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api_key", default=os.environ.get(
        "LOOKAHEAD_API_KEY", "none"),
        help="the key, if verifysvc has --api_keys_file "
             "(default: $LOOKAHEAD_API_KEY)")
    rag.add_retrieval_args(parser)
    parser.add_argument("--max_tokens", type=int, default=160)
    parser.add_argument("--stats", action="store_true",
                        help="rerun with drafts off; check identical text; "
                             "print EDL and speedup")
    return parser.parse_args(argv)


class Timed:
    """One streamed answer: its text, usage and client-side times."""

    def __init__(self, client, model, messages, max_tokens, lookahead,
                 on_text=None):
        start = time.perf_counter()
        first = None
        parts, self.usage = [], None
        stream = client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens,
            temperature=0, stream=True, stream_options={"include_usage": True},
            extra_body={"lookahead": lookahead} if lookahead else None)
        for chunk in stream:
            if chunk.usage is not None:
                self.usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                if first is None:
                    first = time.perf_counter()
                parts.append(chunk.choices[0].delta.content)
                if on_text:
                    on_text(chunk.choices[0].delta.content)
        end = time.perf_counter()
        self.text = "".join(parts)
        self.total = end - start
        self.decode = end - (first if first is not None else end)

    def extension(self):
        """usage.lookahead (EDL, draft tokens, per source) as a dict."""
        extra = getattr(self.usage, "model_extra", None) or {}
        return extra.get("lookahead") or {}


def main(argv):
    args = parse_args(argv)
    import openai

    passage = rag.retrieve(args.docs, args.question, args.passage_words)
    messages = [{"role": "user",
                 "content": rag.user_message(passage, args.question)}]
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    drafts_policy = {"sources": sources} if sources else None

    def stream(text):
        sys.stdout.write(text)
        sys.stdout.flush()

    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key)
    try:
        model = client.models.list().data[0].id
        if not args.stats:
            Timed(client, model, messages, args.max_tokens, drafts_policy,
                  on_text=stream)
            print()
            return 0
        plain = Timed(client, model, messages, args.max_tokens, {"mode": "off"})
        drafts = Timed(client, model, messages, args.max_tokens, drafts_policy,
                       on_text=stream)
        print()
    except openai.APIError as e:
        print(f"\nrag_openai: request failed: {e}", file=sys.stderr)
        return 1
    if drafts.text != plain.text:
        print("rag_openai: NOT LOSSLESS: drafts on and off answered "
              "differently", file=sys.stderr)
        return 1
    ext = drafts.extension()
    print(f"\n--- stats over HTTP ({drafts.usage.prompt_tokens} prompt tokens, "
          f"{drafts.usage.completion_tokens} completion tokens) ---")
    print(f"drafts on : EDL {ext.get('edl', 0):.2f} "
          f"({ext.get('accepted_draft_tokens', 0)}/{ext.get('draft_tokens', 0)} "
          f"draft tokens accepted, {ext.get('decoding_steps', 0)} steps)")
    if drafts.decode > 0 and drafts.total > 0:
        print(f"speedup   : {plain.decode / drafts.decode:.2f}x decode phase "
              f"(after the first token), {plain.total / drafts.total:.2f}x end "
              f"to end (client wall clock)")
    print("text      : identical with drafts on and off")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
