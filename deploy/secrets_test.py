"""The Secrets of deploy/make_secrets.sh work with the real binaries, the way
the manifests use them (tools/deploy_test.sh runs this when it has built the
binaries; DEPLOY_BIN_DIR names the Bazel bin directory).

draftsvc serves mutual TLS with draftsvc.crt and the CA (its common.flags):
  - verifysvc's client certificate is accepted when verifysvc dials a shard
    by its pod name (draftsvc-1.draftsvc, as in --draftsvc, or the FQDN),
  - the shard's own certificate is accepted as a client certificate under
    the server name "draftsvc" (what the grpc_health_probe probe does),
  - a client without a certificate, and one that expects another server
    name, are refused.
verifysvc serves both fronts with verifysvc.crt and the API keys file: the
gRPC health check passes under the names clients and the probe use
(verifysvc-grpc.<ns>.svc, verifysvc), HTTPS GET /health answers 200 (the
startup and readiness probes), and a client that does not trust the CA is
refused.

  DEPLOY_BIN_DIR=.bazel/bin /usr/bin/python3 deploy/secrets_test.py
"""

import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE = "lookahead-test"
SERVING = b"\x08\x01"  # grpc.health.v1.HealthCheckResponse{status: SERVING}


def health(port, ca, server_name, cert=None, key=None):
    """The raw grpc.health.v1 Check answer over TLS; raises grpc.RpcError."""
    def read(path):
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(ca), private_key=read(key),
        certificate_chain=read(cert))
    options = [("grpc.ssl_target_name_override", server_name)]
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        return check(b"", timeout=10)


def https_health(port, ca, server_name):
    """The status line of GET /health over HTTPS, verifying the server's
    certificate against `ca` under `server_name`."""
    context = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=server_name) as tls:
            tls.sendall(f"GET /health HTTP/1.1\r\nHost: {server_name}\r\n"
                        "Connection: close\r\n\r\n".encode())
            return tls.recv(4096).decode(errors="replace").split("\r\n")[0]


class Server:
    """A child server that writes its port to a file once serving."""

    def __init__(self, args, tmp, name, timeout_s):
        self.port_file = os.path.join(tmp, f"{name}.port")
        self.log = open(os.path.join(tmp, f"{name}.log"), "w+")
        self.process = subprocess.Popen(
            args + [f"--port_file={self.port_file}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout_s
        while not os.path.exists(self.port_file):
            if self.process.poll() is not None or time.time() > deadline:
                self.stop()
                raise AssertionError(f"{name} did not start:\n{self.output()}")
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.port = int(f.read())

    def output(self):
        self.log.seek(0)
        return self.log.read()[-4000:]

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


class SecretsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        bin_dir = os.environ.get("DEPLOY_BIN_DIR")
        if not bin_dir:
            raise unittest.SkipTest("DEPLOY_BIN_DIR not set")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "secrets")
        subprocess.run([os.path.join(REPO, "deploy/make_secrets.sh"), NAMESPACE,
                        cls.dir], check=True, capture_output=True, text=True)
        cls.draftsvc = Server([
            os.path.join(bin_dir, "draftsvc/draftsvc"), "--host=127.0.0.1",
            "--port=0", "--metrics_port=-1",
            f"--db_path={cls.tmp.name}/db",
            f"--tls_cert_file={cls.dir}/draftsvc.crt",
            f"--tls_key_file={cls.dir}/draftsvc.key",
            f"--tls_client_ca_file={cls.dir}/ca.crt"],
            cls.tmp.name, "draftsvc", 60)
        cls.verifysvc = None
        try:
            cls.verifysvc = Server([
                os.path.join(bin_dir, "verifysvc/verifysvc"), "--host=127.0.0.1",
                "--port=0", "--metrics_port=-1", "--draftsvc=",
                f"--api_keys_file={cls.dir}/api_keys",
                f"--tls_cert_file={cls.dir}/verifysvc.crt",
                f"--tls_key_file={cls.dir}/verifysvc.key",
                "--max_running=1", "--max_context_tokens=256"]
                + ["--http_port=0", f"--http_port_file={cls.tmp.name}/http.port"],
                cls.tmp.name, "verifysvc", 300)
            with open(f"{cls.tmp.name}/http.port") as f:
                cls.http_port = int(f.read())
        except BaseException:
            cls.draftsvc.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        for server in (cls.verifysvc, cls.draftsvc):
            if server is not None:
                server.stop()
        cls.tmp.cleanup()

    def f(self, name):
        return os.path.join(self.dir, name)

    def test_verifysvc_reaches_a_shard_by_its_pod_name(self):
        self.assertEqual(
            health(self.draftsvc.port, self.f("ca.crt"), "draftsvc-1.draftsvc",
                   self.f("verifysvc-client.crt"), self.f("verifysvc-client.key")),
            SERVING)
        self.assertEqual(
            health(self.draftsvc.port, self.f("ca.crt"),
                   f"draftsvc-0.draftsvc.{NAMESPACE}.svc",
                   self.f("verifysvc-client.crt"), self.f("verifysvc-client.key")),
            SERVING)

    def test_the_draftsvc_probe_passes_with_the_pods_own_certificate(self):
        self.assertEqual(
            health(self.draftsvc.port, self.f("ca.crt"), "draftsvc",
                   self.f("draftsvc.crt"), self.f("draftsvc.key")),
            SERVING)

    def test_draftsvc_refuses_clients_without_a_certificate(self):
        with self.assertRaises(grpc.RpcError) as error:
            health(self.draftsvc.port, self.f("ca.crt"), "draftsvc-0.draftsvc")
        self.assertEqual(error.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_a_client_checks_draftsvcs_name(self):
        with self.assertRaises(grpc.RpcError):
            health(self.draftsvc.port, self.f("ca.crt"), "verifysvc",
                   self.f("verifysvc-client.crt"), self.f("verifysvc-client.key"))

    def test_verifysvc_serves_tls_under_its_service_names(self):
        for name in ("verifysvc", f"verifysvc-grpc.{NAMESPACE}.svc",
                     f"verifysvc.{NAMESPACE}.svc.cluster.local"):
            with self.subTest(name=name):
                self.assertEqual(health(self.verifysvc.port, self.f("ca.crt"), name),
                                 SERVING)

    def test_the_http_front_serves_health_over_https_with_the_same_cert(self):
        # What the startup and readiness probes ask (the kubelet skips the
        # verification that this does).
        self.assertEqual(https_health(self.http_port, self.f("ca.crt"), "verifysvc"),
                         "HTTP/1.1 200 OK")

    def test_verifysvc_is_refused_by_a_client_that_does_not_trust_the_ca(self):
        with self.assertRaises(grpc.RpcError):
            health(self.verifysvc.port, self.f("draftsvc.crt"), "verifysvc")


if __name__ == "__main__":
    unittest.main(argv=sys.argv, verbosity=2)
