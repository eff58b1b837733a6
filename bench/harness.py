"""What every part of the suite shares: the service processes, a connection
that can set every DraftParams field, one measured Generate call and the
record it becomes.

grpc and the generated protos are imported only by the functions that talk
to a server, so the pure parts load (and bench_test.py runs) without them.
"""

import os
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
sys.path.insert(0, os.path.join(REPO_ROOT, "clients", "python"))
# The models the tools know by name, and where each is in the model cache.
MODELS_SH = os.path.join(REPO_ROOT, "tools", "models.sh")

# Client.generate's draft_mode per benchmark mode.
MODES = {"plain": "off", "trie-hierarchical": "hierarchical",
         "trie-parallel": "parallel"}

# The Jacobi window (W, N, G) of the source ablation's jacobi and mixed modes.
JACOBI_WINDOW = (5, 3, 5)
# No window, whatever the server's --lookahead_window: W = 0 is sent and
# turns the window off (lookahead_client.NO_WINDOW, here without grpc).
NO_WINDOW = (0, 0, 0)

# The draft-source ablation (run.py --source_modes): Client.generate's
# draft arguments per mode, each a DraftParams.sources choice and a Jacobi
# window. Every mode but "jacobi" and "mixed" asks for no window itself, so
# the ablation holds whatever verifysvc's default: "ngram" is the n-gram
# pool fed by recycled predictions only, and "jacobi" the same pool with the
# window on. A source the draft service does not run fails its requests
# with FAILED_PRECONDITION, which the ablation reports per mode.
SOURCE_MODES = {
    "plain": {"draft_mode": "off", "lookahead": NO_WINDOW},
    "trie": {"draft_mode": "hierarchical", "sources": ("trie",),
             "lookahead": NO_WINDOW},
    "ngram": {"draft_mode": "hierarchical", "sources": ("ngram",),
              "lookahead": NO_WINDOW},
    "jacobi": {"draft_mode": "hierarchical", "sources": ("ngram",),
               "lookahead": JACOBI_WINDOW},
    "assistant": {"draft_mode": "hierarchical", "sources": ("assistant",),
                  "lookahead": NO_WINDOW},
    # The tries and the recycled n-grams: draftsvc's default sources, the
    # mix that costs no model work beyond the verify pass.
    "default": {"draft_mode": "hierarchical", "sources": ("trie", "ngram"),
                "lookahead": NO_WINDOW},
    # The server's default sources: with verifysvc --draftsvc= (no draft
    # service), only the sequence's own text and recycled predictions.
    "local": {"draft_mode": "hierarchical", "lookahead": NO_WINDOW},
    # Every source but the Jacobi window: the text sources with the
    # assistant among them.
    "assisted": {"draft_mode": "hierarchical",
                 "sources": ("trie", "ngram", "assistant"),
                 "lookahead": NO_WINDOW},
    "mixed": {"draft_mode": "hierarchical",
              "sources": ("trie", "ngram", "assistant"),
              "lookahead": JACOBI_WINDOW},
}

# Usage.sources' names (lookahead_client.SOURCE_NAMES without grpc): the
# verifier counts the prompt and output tries as one source.
_SOURCE_NAMES = {0: "unknown", 1: "trie", 2: "trie", 3: "ngram",
                 4: "assistant"}


def source_usage(usage):
    """{source name: [draft tokens verified, accepted]} of a Usage."""
    out = {}
    for s in getattr(usage, "sources", ()):  # test fakes may have none
        name = _SOURCE_NAMES.get(s.source, f"source {s.source}")
        counts = out.setdefault(name, [0, 0])
        counts[0] += s.draft_tokens
        counts[1] += s.accepted_draft_tokens
    return out


def model_path(model, models_sh=MODELS_SH):
    """The GGUF file `model` names: a path (it holds a "/" or ends in
    ".gguf"), or a name of tools/models.sh (smollm2-135m,
    qwen2.5-coder-1.5b, ...), resolved by that file's own model_path so
    that names, file names and the cache folder ($LOOKAHEAD_MODEL_DIR) live
    there alone. ValueError with the reason iff the name is unknown or the
    file is missing (its message says how to fetch it)."""
    if "/" in model or model.endswith(".gguf"):
        if not os.path.isfile(model):
            raise ValueError(f"{model}: no such file")
        return os.path.abspath(model)
    result = subprocess.run(
        ["bash", "-c", 'source "$1" && model_path "$2"', "bash", models_sh,
         model], capture_output=True, text=True)
    if result.returncode != 0 or not result.stdout.strip():
        raise ValueError(result.stderr.strip()
                         or f"{models_sh} gave no path for {model!r}")
    return result.stdout.strip()


class Service:
    """One server process on loopback, with its log in `work`."""

    def __init__(self, name, argv, work):
        self.name = name
        self.base_argv = argv
        self.work = work
        self.log_path = os.path.join(work, f"{name}.log")
        self.port_file = os.path.join(work, f"{name}.port")
        self.metrics_port_file = os.path.join(work, f"{name}.metrics_port")
        argv = argv + ["--host=127.0.0.1", "--port=0",
                       f"--port_file={self.port_file}", "--metrics_port=0",
                       f"--metrics_port_file={self.metrics_port_file}"]
        if name.startswith("verifysvc"):  # its HTTP front: a free port
            argv = argv + ["--http_port=0"]
        with open(self.log_path, "w") as log:
            # Own session: a Ctrl-C reaches only us, and we stop the servers
            # in order (verifysvc drains before draftsvc goes).
            self.process = subprocess.Popen(argv, stdout=log, stderr=log,
                                            start_new_session=True)

    def wait_address(self, timeout=300.0):
        return f"127.0.0.1:{self._wait_port(self.port_file, timeout)}"

    def _wait_port(self, port_file, timeout):
        """The port the process wrote to `port_file`, once it has."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(port_file) and os.path.getsize(port_file):
                with open(port_file) as f:
                    return f.read().strip()
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start (exit "
                           f"{self.process.poll()}):\n{self.log()}")

    def sibling(self, name):
        """Another process of the same command line (binary, peers, flags),
        with ports and a log of its own."""
        return Service(name, self.base_argv, self.work)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def metrics(self, timeout=10.0):
        """Its Prometheus exposition text, scraped now."""
        import urllib.request
        port = self._wait_port(self.metrics_port_file, 60.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                    timeout=timeout) as response:
            return response.read().decode()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_services(stack, bin_dir, draftsvc_flags=(), verifysvc_flags=(),
                   draftsvc_cpus=None, verifysvc_cpus=None):
    """Starts draftsvc (a fresh RocksDB in a temp folder) and verifysvc with
    the given extra flags, each pinned to its CPU list (taskset -c) when
    given; stops both when `stack` closes. Returns verifysvc's address and
    its Service (for the log)."""
    work = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench."))
    binary = lambda name: os.path.join(bin_dir, name, name)  # noqa: E731
    for name in ("draftsvc", "verifysvc"):
        if not os.access(binary(name), os.X_OK):
            raise RuntimeError(f"{binary(name)} is missing: bazel build "
                               f"//draftsvc:draftsvc //verifysvc:verifysvc")
    pin = lambda cpus: ["taskset", "-c", cpus] if cpus else []  # noqa: E731
    draftsvc = Service("draftsvc", [*pin(draftsvc_cpus), binary("draftsvc"),
                                    f"--db_path={work}/db", *draftsvc_flags],
                       work)
    stack.callback(draftsvc.stop)
    draftsvc_address = draftsvc.wait_address()
    verifysvc = Service("verifysvc", [*pin(verifysvc_cpus), binary("verifysvc"),
                                      f"--draftsvc={draftsvc_address}",
                                      *verifysvc_flags], work)
    stack.callback(verifysvc.stop)  # Runs before draftsvc.stop.
    return verifysvc.wait_address(), verifysvc


class Connection:
    """A channel to one verifysvc: the Python client for the unary calls,
    and a raw stub for Generate, because Client.generate has no
    branch_length argument (DraftParams.branch_length). Thread-safe, like
    gRPC channels and stubs."""

    def __init__(self, address):
        import grpc
        from lookahead_client import Client
        from lookahead_client.proto import generation_pb2_grpc
        self.channel = grpc.insecure_channel(address)
        self.client = Client(channel=self.channel)
        self.stub = generation_pb2_grpc.GenerationServiceStub(self.channel)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def generate(self, request_kwargs, *, branch_length=0, timeout=None,
                 **kwargs):
        """Client.generate's stream, plus DraftParams.branch_length."""
        from lookahead_client.client import build_request
        request = build_request(**request_kwargs, **kwargs)
        request.draft.branch_length = branch_length
        call = self.stub.Generate(request, timeout=timeout)
        try:
            yield from call
        finally:
            call.cancel()


def token_latencies(arrivals):
    """Per-token latencies (ms) from stream arrivals [(seconds, tokens)]:
    the gap between two messages, shared evenly by the later one's tokens.
    The first message (time to first token) is left out."""
    latencies = []
    for (before, _), (after, tokens) in zip(arrivals, arrivals[1:]):
        latencies += [round((after - before) / tokens * 1e3, 4)] * tokens
    return latencies


def measure(connection, prompt, draft_mode, namespace, max_new_tokens,
            timeout, *, decoding_length=0, branch_length=0, sources=(),
            lookahead=None):
    """Runs `prompt` once; its usage, output token ids and per-token
    latencies (token_latencies). `sources` and `lookahead` (W, N, G; None =
    the server's window, W = 0 none) as Client.generate's."""
    arrivals, token_ids, usage = [], [], None
    for message in connection.generate(
            prompt.request, draft_mode=draft_mode, namespace=namespace,
            max_new_tokens=max_new_tokens, decoding_length=decoding_length,
            branch_length=branch_length, sources=sources, lookahead=lookahead,
            timeout=timeout):
        now = time.perf_counter()
        if message.token_ids:
            arrivals.append((now, len(message.token_ids)))
            token_ids.extend(message.token_ids)
        if message.HasField("usage"):
            usage = message.usage
    if usage is None:
        raise RuntimeError("a Generate stream ended without usage")
    return usage, token_ids, token_latencies(arrivals)


def first_difference(a, b):
    """Index of the first token where `a` and `b` differ (the shorter
    length if one is a prefix of the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                min(len(a), len(b)))


def make_record(workload, prompt_id, mode, measured, reference_ids, **extra):
    """The results.json record of one measured call; `identical` compares
    its output with `reference_ids` (plain decoding's at batch 1)."""
    usage, ids, latencies = measured
    identical = ids == reference_ids
    record = {
        "workload": workload, "prompt": prompt_id, "mode": mode,
        "identical": identical,
        "diverged_at": None if identical else first_difference(ids, reference_ids),
        "prompt_tokens": usage.prompt_tokens,
        "output_tokens": usage.output_tokens,
        "decoding_steps": usage.decoding_steps,
        "draft_tokens": usage.draft_tokens,
        "accepted_draft_tokens": usage.accepted_draft_tokens,
        "ttft_seconds": usage.time_to_first_token_seconds,
        "queue_seconds": usage.queue_seconds,
        "total_seconds": usage.total_seconds,
        "finish_reason": usage.finish_reason,
        # {source: [draft tokens verified, accepted]} (Usage.sources).
        "sources": source_usage(usage),
        "token_latencies_ms": latencies}
    record.update(extra)
    return record


def interleave(splits):
    """Round-robin over lists: [[a1, a2], [b1]] -> [a1, b1, a2], so a prefix
    of the result mixes every workload."""
    out = []
    for i in range(max((len(s) for s in splits), default=0)):
        out += [s[i] for s in splits if i < len(s)]
    return out


def parse_int_list(text):
    """"1,4, 8" -> [1, 4, 8]; ValueError naming the bad item."""
    values = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            values.append(int(item))
        except ValueError:
            raise ValueError(f"{item!r} in {text!r} is not an integer") from None
        if values[-1] < 1:
            raise ValueError(f"{item!r} in {text!r} must be >= 1")
    return values
