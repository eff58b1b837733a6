"""Python client of lookahead's GenerationService (verifysvc).

    from lookahead_client import Client
    with Client("127.0.0.1:50051") as client:
        for message in client.generate("Once upon a time", max_new_tokens=32):
            print(message.text, end="", flush=True)

The gRPC modules are generated, not committed: run clients/python/gen_protos.sh
first. The retrieval helpers (bm25, passages) are pure Python and import
without grpc.
"""

__all__ = ["Client", "Completion", "DRAFT_MODES", "DRAFT_SOURCES",
           "NO_WINDOW", "source_usage", "format_source_usage"]


def __getattr__(name):
    # Loaded on first use so that `lookahead_client.bm25` and friends work on
    # an interpreter without grpc or before the protos are generated.
    if name in __all__:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
