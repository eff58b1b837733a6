"""A small synchronous client of lookahead.v1.GenerationService.

Errors are the server's: every method raises grpc.RpcError, whose code() and
details() are what verifysvc sent (INVALID_ARGUMENT naming the bad field,
RESOURCE_EXHAUSTED when it is full, UNAVAILABLE when nothing listens).
A Client may be shared by threads (gRPC channels and stubs are thread-safe).
"""

import collections.abc
import dataclasses
from typing import (Callable, Iterable, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import grpc
# grpc imports its channel module (through grpc.experimental) lazily, on
# the first insecure_channel/secure_channel call; that import once failed
# there with a KeyError inside importlib's module lock (Python 3.11,
# tests/openai_test.py's first Client, grpc's own threads running). Import
# it while this module loads instead.
import grpc.experimental  # noqa: F401,E402

try:
    from .proto import draft_pb2, generation_pb2, generation_pb2_grpc
except ImportError as e:  # pragma: no cover - depends on the checkout
    raise ImportError(
        "lookahead_client.proto is missing or stale: run "
        "clients/python/gen_protos.sh (needs python3-grpc-tools)") from e
# Modules generated before DraftParams.lookahead_window became optional would
# drop an explicit 0 (no window) and leave the request on the server's window.
if generation_pb2.DraftParams.DESCRIPTOR.fields_by_name[
        "lookahead_window"].containing_oneof is None:  # pragma: no cover
    raise ImportError(
        "lookahead_client.proto is stale (DraftParams.lookahead_window is not "
        "optional): run clients/python/gen_protos.sh")

# Names accepted for `draft_mode`; None leaves the server's default
# (trie-hierarchical).
DRAFT_MODES = {
    "off": draft_pb2.DRAFT_MODE_OFF,
    "hierarchical": draft_pb2.DRAFT_MODE_TRIE_HIERARCHICAL,
    "parallel": draft_pb2.DRAFT_MODE_TRIE_PARALLEL,
}

# Names accepted in `sources` (DraftParams.sources); empty leaves the
# server's default (--draft_sources). "trie" is the prompt and output tries.
DRAFT_SOURCES = {
    "trie": draft_pb2.DRAFT_SOURCE_PROMPT,
    "prompt": draft_pb2.DRAFT_SOURCE_PROMPT,
    "output": draft_pb2.DRAFT_SOURCE_OUTPUT,
    "ngram": draft_pb2.DRAFT_SOURCE_NGRAM,
    "assistant": draft_pb2.DRAFT_SOURCE_ASSISTANT,
}

# The name Usage.sources reports a source under: the verifier counts the
# prompt and output tries as one source, "trie".
SOURCE_NAMES = {
    draft_pb2.DRAFT_SOURCE_UNSPECIFIED: "unknown",
    draft_pb2.DRAFT_SOURCE_PROMPT: "trie",
    draft_pb2.DRAFT_SOURCE_OUTPUT: "trie",
    draft_pb2.DRAFT_SOURCE_NGRAM: "ngram",
    draft_pb2.DRAFT_SOURCE_ASSISTANT: "assistant",
}


def source_usage(usage) -> "dict[str, Tuple[int, int]]":
    """{source name: (draft tokens verified, of them accepted)} of a Usage.
    A node several sources proposed counts for each of them."""
    out = {}
    for s in usage.sources:
        name = SOURCE_NAMES.get(s.source, f"source {s.source}")
        drafted, accepted = out.get(name, (0, 0))
        out[name] = (drafted + s.draft_tokens,
                     accepted + s.accepted_draft_tokens)
    return out


def format_source_usage(usage) -> str:
    """"trie 40/90, ngram 12/30" (accepted/verified per source), or "none"."""
    per_source = source_usage(usage)
    if not per_source:
        return "none"
    return ", ".join(f"{name} {accepted}/{drafted}"
                     for name, (drafted, accepted) in sorted(per_source.items()))


# A chat turn: {"role": ..., "content": ...} or (role, content).
ChatTurn = Union[Mapping[str, str], Tuple[str, str]]

# The Jacobi lookahead window (W, N, G) of a request (DraftParams
# lookahead_window/_ngram/_guess). W None = the server's window
# (--lookahead_window), W 0 = no window for this request even when the server
# runs one by default, W > 0 = that many positions; N or G 0 = the server's.
Lookahead = Tuple[Optional[int], int, int]

# `lookahead` for a request that must run without a window.
NO_WINDOW: Lookahead = (0, 0, 0)


@dataclasses.dataclass
class Completion:
    """One Generate call's stream, collected."""

    text: str
    token_ids: List[int]
    # Usage from the last message (edl, tokens_per_second, ...).
    usage: "generation_pb2.Usage"
    # Stream messages received, i.e. decoding steps seen by the client.
    messages: int

    @property
    def finish_reason(self) -> str:
        return generation_pb2.FinishReason.Name(self.usage.finish_reason)


class Client:
    """Talks to verifysvc at `target`: "host:port", or "dns:///name:port"
    for every address a name resolves to (a Kubernetes headless Service).

    `api_key`: sent as "authorization: Bearer <key>" on every call (servers
    started with --api_keys_file need it; the key also picks the namespace).
    `tls` (or `ca_file`, a PEM file of the CA that signed the server's
    certificate; default the system's roots): talk TLS; `client_cert_file` and
    `client_key_file` present a client certificate. `load_balancing`: the gRPC
    policy over the target's addresses; None = "round_robin" for dns: and
    ipv4:/ipv6: targets (each call goes to the next replica: gRPC pins one
    HTTP/2 connection per address, so an L4 Service would not spread load),
    else gRPC's default (pick_first).
    """

    def __init__(self, target: str = "127.0.0.1:50051",
                 channel: Optional[grpc.Channel] = None, *,
                 api_key: Optional[str] = None,
                 tls: bool = False,
                 ca_file: Optional[str] = None,
                 client_cert_file: Optional[str] = None,
                 client_key_file: Optional[str] = None,
                 load_balancing: Optional[str] = None):
        if api_key is not None and (not api_key or any(
                c.isspace() for c in api_key)):
            raise ValueError("api_key must be a non-empty string without "
                             "whitespace")
        self._metadata = ((("authorization", f"Bearer {api_key}"),)
                          if api_key is not None else None)
        # Streams carry one message per decoding step; the defaults suit them.
        self._channel = channel or make_channel(
            target, tls=tls, ca_file=ca_file,
            client_cert_file=client_cert_file,
            client_key_file=client_key_file, load_balancing=load_balancing)
        self._owns_channel = channel is None
        self._stub = generation_pb2_grpc.GenerationServiceStub(self._channel)

    def close(self) -> None:
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wait_ready(self, timeout: float) -> None:
        """Blocks until the channel connects; grpc.FutureTimeoutError after
        `timeout` seconds (nothing listening at the target)."""
        grpc.channel_ready_future(self._channel).result(timeout=timeout)

    def generate(self, prompt: Optional[str] = None, *,
                 chat: Optional[Sequence[ChatTurn]] = None,
                 tokens: Optional[Sequence[int]] = None,
                 max_new_tokens: int = 0,
                 temperature: float = 0.0,
                 top_p: float = 0.0,
                 top_k: int = 0,
                 seed: int = 0,
                 stop: Iterable[str] = (),
                 draft_mode: Optional[str] = None,
                 namespace: str = "",
                 decoding_length: int = 0,
                 sources: Sequence[str] = (),
                 lookahead: Optional[Lookahead] = None,
                 timeout: Optional[float] = None,
                 ) -> Iterator["generation_pb2.GenerateResponse"]:
        """Streams GenerateResponse messages, one per decoding step; the last
        one has `usage` set.

        Exactly one of `prompt` (raw text), `chat` (rendered with the model's
        chat template) or `tokens` (ids used as given). Zeros mean the
        server's defaults; temperature 0 is greedy. `draft_mode` is one of
        DRAFT_MODES' keys or None. `sources` are DRAFT_SOURCES' keys (empty:
        the server's); a source the server does not run fails the call with
        FAILED_PRECONDITION. `lookahead` is the Jacobi window (W, N, G), see
        Lookahead: None leaves all three to the server, W = 0 (NO_WINDOW)
        turns the window off for this call. `timeout` is the whole call's
        deadline in seconds.
        Closing the iterator early cancels the call on the server.
        """
        request = build_request(
            prompt, chat=chat, tokens=tokens, max_new_tokens=max_new_tokens,
            temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
            stop=stop, draft_mode=draft_mode, namespace=namespace,
            decoding_length=decoding_length, sources=sources,
            lookahead=lookahead)
        call = self._stub.Generate(request, timeout=timeout,
                                   metadata=self._metadata)
        try:
            yield from call
        finally:
            # No-op when the stream ended; frees the server's batch slot when
            # the caller stopped reading.
            call.cancel()

    def complete(self, prompt: Optional[str] = None, *,
                 on_text: Optional[Callable[[str], None]] = None,
                 **kwargs) -> Completion:
        """Runs generate(prompt, **kwargs) to the end and collects it.
        `on_text` sees each piece of text as it arrives (for streaming)."""
        pieces: List[str] = []
        token_ids: List[int] = []
        usage = None
        messages = 0
        for message in self.generate(prompt, **kwargs):
            messages += 1
            if message.text:
                pieces.append(message.text)
                if on_text is not None:
                    on_text(message.text)
            token_ids.extend(message.token_ids)
            if message.HasField("usage"):
                usage = message.usage
        if usage is None:
            raise RuntimeError("Generate stream ended without usage: "
                               "the server broke the protocol")
        return Completion("".join(pieces), token_ids, usage, messages)

    def tokenize(self, text: Optional[str] = None, *,
                 chat: Optional[Sequence[ChatTurn]] = None,
                 add_special: bool = False,
                 timeout: Optional[float] = None) -> List[int]:
        """Token ids of `text`, or of `chat` rendered with the template."""
        if (text is None) == (chat is None):
            raise ValueError("tokenize needs exactly one of text, chat")
        request = generation_pb2.TokenizeRequest(add_special=add_special)
        if chat is not None:
            request.chat.CopyFrom(chat_messages(chat))
        else:
            request.text = text
        return list(self._stub.Tokenize(request, timeout=timeout,
                                        metadata=self._metadata).ids)

    def detokenize(self, ids: Sequence[int], *,
                   timeout: Optional[float] = None) -> str:
        request = generation_pb2.DetokenizeRequest(ids=list(ids))
        return self._stub.Detokenize(request, timeout=timeout,
                                     metadata=self._metadata).text

    def model_info(self, *, timeout: Optional[float] = None
                   ) -> "generation_pb2.ModelInfoResponse":
        return self._stub.ModelInfo(generation_pb2.ModelInfoRequest(),
                                    timeout=timeout, metadata=self._metadata)

    def stats(self, *, timeout: Optional[float] = None
              ) -> "generation_pb2.GenerationStatsResponse":
        return self._stub.Stats(generation_pb2.GenerationStatsRequest(),
                                timeout=timeout, metadata=self._metadata)


def _read(path: Optional[str]) -> Optional[bytes]:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def make_channel(target: str, *, tls: bool = False,
                 ca_file: Optional[str] = None,
                 client_cert_file: Optional[str] = None,
                 client_key_file: Optional[str] = None,
                 load_balancing: Optional[str] = None) -> grpc.Channel:
    """The channel Client(target, ...) opens; see Client for the options.
    OSError if a PEM file cannot be read."""
    if (client_cert_file is None) != (client_key_file is None):
        raise ValueError("client_cert_file and client_key_file go together")
    if load_balancing is None and target.startswith(("dns:", "ipv4:",
                                                     "ipv6:")):
        load_balancing = "round_robin"
    options = []
    if load_balancing is not None:
        options.append(("grpc.lb_policy_name", load_balancing))
    if not (tls or ca_file or client_cert_file):
        return grpc.insecure_channel(target, options=options)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(ca_file),
        private_key=_read(client_key_file),
        certificate_chain=_read(client_cert_file))
    return grpc.secure_channel(target, credentials, options=options)


def chat_messages(chat: Sequence[ChatTurn]) -> "generation_pb2.ChatMessages":
    """ChatMessages from dicts {"role", "content"} or (role, content) pairs."""
    messages = generation_pb2.ChatMessages()
    for turn in chat:
        if isinstance(turn, collections.abc.Mapping):
            role, content = turn["role"], turn["content"]
        else:
            role, content = turn
        messages.messages.add(role=role, content=content)
    return messages


def build_request(prompt: Optional[str] = None, *,
                  chat: Optional[Sequence[ChatTurn]] = None,
                  tokens: Optional[Sequence[int]] = None,
                  max_new_tokens: int = 0,
                  temperature: float = 0.0,
                  top_p: float = 0.0,
                  top_k: int = 0,
                  seed: int = 0,
                  stop: Iterable[str] = (),
                  draft_mode: Optional[str] = None,
                  namespace: str = "",
                  decoding_length: int = 0,
                  sources: Sequence[str] = (),
                  lookahead: Optional[Lookahead] = None,
                  ) -> "generation_pb2.GenerateRequest":
    """The GenerateRequest for Client.generate's arguments. The server checks
    the values; this only checks what the message cannot express."""
    if sum(x is not None for x in (prompt, chat, tokens)) != 1:
        raise ValueError("generate needs exactly one of prompt, chat, tokens")
    if draft_mode is not None and draft_mode not in DRAFT_MODES:
        raise ValueError(f"draft_mode {draft_mode!r} is not one of "
                         f"{sorted(DRAFT_MODES)} (or None for the default)")
    for source in sources:
        if source not in DRAFT_SOURCES:
            raise ValueError(f"draft source {source!r} is not one of "
                             f"{sorted(DRAFT_SOURCES)}")
    window, ngram, guess = lookahead if lookahead is not None else (None, 0, 0)
    request = generation_pb2.GenerateRequest(
        max_new_tokens=max_new_tokens,
        sampling=generation_pb2.SamplingParams(
            temperature=temperature, top_p=top_p, top_k=top_k, seed=seed),
        stop=list(stop),
        draft=generation_pb2.DraftParams(
            mode=DRAFT_MODES.get(draft_mode, draft_pb2.DRAFT_MODE_UNSPECIFIED),
            decoding_length=decoding_length,
            namespace=namespace,
            sources=[DRAFT_SOURCES[source] for source in sources],
            lookahead_ngram=ngram,
            lookahead_guess=guess))
    if window is not None:  # sent even when 0: 0 turns the window off
        request.draft.lookahead_window = window
    if chat is not None:
        request.chat.CopyFrom(chat_messages(chat))
    elif tokens is not None:
        request.tokens.ids.extend(tokens)
    else:
        request.text = prompt
    return request
