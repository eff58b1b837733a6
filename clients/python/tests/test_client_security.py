#!/usr/bin/python3
"""Client's api_key, TLS and round_robin options against real gRPC servers
on loopback (small Python GenerationService stand-ins that record what
arrives), with throwaway certificates made by `openssl`.

Skipped when grpc, the generated modules or openssl are missing.
"""

import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import grpc
    from lookahead_client import client as client_module
    from lookahead_client.proto import generation_pb2, generation_pb2_grpc
except ImportError as e:  # pragma: no cover - depends on the machine
    grpc = None
    IMPORT_ERROR = str(e)


def _openssl(*args, cwd):
    subprocess.run(("openssl",) + args, cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_certs(d):
    """A CA and a server certificate for 127.0.0.1 signed by it."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=test CA", "-addext",
             "basicConstraints=critical,CA:TRUE", "-addext",
             "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=localhost", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
             "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "2",
             "-extfile", "server.ext", cwd=d)


if grpc is not None:
    class RecordingService(generation_pb2_grpc.GenerationServiceServicer):
        """ModelInfo answers with this server's name and records the
        authorization metadata it got."""

        def __init__(self, name):
            self.name = name
            self.authorizations = []

        def ModelInfo(self, request, context):
            metadata = dict(context.invocation_metadata())
            self.authorizations.append(metadata.get("authorization"))
            return generation_pb2.ModelInfoResponse(name=self.name)


def start_server(name, credentials=None):
    service = RecordingService(name)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    generation_pb2_grpc.add_GenerationServiceServicer_to_server(service,
                                                                server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, service, port


@unittest.skipIf(grpc is None, "grpc or the generated modules are missing")
@unittest.skipIf(shutil.which("openssl") is None, "openssl is missing")
class ClientSecurityTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.servers = []

    def tearDown(self):
        for server in self.servers:
            server.stop(None)

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_api_key_over_tls(self):
        make_certs(self.dir)
        with open(self.path("server.key"), "rb") as k, \
                open(self.path("server.pem"), "rb") as c:
            credentials = grpc.ssl_server_credentials([(k.read(), c.read())])
        server, service, port = start_server("tls", credentials)
        self.servers.append(server)
        target = f"127.0.0.1:{port}"
        with client_module.Client(target, api_key="secret-key-123",
                                  ca_file=self.path("ca.pem")) as c:
            self.assertEqual(c.model_info(timeout=10).name, "tls")
        self.assertEqual(service.authorizations, ["Bearer secret-key-123"])
        # Plaintext to a TLS port fails; so does TLS without the CA.
        with client_module.Client(target) as c:
            with self.assertRaises(grpc.RpcError) as e:
                c.model_info(timeout=5)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        with client_module.Client(target, tls=True) as c:
            with self.assertRaises(grpc.RpcError) as e:
                c.model_info(timeout=5)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_no_key_sends_no_authorization(self):
        server, service, port = start_server("plain")
        self.servers.append(server)
        with client_module.Client(f"127.0.0.1:{port}") as c:
            c.model_info(timeout=10)
        self.assertEqual(service.authorizations, [None])

    def test_bad_options(self):
        with self.assertRaises(ValueError):
            client_module.Client("127.0.0.1:1", api_key="has space")
        with self.assertRaises(ValueError):
            client_module.Client("127.0.0.1:1", api_key="")
        with self.assertRaises(ValueError):
            client_module.Client("127.0.0.1:1", client_cert_file="c.pem")
        with self.assertRaises(OSError):
            client_module.Client("127.0.0.1:1", ca_file=self.path("missing"))

    def test_round_robin_spreads_calls_over_addresses(self):
        names = set()
        ports = []
        for name in ("replica-a", "replica-b"):
            server, _, port = start_server(name)
            self.servers.append(server)
            ports.append(port)
        # What a headless Service's DNS name gives: several addresses.
        target = "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)
        with client_module.Client(target) as c:
            c.wait_ready(timeout=10)
            for _ in range(8):
                names.add(c.model_info(timeout=10).name)
        self.assertEqual(names, {"replica-a", "replica-b"})
        # pick_first (gRPC's default) sticks to one address.
        names = set()
        with client_module.Client(target, load_balancing="pick_first") as c:
            for _ in range(8):
                names.add(c.model_info(timeout=10).name)
        self.assertEqual(len(names), 1)

    def test_dns_target_resolves(self):
        server, _, port = start_server("dns")
        self.servers.append(server)
        with client_module.Client(f"dns:///localhost:{port}") as c:
            self.assertEqual(c.model_info(timeout=10).name, "dns")


if __name__ == "__main__":
    unittest.main()
