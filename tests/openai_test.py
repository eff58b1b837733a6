"""verifysvc's OpenAI-compatible HTTP front, end to end, on loopback.

    .venv/bin/python tests/openai_test.py      # tools/openai_test.sh runs it

Starts draftsvc and verifysvc (the built binaries, or $DRAFTSVC_BINARY and
$VERIFYSVC_BINARY) with the real model, and talks to the HTTP front through
the official `openai` package (chat and completions, streaming and not,
include_usage, greedy and seeded outputs identical to the gRPC front through
clients/python's lookahead_client, every error through openai's exception
types), and through raw sockets for what a well-behaved client never does
(bodies over the cap, malformed and invalid UTF-8 bodies, half-open and
stalled connections, disconnects, wrong paths and methods, requests while
the model loads). A second verifysvc with --api_keys_file checks 401, 403 and
429 with Retry-After.
"""

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import httpx  # noqa: E402
import openai  # noqa: E402
from lookahead_client import Client  # noqa: E402

DRAFTSVC = os.environ.get("DRAFTSVC_BINARY",
                          os.path.join(ROOT, ".bazel/bin/draftsvc/draftsvc"))
VERIFYSVC = os.environ.get(
    "VERIFYSVC_BINARY", os.path.join(ROOT, ".bazel/bin/verifysvc/verifysvc"))

# The main verifysvc's HTTP limits: small, so each bound is easy to reach.
MAX_BODY = 256 << 10
READ_TIMEOUT_MS = 1500
STREAM_BUFFER = 16 << 10
SEND_BUFFER = 16 << 10

PROMPT = ("The GNU General Public License is a free, copyleft license for "
          "software and other kinds of works. The GNU General Public License "
          "is")
CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is a copyleft license?"}]
KEY_A = "key-alpha-0123456789"
KEY_SLOW = "key-slow-0123456789"


class Server:
    """One server process on loopback, its log and port files in `work`."""

    def __init__(self, name, argv, work, http=False):
        self.name = name
        self.work = work
        self.port_file = os.path.join(work, f"{name}.port")
        self.http_file = os.path.join(work, f"{name}.http_port")
        self.log_path = os.path.join(work, f"{name}.log")
        argv = argv + ["--host=127.0.0.1", "--port=0",
                       f"--port_file={self.port_file}", "--metrics_port=-1"]
        if http:
            argv += ["--http_port=0", f"--http_port_file={self.http_file}"]
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=log)

    def wait_file(self, path, timeout=300.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(path) and os.path.getsize(path):
                with open(path) as f:
                    return int(f.read().strip())
            if self.process.poll() is not None:
                break
            time.sleep(0.005)
        raise RuntimeError(f"{self.name} did not start:\n{self.log()}")

    def grpc_port(self):
        return self.wait_file(self.port_file)

    def http_port(self):
        return self.wait_file(self.http_file)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def raw_request(port, data, read=True, timeout=30.0):
    """Sends `data` on a fresh connection; returns (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return None
        return parse_response(read_all(s))


def read_all(s):
    chunks = []
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def parse_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and lines[0] else 0
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers, body


def post(path, body, extra_headers=""):
    if isinstance(body, str):
        body = body.encode()
    return (f"POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\n{extra_headers}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class OpenAiFrontTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="openai_test.")
        cls.servers = []
        draftsvc = Server("draftsvc", [DRAFTSVC,
                                       f"--db_path={cls.work}/db"], cls.work)
        cls.servers.append(draftsvc)
        draftsvc_addr = f"127.0.0.1:{draftsvc.grpc_port()}"
        cls.verifysvc = Server("verifysvc", [
            VERIFYSVC, f"--draftsvc={draftsvc_addr}",
            f"--http_max_body_bytes={MAX_BODY}",
            f"--http_read_timeout_ms={READ_TIMEOUT_MS}",
            f"--http_max_stream_buffer_bytes={STREAM_BUFFER}",
            f"--http_send_buffer_bytes={SEND_BUFFER}",
            "--max_stop_strings=16", "--max_queued=400"], cls.work,
            http=True)
        cls.servers.append(cls.verifysvc)
        keys_file = os.path.join(cls.work, "keys")
        with open(keys_file, "w") as f:
            f.write(f"{KEY_A} team-a\n{KEY_SLOW} team-slow 0.2\n")
        cls.keyed = Server("verifysvc_keys", [
            VERIFYSVC, f"--draftsvc={draftsvc_addr}",
            f"--api_keys_file={keys_file}"], cls.work, http=True)
        cls.servers.append(cls.keyed)
        cls.port = cls.verifysvc.http_port()
        cls.grpc = Client(f"127.0.0.1:{cls.verifysvc.grpc_port()}")
        cls.grpc.wait_ready(300)
        cls.base_url = f"http://127.0.0.1:{cls.port}/v1"
        cls.wait_serving(cls.port)
        cls.client = openai.OpenAI(base_url=cls.base_url, api_key="unused",
                                   max_retries=0, timeout=300)
        cls.model = cls.client.models.list().data[0].id
        cls.keyed_port = cls.keyed.http_port()
        cls.wait_serving(cls.keyed_port)

    @classmethod
    def tearDownClass(cls):
        cls.grpc.close()
        for server in reversed(cls.servers):
            server.stop()

    @staticmethod
    def wait_serving(port, timeout=300.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code \
                        == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError("verifysvc's HTTP front never became healthy")

    def cancelled(self):
        return self.grpc.stats().requests_cancelled

    # --- the openai package: outputs -------------------------------------

    def test_models_and_health(self):
        models = self.client.models.list()
        self.assertEqual(len(models.data), 1)
        self.assertTrue(models.data[0].id)
        health = httpx.get(f"http://127.0.0.1:{self.port}/health")
        self.assertEqual(health.status_code, 200)
        self.assertEqual(health.json(), {"status": "serving"})

    def test_chat_greedy_matches_grpc(self):
        reply = self.client.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=24, temperature=0)
        expected = self.grpc.complete(
            chat=[(m["role"], m["content"]) for m in CHAT],
            max_new_tokens=24, temperature=0)
        self.assertEqual(reply.object, "chat.completion")
        self.assertTrue(reply.id.startswith("chatcmpl-"))
        self.assertEqual(reply.choices[0].message.role, "assistant")
        self.assertEqual(reply.choices[0].message.content, expected.text)
        self.assertEqual(reply.usage.completion_tokens,
                         expected.usage.output_tokens)
        self.assertEqual(reply.usage.prompt_tokens,
                         expected.usage.prompt_tokens)
        self.assertEqual(reply.usage.total_tokens,
                         reply.usage.prompt_tokens +
                         reply.usage.completion_tokens)
        self.assertIn(reply.choices[0].finish_reason, ("stop", "length"))
        lookahead = reply.usage.model_extra["lookahead"]
        self.assertGreaterEqual(lookahead["edl"], 1.0)
        self.assertGreater(lookahead["decoding_steps"], 0)

    def test_chat_stream_with_usage(self):
        plain = self.client.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=32, temperature=0)
        chunks = list(self.client.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=32, temperature=0,
            stream=True, stream_options={"include_usage": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks
                       if c.choices)
        self.assertEqual(text, plain.choices[0].message.content)
        finishes = [c.choices[0].finish_reason for c in chunks
                    if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, [plain.choices[0].finish_reason])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens,
                         plain.usage.completion_tokens)
        self.assertIn("sources", chunks[-1].usage.model_extra["lookahead"])
        # Without include_usage no chunk has usage.
        chunks = list(self.client.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=8, temperature=0,
            stream=True))
        self.assertTrue(all(c.usage is None for c in chunks))

    def test_completions_seeded_matches_grpc(self):
        kwargs = dict(max_tokens=40, temperature=0.8, top_p=0.95, seed=7)
        expected = self.grpc.complete(PROMPT, max_new_tokens=40,
                                      temperature=0.8, top_p=0.95, seed=7)
        reply = self.client.completions.create(model=self.model,
                                               prompt=PROMPT, **kwargs)
        self.assertEqual(reply.object, "text_completion")
        self.assertEqual(reply.choices[0].text, expected.text)
        streamed = "".join(
            c.choices[0].text for c in self.client.completions.create(
                model=self.model, prompt=PROMPT, stream=True, **kwargs)
            if c.choices)
        self.assertEqual(streamed, expected.text)
        # Another seed, another text (the seed is really used).
        other = self.client.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=40, temperature=0.8,
            top_p=0.95, seed=8)
        self.assertNotEqual(other.choices[0].text, expected.text)

    def test_completions_greedy_token_ids_and_stop(self):
        ids = self.grpc.tokenize(PROMPT)
        expected = self.grpc.complete(tokens=list(ids), max_new_tokens=20,
                                      temperature=0)
        reply = self.client.completions.create(
            model=self.model, prompt=list(ids), max_tokens=20, temperature=0)
        self.assertEqual(reply.choices[0].text, expected.text)
        self.assertEqual(reply.choices[0].finish_reason,
                         "length" if expected.finish_reason ==
                         "FINISH_REASON_LENGTH" else "stop")
        # A stop string ends it early, without the stop string.
        word = expected.text.split()[1]
        stopped = self.client.completions.create(
            model=self.model, prompt=list(ids), max_tokens=20, temperature=0,
            stop=[word])
        self.assertEqual(stopped.choices[0].finish_reason, "stop")
        self.assertNotIn(word, stopped.choices[0].text)
        self.assertTrue(expected.text.startswith(stopped.choices[0].text))

    def test_lookahead_extension(self):
        reply = self.client.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=16, temperature=0,
            extra_body={"lookahead": {"mode": "off"}})
        self.assertEqual(reply.usage.model_extra["lookahead"]["draft_tokens"],
                         0)
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model=self.model, messages=CHAT, max_tokens=4,
                extra_body={"lookahead": {"decoding_length": 100000}})
        self.assertEqual(e.exception.body["param"],
                         "lookahead.decoding_length")
        # An explicit window of 0 is no window for this request; null is the
        # server's default; past --max_lookahead_window names the field.
        for window in (0, None):
            reply = self.client.chat.completions.create(
                model=self.model, messages=CHAT, max_tokens=4, temperature=0,
                extra_body={"lookahead": {"lookahead_window": window}})
            self.assertGreaterEqual(reply.usage.completion_tokens, 1)
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model=self.model, messages=CHAT, max_tokens=4,
                extra_body={"lookahead": {"lookahead_window": 100000}})
        self.assertEqual(e.exception.body["param"],
                         "lookahead.lookahead_window")

    # --- logprobs and cached tokens --------------------------------------

    SAMPLINGS = (("greedy", dict(temperature=0)),
                 ("seeded", dict(temperature=0.8, top_p=0.95, seed=11)))

    def check_chat_entry(self, entry, greedy, top):
        self.assertIsInstance(entry.token, str)
        self.assertLessEqual(entry.logprob, 0.0)
        self.assertIsInstance(entry.bytes, list)
        self.assertGreaterEqual(len(entry.top_logprobs), 1)
        self.assertLessEqual(len(entry.top_logprobs), top)
        values = [t.logprob for t in entry.top_logprobs]
        self.assertEqual(values, sorted(values, reverse=True))
        self.assertTrue(all(v <= 0.0 for v in values))
        if greedy:
            # Greedy picks the most likely token: it ranks first.
            self.assertEqual(len(entry.top_logprobs), top)
            self.assertEqual(entry.top_logprobs[0].token, entry.token)
            self.assertEqual(entry.top_logprobs[0].bytes, entry.bytes)
            self.assertEqual(entry.top_logprobs[0].logprob, entry.logprob)

    def test_chat_logprobs_stream_and_not(self):
        for name, sampling in self.SAMPLINGS:
            with self.subTest(name):
                args = dict(model=self.model, messages=CHAT, max_tokens=24,
                            logprobs=True, top_logprobs=3, **sampling)
                reply = self.client.chat.completions.create(**args)
                content = reply.choices[0].logprobs.content
                # One entry per token, EOS included.
                self.assertEqual(len(content), reply.usage.completion_tokens)
                for entry in content:
                    self.check_chat_entry(entry, name == "greedy", 3)
                text = b"".join(bytes(e.bytes) for e in content).decode(
                    "utf-8", "replace")
                self.assertTrue(
                    text.startswith(reply.choices[0].message.content), text)
                chunks = list(self.client.chat.completions.create(
                    stream=True, **args))
                streamed = [e for c in chunks if c.choices and
                            c.choices[0].logprobs
                            for e in c.choices[0].logprobs.content]
                # Streamed and whole: the same tokens, the same values.
                self.assertEqual(
                    [(e.token, e.logprob, e.bytes,
                      [(t.token, t.logprob) for t in e.top_logprobs])
                     for e in streamed],
                    [(e.token, e.logprob, e.bytes,
                      [(t.token, t.logprob) for t in e.top_logprobs])
                     for e in content])
                # logprobs: true alone gives each token's own only.
                alone = self.client.chat.completions.create(
                    model=self.model, messages=CHAT, max_tokens=4,
                    logprobs=True, **sampling)
                self.assertEqual(
                    [(e.token, e.logprob)
                     for e in alone.choices[0].logprobs.content],
                    [(e.token, e.logprob) for e in content[:4]])
                self.assertTrue(all(e.top_logprobs == [] for e in
                                    alone.choices[0].logprobs.content))
        # Without logprobs asked: null.
        plain = self.client.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=2, temperature=0)
        self.assertIsNone(plain.choices[0].logprobs)

    def test_completions_logprobs_stream_and_not(self):
        for name, sampling in self.SAMPLINGS:
            with self.subTest(name):
                args = dict(model=self.model, prompt=PROMPT, max_tokens=24,
                            logprobs=5, **sampling)
                reply = self.client.completions.create(**args)
                lp = reply.choices[0].logprobs
                n = reply.usage.completion_tokens
                for field in (lp.tokens, lp.token_logprobs, lp.top_logprobs,
                              lp.text_offset):
                    self.assertEqual(len(field), n)
                self.assertTrue(all(v <= 0.0 for v in lp.token_logprobs))
                self.assertEqual(lp.text_offset[0], 0)
                self.assertEqual(lp.text_offset, sorted(lp.text_offset))
                self.assertLessEqual(lp.text_offset[-1],
                                     len(reply.choices[0].text))
                for token, value, top in zip(lp.tokens, lp.token_logprobs,
                                             lp.top_logprobs):
                    self.assertLessEqual(len(top), 5)
                    self.assertTrue(all(v <= 0.0 for v in top.values()))
                    if name == "greedy":
                        # The chosen token is the most likely one.
                        best = max(top.values())
                        self.assertEqual(value, best)
                        self.assertEqual(top.get(token), value)
                chunks = list(self.client.completions.create(stream=True,
                                                             **args))
                joined = {"tokens": [], "token_logprobs": [],
                          "top_logprobs": [], "text_offset": []}
                for c in chunks:
                    if c.choices and c.choices[0].logprobs:
                        for key in joined:
                            joined[key] += getattr(c.choices[0].logprobs, key)
                self.assertEqual(joined["tokens"], lp.tokens)
                self.assertEqual(joined["token_logprobs"], lp.token_logprobs)
                self.assertEqual(joined["top_logprobs"], lp.top_logprobs)
                self.assertEqual(joined["text_offset"], lp.text_offset)
        # Legacy logprobs go up to 20 here (OpenAI: 5); past that, 400.
        wide = self.client.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=2, temperature=0,
            logprobs=20)
        self.assertEqual(len(wide.choices[0].logprobs.top_logprobs[0]), 20)
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model=self.model, prompt=PROMPT,
                                           max_tokens=2, logprobs=21)
        self.assertEqual(e.exception.body["param"], "logprobs")
        self.assertIn("logprobs must be in [0, 20]",
                      e.exception.body["message"])

    def test_cached_tokens_in_openai_usage(self):
        # A long prompt seen twice: its whole blocks come from the prefix
        # cache, reported in OpenAI's usage.prompt_tokens_details.
        document = " ".join(f"Clause {i}: the licensee shall keep notice {i}."
                            for i in range(40))
        messages = [{"role": "system", "content": document},
                    {"role": "user", "content": "Summarize clause 3."}]
        for _ in range(2):
            reply = self.client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=2,
                temperature=0)
        cached = reply.usage.prompt_tokens_details.cached_tokens
        self.assertGreater(cached, 0)
        self.assertLessEqual(cached, reply.usage.prompt_tokens)
        self.assertEqual(
            cached, reply.usage.model_extra["lookahead"]["cached_prompt_tokens"])
        chunks = list(self.client.chat.completions.create(
            model=self.model, messages=messages, max_tokens=2, temperature=0,
            stream=True, stream_options={"include_usage": True}))
        self.assertGreater(chunks[-1].usage.prompt_tokens_details.cached_tokens,
                           0)
        text = self.client.completions.create(
            model=self.model, prompt=document, max_tokens=1, temperature=0)
        text = self.client.completions.create(
            model=self.model, prompt=document, max_tokens=1, temperature=0)
        self.assertGreater(text.usage.prompt_tokens_details.cached_tokens, 0)

    # --- the openai package: errors --------------------------------------

    def assertBadRequest(self, param, message, **kwargs):
        args = dict(model=self.model, messages=CHAT, max_tokens=4)
        args.update(kwargs)
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(**args)
        self.assertEqual(e.exception.status_code, 400)
        self.assertEqual(e.exception.body["param"], param)
        self.assertEqual(e.exception.body["type"], "invalid_request_error")
        self.assertIn(message, e.exception.body["message"])

    def test_bad_requests(self):
        self.assertBadRequest("n", "n = 2 is not supported", n=2)
        self.assertBadRequest("top_logprobs",
                              "top_logprobs = 2 needs logprobs: true",
                              top_logprobs=2)
        self.assertBadRequest("top_logprobs",
                              "top_logprobs must be in [0, 20] (alternatives "
                              "per token; unset = no logprobs); got 21",
                              logprobs=True, top_logprobs=21)
        self.assertBadRequest("logprobs", "logprobs must be a boolean",
                              logprobs=3)
        self.assertBadRequest("stop[1]", "stop[1] is empty; remove it",
                              stop=["a", ""])
        self.assertBadRequest("messages[1].content",
                              "messages[1].content is required",
                              messages=[CHAT[0], {"role": "user"}])
        self.assertBadRequest("response_format.type",
                              'response_format.type "json_object" is not '
                              "supported", response_format={
                                  "type": "json_object"})
        self.assertBadRequest("temperature", "temperature must be a number",
                              temperature="hot")
        self.assertBadRequest("stop", "stop has 10000 strings; use at most 16",
                              stop=[f"s{i}" for i in range(10000)])
        self.assertBadRequest("messages[0].role", "messages[0].role is",
                              messages=[{"role": "tool", "content": "x"}])
        self.assertBadRequest("messages", "messages is required",
                              messages=None)
        # Unknown fields are ignored, as OpenAI does.
        reply = self.client.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=2, temperature=0,
            user="someone", extra_body={"not_a_field": [1, {"x": 2}]})
        self.assertEqual(reply.usage.completion_tokens, 2)

    def test_max_tokens_range_has_one_wording(self):
        prompt_tokens = self.client.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=1,
            temperature=0).usage.prompt_tokens
        wording = re.compile(
            r"max_tokens must be in \[1, (\d+)\] \(leave it unset for the "
            r"server's default; --max_context_tokens=(\d+) less the "
            r"prompt's (\d+) tokens\); got (-?\d+)")
        for value in (0, -1, 2**31 - 1, 10**15):
            with self.assertRaises(openai.BadRequestError) as e:
                self.client.chat.completions.create(
                    model=self.model, messages=CHAT, max_tokens=value)
            self.assertEqual(e.exception.body["param"], "max_tokens")
            got = wording.fullmatch(e.exception.body["message"])
            self.assertIsNotNone(got, e.exception.body["message"])
            left, context, prompt, sent = map(int, got.groups())
            self.assertEqual(prompt, prompt_tokens)
            self.assertEqual(left, context - prompt)
            self.assertEqual(sent, value)

    def test_unknown_model_is_not_found(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.chat.completions.create(model="gpt-4", messages=CHAT)
        self.assertEqual(e.exception.body["code"], "model_not_found")
        self.assertIn(self.model, e.exception.body["message"])
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="gpt-4", prompt="x")

    # --- raw HTTP: what clients should not send --------------------------

    def test_malformed_and_invalid_utf8_bodies(self):
        # A body wrong as a whole: param is null, never a word of the
        # message.
        no_length = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                     b"Connection: close\r\n\r\n")
        for path, request, message in [
                ("/v1/completions", post("/v1/completions", b'{"model": '),
                 b"not valid JSON"),
                ("/v1/completions", post(
                    "/v1/completions", b'{"model": "m", "prompt": "a\xff\xfe"}'),
                 b"not valid JSON"),
                ("/v1/completions", post("/v1/completions", b"[1, 2, 3]"),
                 b"must be a JSON object"),
                ("/v1/chat/completions", post("/v1/chat/completions", b"[1]"),
                 b"must be a JSON object"),
                ("/v1/chat/completions", post("/v1/chat/completions", b""),
                 b"not valid JSON"),
                ("/v1/chat/completions", no_length, b"not valid JSON"),
                ("/v1/chat/completions", post(
                    "/v1/chat/completions",
                    b'{"model": "m", "max_tokens": 1e999}'),
                 b"number overflow"),
                ("/v1/completions", post(
                    "/v1/completions", b'{"model": "x", "prompt": ' +
                    b"[" * 200 + b"]" * 200 + b"}"),
                 b"nests deeper than 32")]:
            status, headers, got = raw_request(self.port, request)
            self.assertEqual(status, 400, got)
            self.assertIn(message, got)
            error = json.loads(got)["error"]
            self.assertEqual(error["type"], "invalid_request_error")
            self.assertIsNone(error["param"], (path, got))

    def test_body_over_cap_is_413_before_it_is_read(self):
        # Only the head is sent: the answer must come from Content-Length.
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                f"Content-Length: {MAX_BODY * 40}\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", self.port),
                                      timeout=10) as s:
            s.sendall(head + b"{" * 1000)
            status, headers, body = parse_response(read_all(s))
        self.assertEqual(status, 413)
        self.assertIsNone(json.loads(body)["error"]["param"])
        self.assertIn(str(MAX_BODY).encode(), body)
        self.assertIn(b"--http_max_body_bytes", body)
        self.assertEqual(headers.get("connection"), "close")
        # A chunked body that grows past the cap: 413 too.
        chunk = b"x" * 65536
        data = (b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" +
                (b"10000\r\n" + chunk + b"\r\n") * 5 + b"0\r\n\r\n")
        with socket.create_connection(("127.0.0.1", self.port),
                                      timeout=10) as s:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                pass
            status, _, _ = parse_response(read_all(s))
        self.assertEqual(status, 413)

    def test_paths_and_methods(self):
        status, _, body = raw_request(
            self.port, b"GET /v1/engines HTTP/1.1\r\nHost: t\r\n"
            b"Connection: close\r\n\r\n")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(body)["error"]["type"], "not_found_error")
        self.assertIsNone(json.loads(body)["error"]["param"])
        status, headers, body = raw_request(
            self.port, b"GET /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
            b"Connection: close\r\n\r\n")
        self.assertEqual(status, 405)
        self.assertEqual(headers.get("allow"), "POST")
        self.assertIn(b"use POST", body)
        self.assertIsNone(json.loads(body)["error"]["param"])
        status, headers, _ = raw_request(
            self.port, post("/health", "{}"))
        self.assertEqual(status, 405)
        self.assertEqual(headers.get("allow"), "GET")

    def test_half_open_connections_are_closed(self):
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", self.port),
                                      timeout=30) as idle, \
                socket.create_connection(("127.0.0.1", self.port),
                                         timeout=30) as partial:
            partial.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
                            b"Content-Length: 100\r\n\r\n{\"model\"")
            self.assertEqual(idle.recv(100), b"")
            self.assertEqual(partial.recv(100), b"")
        elapsed = time.monotonic() - start
        self.assertLess(elapsed, 15)
        self.assertGreater(elapsed, READ_TIMEOUT_MS / 1000 * 0.5)
        self.assertEqual(httpx.get(f"{self.base_url}/models").status_code,
                         200)

    def stream_request(self, max_tokens):
        body = json.dumps({
            "model": self.model, "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
            "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "lookahead": {"mode": "off"}})
        return post("/v1/completions", body)

    def test_client_disconnect_cancels_generation(self):
        before = self.cancelled()
        with socket.create_connection(("127.0.0.1", self.port),
                                      timeout=60) as s:
            s.sendall(self.stream_request(1500))
            got = b""
            while got.count(b"data: ") < 3:
                got += s.recv(4096)
            self.assertIn(b"200 OK", got)
        deadline = time.monotonic() + 30
        while self.cancelled() == before and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.cancelled(), before + 1)

    def test_stalled_reader_is_cancelled_and_others_are_served(self):
        before = self.cancelled()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(60)
        s.connect(("127.0.0.1", self.port))
        try:
            s.sendall(self.stream_request(1800))  # and never read
            # Others are served meanwhile.
            reply = self.client.completions.create(
                model=self.model, prompt=PROMPT, max_tokens=8, temperature=0)
            self.assertEqual(reply.usage.completion_tokens, 8)
            deadline = time.monotonic() + 120
            while self.cancelled() == before and time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertEqual(self.cancelled(), before + 1)
            # What was sent ends without [DONE]: the server closed it.
            data = read_all(s)
            self.assertIn(b"200 OK", data)
            self.assertNotIn(b"[DONE]", data)
        finally:
            s.close()
        self.assertEqual(self.grpc.stats().running_sequences, 0)

    def test_260_concurrent_streams(self):
        """260 SSE streams open at once on the one I/O thread: every one
        completes, each equal to the same request sent alone."""
        import asyncio
        prompts = [f"{PROMPT} ({i})" for i in range(8)]
        alone = [self.client.completions.create(
            model=self.model, prompt=p, max_tokens=6, temperature=0)
            .choices[0].text for p in prompts]

        async def one(client, i):
            stream = await client.completions.create(
                model=self.model, prompt=prompts[i % 8], max_tokens=6,
                temperature=0, stream=True)
            return "".join([c.choices[0].text async for c in stream
                            if c.choices])

        async def run():
            limits = httpx.Limits(max_connections=300)
            async with openai.AsyncOpenAI(
                    base_url=self.base_url, api_key="x", max_retries=0,
                    timeout=600,
                    http_client=httpx.AsyncClient(limits=limits)) as client:
                return await asyncio.gather(
                    *(one(client, i) for i in range(260)))

        import threading
        tasks = f"/proc/{self.verifysvc.process.pid}/task"
        threads_before = len(os.listdir(tasks))
        most = [threads_before]
        done = threading.Event()

        def sample():
            while not done.wait(0.01):
                most[0] = max(most[0], len(os.listdir(tasks)))

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            texts = asyncio.run(run())
        finally:
            done.set()
            sampler.join()
        self.assertEqual(texts, [alone[i % 8] for i in range(260)])
        # No thread per connection or stream.
        self.assertLessEqual(most[0], threads_before + 2,
                             (threads_before, most[0]))

    # --- keys ------------------------------------------------------------

    def keyed_client(self, key):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.keyed_port}/v1",
                             api_key=key, max_retries=0, timeout=300)

    def test_keys(self):
        ok = self.keyed_client(KEY_A).chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=2, temperature=0)
        self.assertEqual(ok.usage.completion_tokens, 2)
        for key in ("wrong-key", ""):
            with self.assertRaises(openai.AuthenticationError) as e:
                self.keyed_client(key).chat.completions.create(
                    model=self.model, messages=CHAT, max_tokens=2)
            self.assertEqual(e.exception.status_code, 401)
            self.assertNotIn(KEY_A, e.exception.body["message"])
        with self.assertRaises(openai.PermissionDeniedError) as e:
            self.keyed_client(KEY_A).chat.completions.create(
                model=self.model, messages=CHAT, max_tokens=2,
                extra_body={"lookahead": {"namespace": "team-b"}})
        self.assertIn("team-b", e.exception.body["message"])
        self.assertEqual(e.exception.body["param"], "lookahead.namespace")
        slow = self.keyed_client(KEY_SLOW)
        with self.assertRaises(openai.RateLimitError) as e:
            for _ in range(3):
                slow.chat.completions.create(
                    model=self.model, messages=CHAT, max_tokens=1)
        self.assertEqual(e.exception.status_code, 429)
        self.assertGreaterEqual(
            int(e.exception.response.headers["retry-after"]), 1)
        # /health stays open for probes; /v1/models needs a key.
        self.assertEqual(httpx.get(
            f"http://127.0.0.1:{self.keyed_port}/health").status_code, 200)
        with self.assertRaises(openai.AuthenticationError):
            self.keyed_client("wrong-key").models.list()


class LifecycleTest(unittest.TestCase):
    """Separate verifysvc processes: loading, draining, HTTPS."""

    def test_503_while_loading_then_200(self):
        work = tempfile.mkdtemp(prefix="openai_loading.")
        server = Server("verifysvc", [VERIFYSVC, "--draftsvc="], work,
                        http=True)
        try:
            port = server.http_port()
            first = httpx.get(f"http://127.0.0.1:{port}/health")
            self.assertEqual(first.status_code, 503, server.log())
            self.assertEqual(first.json(), {"status": "loading"})
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1",
                                   api_key="x", max_retries=0)
            with self.assertRaises(openai.InternalServerError) as e:
                client.completions.create(model="m", prompt="x")
            self.assertEqual(e.exception.status_code, 503)
            self.assertIn("loading", e.exception.body["message"])
            self.assertEqual(e.exception.response.headers["retry-after"], "1")
            OpenAiFrontTest.wait_serving(port)
        finally:
            server.stop()

    def test_connection_cap(self):
        work = tempfile.mkdtemp(prefix="openai_cap.")
        server = Server("verifysvc", [VERIFYSVC, "--draftsvc=",
                                      "--http_max_connections=3"],
                        work, http=True)
        try:
            port = server.http_port()
            OpenAiFrontTest.wait_serving(port)
            held = [socket.create_connection(("127.0.0.1", port), timeout=10)
                    for _ in range(3)]
            time.sleep(0.2)  # accepted, each waiting for its request
            with socket.create_connection(("127.0.0.1", port),
                                          timeout=10) as extra:
                start = time.monotonic()
                self.assertEqual(read_all(extra), b"")  # closed at once
                self.assertLess(time.monotonic() - start, 5)
            held.pop().close()
            time.sleep(0.2)
            self.assertEqual(httpx.get(
                f"http://127.0.0.1:{port}/health").status_code, 200)
            for s in held:
                s.close()
        finally:
            server.stop()

    def drain_server(self, grace_ms):
        work = tempfile.mkdtemp(prefix="openai_drain.")
        server = Server("verifysvc", [VERIFYSVC, "--draftsvc=",
                                      f"--shutdown_grace_ms={grace_ms}"],
                        work, http=True)
        port = server.http_port()
        OpenAiFrontTest.wait_serving(port)
        model = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()
        body = json.dumps({"model": model["data"][0]["id"],
                           "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
                           "max_tokens": 400, "temperature": 0,
                           "stream": True})
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(post("/v1/completions", body))
        got = b""
        while got.count(b"data: ") < 2:
            got += s.recv(4096)
        server.process.send_signal(signal.SIGTERM)
        return server, port, s, got

    def test_drain_finishes_running_streams_and_refuses_new_ones(self):
        server, port, s, got = self.drain_server(grace_ms=60000)
        try:
            deadline = time.monotonic() + 30
            health = None
            while time.monotonic() < deadline:
                health = httpx.get(f"http://127.0.0.1:{port}/health")
                if health.status_code == 503:
                    break
                time.sleep(0.01)
            self.assertEqual(health.json(), {"status": "draining"})
            refused = httpx.post(f"http://127.0.0.1:{port}/v1/completions",
                                 json={"model": "m", "prompt": "x"})
            self.assertEqual(refused.status_code, 503)
            self.assertIn("draining", refused.json()["error"]["message"])
            got += read_all(s)
            self.assertIn(b'"finish_reason":"length"', got)
            self.assertTrue(got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"),
                            got[-200:])
            self.assertEqual(server.process.wait(timeout=60), 0)
        finally:
            s.close()
            server.stop()

    def test_error_after_the_stream_began_is_an_error_event(self):
        server, port, s, got = self.drain_server(grace_ms=1)
        try:
            got += read_all(s)
            last = got.rstrip(b"\r\n0").split(b"data: ")[-1]
            error = json.loads(last.split(b"\r\n")[0])["error"]
            self.assertEqual(error["type"], "service_unavailable")
            self.assertNotIn(b"[DONE]", got)
        finally:
            s.close()
            server.stop()

    def test_https_with_the_tls_flags(self):
        work = tempfile.mkdtemp(prefix="openai_tls.")
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                        "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        server = Server("verifysvc", [
            VERIFYSVC, "--draftsvc=", f"--tls_cert_file={cert}",
            f"--tls_key_file={key}"], work, http=True)
        try:
            port = server.http_port()
            url = f"https://127.0.0.1:{port}"
            trust = ssl.create_default_context(cafile=cert)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if httpx.get(f"{url}/health", verify=trust).status_code == 200:
                    break
                time.sleep(0.05)
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="x",
                                   max_retries=0,
                                   http_client=httpx.Client(verify=trust))
            model = client.models.list().data[0].id
            reply = client.completions.create(model=model, prompt=PROMPT,
                                              max_tokens=4, temperature=0)
            self.assertEqual(reply.usage.completion_tokens, 4)
            # Plaintext HTTP to the HTTPS port gets no answer.
            with self.assertRaises(httpx.TransportError):
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
            # A client that does not trust the certificate is refused.
            with self.assertRaises(httpx.ConnectError):
                httpx.get(f"{url}/health")
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
