#!/usr/bin/python3
"""Retrieval-augmented generation with lookahead: BM25 over a folder of text
files picks a passage, the model answers from it, the answer streams.

    clients/python/gen_protos.sh            # once
    clients/python/examples/rag.py --question="What is a Derivative Work?"
    clients/python/examples/rag.py --stats  # also time it with drafts off

Answers quote their passage, which is what the draft trie's prompt branches
predict well, so RAG is where lookahead's drafts pay off. With --stats the
same request first runs with drafts off (it pays for the prompt, which
verifysvc's prefix cache then keeps), then streams with drafts on; the two
must produce the same token ids (lossless), else the exit status is 1.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lookahead_client import bm25, passages  # noqa: E402

INSTRUCTION = ("Read the passage and answer the question with the exact words "
               "of the passage.")


def add_retrieval_args(parser):
    """The arguments rag.py and rag_openai.py share: the documents, the
    question, the passage size and the draft sources."""
    parser.add_argument("--docs", default="/usr/share/common-licenses",
                        help="folder of text files to index (default %(default)s)")
    parser.add_argument("--question",
                        default="What does the Apache License say about patent grants?")
    parser.add_argument("--passage_words", type=int, default=250,
                        help="most words per passage (default %(default)s)")
    parser.add_argument("--sources", default="",
                        help="draft sources, comma-separated: trie, ngram, "
                             "assistant (default: the server's)")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="127.0.0.1:50051",
                        help="verifysvc host:port (default %(default)s)")
    add_retrieval_args(parser)
    parser.add_argument("--max_new_tokens", type=int, default=160)
    parser.add_argument("--namespace", default="",
                        help="draftsvc namespace (default: the server's)")
    parser.add_argument("--stats", action="store_true",
                        help="rerun with drafts off; check identical tokens; "
                             "print EDL, tokens/s and speedup")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="deadline of each request, seconds")
    return parser.parse_args(argv)


def retrieve(folder, question, passage_words):
    """The best BM25 passage for `question`, with its score, or exit."""
    corpus = passages.load_passages(folder, passage_words)
    if not corpus:
        sys.exit(f"rag: no text passages under {folder}")
    hits = bm25.BM25Index([p.text for p in corpus]).search(question, k=1)
    if not hits:
        sys.exit(f"rag: no passage of {folder} shares a word with the question")
    doc, score = hits[0]
    print(f"[retrieved {corpus[doc].source} passage {corpus[doc].number}, "
          f"{corpus[doc].words} words, BM25 {score:.2f}, of {len(corpus)} passages]",
          file=sys.stderr)
    return corpus[doc]


def user_message(passage, question):
    return f"{INSTRUCTION}\n\nPassage:\n{passage.text}\n\nQuestion: {question}"


def decode_seconds(usage):
    """Time after the first token: the part drafts can speed up."""
    return usage.total_seconds - usage.time_to_first_token_seconds


def print_stats(drafts, plain):
    """Plain decoding ran first, on a cold prompt; the drafted run reused its
    prompt's K/V from verifysvc's prefix cache. The decode-phase speedup is
    the drafts' alone; the end-to-end one also holds the cache's TTFT win."""
    from lookahead_client import format_source_usage
    d, p = drafts.usage, plain.usage
    print(f"\n--- stats ({d.prompt_tokens} prompt tokens, {d.output_tokens} "
          f"output tokens, {drafts.finish_reason}) ---")
    print(f"drafts off: {p.tokens_per_second:.1f} tok/s, "
          f"TTFT {p.time_to_first_token_seconds:.3f} s (cold prompt), "
          f"total {p.total_seconds:.3f} s")
    print(f"drafts on : EDL {d.edl:.2f} ({d.accepted_draft_tokens}/{d.draft_tokens} "
          f"draft tokens accepted, {d.decoding_steps} steps), "
          f"{d.tokens_per_second:.1f} tok/s, TTFT {d.time_to_first_token_seconds:.3f} s "
          f"({d.cached_prompt_tokens} prompt tokens from the prefix cache), "
          f"total {d.total_seconds:.3f} s")
    print(f"per source: {format_source_usage(d)} accepted/verified draft "
          f"tokens")
    if d.total_seconds > 0 and decode_seconds(d) > 0:
        print(f"speedup   : {decode_seconds(p) / decode_seconds(d):.2f}x decode "
              f"phase (total - TTFT, drafts alone), "
              f"{p.total_seconds / d.total_seconds:.2f}x end to end "
              f"(drafts + prefix cache)")
    if d.cached_prompt_tokens > 0 and d.time_to_first_token_seconds > 0:
        print(f"prefix cache: first token {p.time_to_first_token_seconds / d.time_to_first_token_seconds:.1f}x "
              f"sooner with the prompt's K/V cached")
    print("tokens    : identical with drafts on and off")


def main(argv):
    args = parse_args(argv)
    import grpc  # after argparse, so --help works without grpc
    from lookahead_client import Client

    passage = retrieve(args.docs, args.question, args.passage_words)
    request = dict(chat=[{"role": "user",
                          "content": user_message(passage, args.question)}],
                   max_new_tokens=args.max_new_tokens, namespace=args.namespace,
                   timeout=args.timeout)
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]

    def stream(text):
        sys.stdout.write(text)
        sys.stdout.flush()

    with Client(args.server) as client:
        try:
            if not args.stats:
                client.complete(on_text=stream, sources=sources, **request)
                print()
                return 0
            # Plain first: it pays for the prompt; the drafted run then
            # finds it in the prefix cache.
            plain = client.complete(draft_mode="off", **request)
            drafts = client.complete(on_text=stream, sources=sources,
                                     **request)
            print()
        except grpc.RpcError as e:
            print(f"\nrag: Generate failed: {e.code().name}: {e.details()}",
                  file=sys.stderr)
            return 1
    if drafts.token_ids != plain.token_ids:
        diverged = next((i for i, (a, b) in enumerate(zip(drafts.token_ids,
                                                          plain.token_ids)) if a != b),
                        min(len(drafts.token_ids), len(plain.token_ids)))
        print(f"rag: NOT LOSSLESS: drafts on and off diverge at output token "
              f"{diverged} ({len(drafts.token_ids)} vs {len(plain.token_ids)} "
              f"tokens)", file=sys.stderr)
        return 1
    print_stats(drafts, plain)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
