"""Policy test for the rendered Kubernetes manifests of deploy/ (the base and
both overlays).

Every rendered object is parsed into the official Kubernetes Python model of
its kind (python3-kubernetes), and the policy is checked on those models:
resources, probes on both of verifysvc's fronts (gRPC and HTTP) and on
draftsvc, pinned images, non-root pods, draftsvc's shards (a StatefulSet with
a PersistentVolumeClaim per pod behind a headless Service, every pod listed in
verifysvc's --draftsvc), verifysvc's Services (headless for gRPC, one for
HTTP) and replicas, API keys and certificates from mounted Secrets (never
committed), the NetworkPolicies, GPUs in the gpu overlay. The flags in the
ConfigMaps are cross-checked against the manifests (ports, paths, grace
periods, threads) and, when DEPLOY_BIN_DIR names a Bazel bin directory,
parsed by the real binaries.

python3-kubernetes 22.6 (Debian bookworm) models Kubernetes 1.22. Two things
used here are newer and are checked on the plain dicts instead: gRPC probes
(`grpc:`, Kubernetes 1.24), which its V1Probe drops, and autoscaling/v2, which
is parsed as V2beta2HorizontalPodAutoscaler (the same schema under its beta
name). ServiceMonitor is a Prometheus Operator CRD with no model: plain dict.

  /usr/bin/python3 deploy/policy_test.py         # renders with kubectl
  DEPLOY_RENDERED_DIR=DIR   uses DIR/{base,dev,gpu}.yaml as rendered
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import kubernetes.client
import yaml
from kubernetes.utils import parse_quantity

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The base too, so that what every overlay builds on keeps the policy.
RENDERINGS = {"base": "deploy/base", "dev": "deploy/overlays/dev",
              "gpu": "deploy/overlays/gpu"}

# (apiVersion, kind) -> model class name. A kind missing here fails the test:
# add its model (or, for a CRD, to CRD_KINDS with dict checks).
MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Service"): "V1Service",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
    ("autoscaling/v2", "HorizontalPodAutoscaler"):
        "V2beta2HorizontalPodAutoscaler",
}
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")
SERVICES = ("draftsvc", "verifysvc")
# Fields newer than the model, allowed to vanish in the model round trip.
NEWER_THAN_MODEL = tuple(f".{probe}.grpc" for probe in PROBES)
# The gRPC health checker the images carry (deploy/docker): the kubelet's own
# gRPC probe speaks plaintext only, so a TLS front is probed with this.
GRPC_HEALTH_PROBE = "/usr/local/bin/grpc_health_probe"
DOCKERFILES = {"draftsvc": ["deploy/docker/draftsvc.Dockerfile"],
               "verifysvc": ["deploy/docker/verifysvc.Dockerfile",
                             "deploy/docker/verifysvc-cuda.Dockerfile"]}
# Flags naming a file that holds a key or certificate: it must come from a
# mounted Secret.
SECRET_FLAGS = {
    "draftsvc": ("tls_cert_file", "tls_key_file", "tls_client_ca_file"),
    "verifysvc": ("api_keys_file", "tls_cert_file", "tls_key_file",
                  "draftsvc_ca_file", "draftsvc_client_cert_file",
                  "draftsvc_client_key_file"),
}
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class _Response:
    """What ApiClient.deserialize reads: a body in .data."""

    def __init__(self, obj):
        self.data = json.dumps(obj)


def to_model(obj):
    """Returns the Kubernetes model of `obj`; raises on an unknown kind or a
    structurally invalid object (missing required fields, wrong types)."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in MODELS:
        raise AssertionError(f"no Kubernetes model mapped for {key}")
    return kubernetes.client.ApiClient().deserialize(_Response(obj), MODELS[key])


def lost_fields(original, round_trip, path=""):
    """Paths present in `original` but not in `round_trip`: fields the model
    does not know (misspelt, misplaced or newer than the model)."""
    if isinstance(original, dict):
        if not isinstance(round_trip, dict):
            return [path or "."]
        lost = []
        for key, value in original.items():
            if key not in round_trip:
                lost.append(f"{path}.{key}")
            else:
                lost += lost_fields(value, round_trip[key], f"{path}.{key}")
        return lost
    if isinstance(original, list):
        if not isinstance(round_trip, list) or len(round_trip) != len(original):
            return [path]
        return [p for i, (a, b) in enumerate(zip(original, round_trip))
                for p in lost_fields(a, b, f"{path}[{i}]")]
    # Quantities and int-or-string values come back as strings.
    return [] if str(original) == str(round_trip) else [f"{path} (value)"]


def parse_flagfile(text):
    """absl flagfile text -> {name: value}. A bare --name is "true" (the
    --noname form is not used in these files)."""
    flags = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert line.startswith("--"), f"not a flag line: {line!r}"
        name, sep, value = line[2:].partition("=")
        flags[name] = value if sep else "true"
    return flags


def selects(selector, labels):
    """Whether a label selector (model with match_labels/match_expressions)
    selects `labels`."""
    if selector is None:
        return False
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.match_expressions or []:
        has = expr.key in labels
        if expr.operator == "In" and labels.get(expr.key) not in expr.values:
            return False
        if expr.operator == "NotIn" and labels.get(expr.key) in expr.values:
            return False
        if expr.operator == "Exists" and not has:
            return False
        if expr.operator == "DoesNotExist" and has:
            return False
    return True


class Rendered:
    """One overlay's rendered objects, as dicts and as models."""

    def __init__(self, name, text):
        self.name = name
        self.raw = [o for o in yaml.safe_load_all(text) if o]
        self.models = {}  # index in raw -> model (None for CRDs)
        for i, obj in enumerate(self.raw):
            key = (obj.get("apiVersion"), obj.get("kind"))
            self.models[i] = None if key in CRD_KINDS else to_model(obj)

    def objects(self, kind):
        return [(self.raw[i], m) for i, m in self.models.items()
                if self.raw[i]["kind"] == kind]

    def one(self, kind, name):
        found = [(r, m) for r, m in self.objects(kind)
                 if r["metadata"]["name"] == name]
        assert len(found) == 1, f"{self.name}: want one {kind}/{name}, got {len(found)}"
        return found[0]

    def workloads(self):
        """(raw, model) of every object with a pod template."""
        return [(r, m) for r, m in zip(self.raw, self.models.values())
                if "containers" in r.get("spec", {}).get("template", {}).get("spec", {})]

    def config_map_data(self, name):
        _, model = self.one("ConfigMap", name)
        return model.data or {}

    def flagfile_text(self, workload_model, container, path):
        """The text of flagfile `path` as the container sees it: a key of the
        ConfigMap mounted at the path's directory."""
        directory, _, key = path.rpartition("/")
        mounts = {m.mount_path: m.name for m in container.volume_mounts or []}
        volumes = {v.name: v for v in workload_model.spec.template.spec.volumes or []}
        volume = volumes.get(mounts.get(directory))
        assert volume is not None and volume.config_map is not None, (
            f"{self.name}: {path} is not on a mounted ConfigMap")
        data = self.config_map_data(volume.config_map.name)
        assert key in data, f"{self.name}: ConfigMap {volume.config_map.name} has no {key}"
        return data[key]

    def flags(self, workload_model, container):
        """The flags a container gets: its args, each --flagfile read from
        the ConfigMap mounted there; later ones win, as in absl."""
        flags = {}
        for arg in container.args or []:
            if not arg.startswith("--flagfile="):
                flags.update(parse_flagfile(arg))
                continue
            for path in arg.partition("=")[2].split(","):
                flags.update(parse_flagfile(
                    self.flagfile_text(workload_model, container, path)))
        return flags


def secret_of(workload_model, container, path):
    """The name of the Secret whose mounted volume holds file `path` in
    `container`, or None if no Secret volume is mounted at its directory."""
    volumes = {v.name: v for v in workload_model.spec.template.spec.volumes or []}
    directory = os.path.dirname(path)
    for mount in container.volume_mounts or []:
        if mount.mount_path.rstrip("/") != directory:
            continue
        volume = volumes.get(mount.name)
        if volume is not None and volume.secret is not None:
            return volume.secret.secret_name
    return None


def grpc_probe_port(probe, flags, where):
    """The port a gRPC health probe checks, after asserting that it can pass
    against a server with `flags`: the kubelet's plaintext `grpc:` probe only
    for a plaintext server; otherwise grpc_health_probe over TLS on loopback
    with the CA (and, for mutual TLS, a client certificate). None if `probe`
    is not a gRPC probe."""
    tls = bool(flags.get("tls_cert_file"))
    if "grpc" in probe:
        assert not tls, f"{where}: the kubelet's gRPC probe cannot speak TLS"
        return probe["grpc"]["port"]
    command = probe.get("exec", {}).get("command") or []
    if not command or command[0] != GRPC_HEALTH_PROBE:
        return None
    args = dict(a.lstrip("-").partition("=")[::2] for a in command[1:])
    host, _, port = args.get("addr", "").rpartition(":")
    assert host in LOOPBACK, f"{where}: probe -addr={args.get('addr')} is not loopback"
    if tls:
        assert "tls" in args, f"{where}: TLS server probed without -tls"
        assert args.get("tls-ca-cert"), f"{where}: no -tls-ca-cert"
        assert "tls-no-verify" not in args, f"{where}: -tls-no-verify"
    if flags.get("tls_client_ca_file"):
        assert args.get("tls-client-cert") and args.get("tls-client-key"), (
            f"{where}: mutual TLS server probed without a client certificate")
    return int(port)


def probe_files(probe):
    """Files a grpc_health_probe command reads (certificates, keys)."""
    command = probe.get("exec", {}).get("command") or []
    return [a.partition("=")[2] for a in command[1:]
            if a.lstrip("-").partition("=")[0] in
            ("tls-ca-cert", "tls-client-cert", "tls-client-key")]


def containers_of(model):
    spec = model.spec.template.spec
    return list(spec.init_containers or []) + list(spec.containers)


def raw_container(raw, name):
    spec = raw["spec"]["template"]["spec"]
    for c in spec.get("initContainers", []) + spec["containers"]:
        if c["name"] == name:
            return c
    raise AssertionError(f"no container {name}")


def render(overlay):
    rendered_dir = os.environ.get("DEPLOY_RENDERED_DIR")
    if rendered_dir:
        with open(os.path.join(rendered_dir, f"{overlay}.yaml")) as f:
            return f.read()
    return subprocess.run(
        ["kubectl", "kustomize", os.path.join(REPO, RENDERINGS[overlay])],
        check=True, capture_output=True, text=True).stdout


class PolicyTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.overlays = {name: Rendered(name, render(name)) for name in RENDERINGS}

    def containers(self):
        """Every container of every overlay: (where, overlay, workload raw,
        workload model, container model); `where` names it for subTest."""
        cases = []
        for overlay in self.overlays.values():
            for raw, model in overlay.workloads():
                for container in containers_of(model):
                    where = dict(overlay=overlay.name,
                                 workload=raw["metadata"]["name"],
                                 container=container.name)
                    cases.append((where, overlay, raw, model, container))
        return cases

    def service_containers(self):
        """containers() that run one of the services (named after it), with
        its flags; those are what the flag cross-checks look at."""
        return [case for case in self.containers()
                if case[4].name in SERVICES]

    def test_every_object_parses_into_its_model_without_losing_fields(self):
        client = kubernetes.client.ApiClient()
        for overlay in self.overlays.values():
            self.assertTrue(overlay.workloads(), overlay.name)
            for i, model in overlay.models.items():
                raw = overlay.raw[i]
                if model is None:
                    continue
                with self.subTest(overlay=overlay.name, kind=raw["kind"],
                                  name=raw["metadata"]["name"]):
                    lost = lost_fields(raw, client.sanitize_for_serialization(model))
                    unknown = [p for p in lost if not p.endswith(NEWER_THAN_MODEL)]
                    self.assertEqual(unknown, [], "fields the model does not know")

    def test_every_container_has_cpu_and_memory_requests_and_limits(self):
        for where, _, _, _, c in self.containers():
            with self.subTest(**where):
                self.assertIsNotNone(c.resources, "no resources")
                requests = c.resources.requests or {}
                limits = c.resources.limits or {}
                for resource in ("cpu", "memory"):
                    self.assertIn(resource, requests, "request")
                    self.assertIn(resource, limits, "limit")
                    self.assertLessEqual(parse_quantity(requests[resource]),
                                         parse_quantity(limits[resource]), resource)

    def test_every_running_container_has_liveness_and_readiness_probes(self):
        for where, _, raw, _, c in self.containers():
            raw_c = raw_container(raw, c.name)
            init = raw_c in raw["spec"]["template"]["spec"].get("initContainers", [])
            if init and raw_c.get("restartPolicy") != "Always":
                continue  # Kubernetes rejects probes on run-to-completion init containers.
            with self.subTest(**where):
                for probe in PROBES[1:]:
                    self.assertIn(probe, raw_c, f"no {probe}")

    def test_services_are_probed_on_every_front(self):
        for where, overlay, raw, model, c in self.service_containers():
            with self.subTest(**where):
                raw_c = raw_container(raw, c.name)
                flags = overlay.flags(model, c)
                port = int(flags["port"])
                declared = {p.container_port for p in c.ports or []}
                named = {p.name: p.container_port for p in c.ports or []}
                self.assertIn(port, declared, "--port is not a containerPort")
                # verifysvc loads a model before serving: it needs a startupProbe.
                wanted = PROBES if c.name == "verifysvc" else PROBES[1:]
                grpc_probes, http_probes = [], []
                for probe in PROBES:
                    if probe not in raw_c:
                        self.assertNotIn(probe, wanted, f"no {probe}")
                        continue
                    spec = raw_c[probe]
                    grpc_port = grpc_probe_port(spec, flags, f"{where} {probe}")
                    if grpc_port is not None:
                        self.assertEqual(grpc_port, port, f"{probe} port")
                        for path in probe_files(spec):
                            self.assertIsNotNone(secret_of(model, c, path),
                                                 f"{probe} reads {path} from no Secret")
                        grpc_probes.append(probe)
                        continue
                    http = spec.get("httpGet")
                    self.assertIsNotNone(http, f"{probe} is neither gRPC nor HTTP")
                    self.assertEqual(c.name, "verifysvc", f"{probe}: HTTP probe")
                    self.assertEqual(http.get("path"), "/health", probe)
                    http_port = http.get("port")
                    self.assertEqual(named.get(http_port, http_port),
                                     int(flags["http_port"]), f"{probe} port")
                    tls = bool(flags.get("tls_cert_file"))
                    self.assertEqual(http.get("scheme", "HTTP"),
                                     "HTTPS" if tls else "HTTP", f"{probe} scheme")
                    http_probes.append(probe)
                self.assertTrue(grpc_probes, "the gRPC front is not probed")
                if c.name == "verifysvc":
                    self.assertTrue(http_probes, "the HTTP front is not probed")
                    self.assertIn(int(flags["http_port"]), declared,
                                  "--http_port is not a containerPort")

    def test_images_carry_the_grpc_health_probe(self):
        for service, dockerfiles in DOCKERFILES.items():
            for dockerfile in dockerfiles:
                with self.subTest(dockerfile=dockerfile):
                    with open(os.path.join(REPO, dockerfile)) as f:
                        text = f.read()
                    copies = [line for line in text.splitlines()
                              if line.startswith("COPY")
                              and line.rstrip().endswith(" " + GRPC_HEALTH_PROBE)]
                    self.assertEqual(len(copies), 1, f"no {GRPC_HEALTH_PROBE}")

    def test_images_are_pinned_to_a_version(self):
        for where, _, _, _, c in self.containers():
            with self.subTest(**where):
                image = c.image or ""
                name, _, digest = image.partition("@")
                tag = name.rpartition(":")[2] if ":" in name.rpartition("/")[2] else ""
                self.assertTrue(tag or digest, f"{image} has no tag")
                self.assertNotEqual(tag, "latest", image)

    def test_pods_run_as_non_root_with_a_read_only_root(self):
        for where, _, _, model, c in self.containers():
            with self.subTest(**where):
                pod = model.spec.template.spec.security_context
                own = c.security_context
                self.assertIsNotNone(own, "no container securityContext")

                def effective(field):
                    value = getattr(own, field)
                    return value if value is not None else getattr(pod, field, None)

                self.assertTrue(effective("run_as_non_root"), "runAsNonRoot")
                self.assertNotIn(effective("run_as_user"), (None, 0), "runAsUser")
                seccomp = effective("seccomp_profile")
                self.assertIn(seccomp and seccomp.type, ("RuntimeDefault", "Localhost"))
                self.assertIs(own.allow_privilege_escalation, False)
                self.assertFalse(own.privileged)
                self.assertIn("ALL", (own.capabilities and own.capabilities.drop) or [])
                self.assertIs(own.read_only_root_filesystem, True)
                volumes = {v.name: v for v in model.spec.template.spec.volumes or []}
                tmp = [m for m in c.volume_mounts or [] if m.mount_path == "/tmp"]
                self.assertEqual(len(tmp), 1, "no /tmp mount on a read-only root")
                self.assertIsNotNone(volumes[tmp[0].name].empty_dir, "/tmp emptyDir")

    def test_draftsvc_keeps_its_trie_on_a_persistent_volume(self):
        for overlay in self.overlays.values():
            with self.subTest(overlay=overlay.name):
                _, sts = overlay.one("StatefulSet", "draftsvc")
                claims = {t.metadata.name for t in sts.spec.volume_claim_templates or []}
                self.assertTrue(claims, "no volumeClaimTemplates")
                (c,) = sts.spec.template.spec.containers
                db_path = overlay.flags(sts, c)["db_path"]
                on_claim = [m for m in c.volume_mounts or []
                            if m.name in claims
                            and db_path.startswith(m.mount_path.rstrip("/") + "/")]
                self.assertTrue(on_claim, f"--db_path={db_path} not on a claim")
                self.assertFalse(on_claim[0].read_only)
                _, service = overlay.one("Service", sts.spec.service_name)
                self.assertEqual(service.spec.cluster_ip, "None", "not headless")

    def test_verifysvc_lists_every_draftsvc_shard(self):
        for overlay in self.overlays.values():
            with self.subTest(overlay=overlay.name):
                _, sts = overlay.one("StatefulSet", "draftsvc")
                self.assertGreaterEqual(sts.spec.replicas, 2, "one shard")
                (d,) = sts.spec.template.spec.containers
                draft_port = overlay.flags(sts, d)["port"]
                _, deploy = overlay.one("Deployment", "verifysvc")
                (c,) = deploy.spec.template.spec.containers
                listed = overlay.flags(deploy, c)["draftsvc"].split(",")
                pods = []
                for address in listed:
                    host, _, port = address.rpartition(":")
                    self.assertEqual(port, draft_port, address)
                    # <pod>.<service>[.<namespace>.svc[.cluster.local]]
                    labels = host.split(".")
                    self.assertIn(len(labels), (2, 4, 5), address)
                    if len(labels) > 2:
                        self.assertEqual(labels[3], "svc", address)
                    self.assertEqual(labels[1], sts.spec.service_name, address)
                    pods.append(labels[0])
                # Exactly the StatefulSet's pods, each once: a missing one
                # would hold namespaces nobody asks, an extra one no pod.
                self.assertEqual(sorted(pods), sorted(
                    f"{sts.metadata.name}-{i}" for i in range(sts.spec.replicas)))

    def test_verifysvc_runs_two_or_more_replicas(self):
        for overlay in self.overlays.values():
            with self.subTest(overlay=overlay.name):
                _, hpa = overlay.one("HorizontalPodAutoscaler", "verifysvc")
                self.assertGreaterEqual(hpa.spec.min_replicas, 2)

    def test_verifysvc_services_headless_grpc_and_http(self):
        for overlay in self.overlays.values():
            with self.subTest(overlay=overlay.name):
                _, deploy = overlay.one("Deployment", "verifysvc")
                (c,) = deploy.spec.template.spec.containers
                flags = overlay.flags(deploy, c)
                labels = deploy.spec.template.metadata.labels
                named = {p.name: p.container_port for p in c.ports or []}
                fronts = {"grpc": int(flags["port"]), "http": int(flags["http_port"])}
                found = {"grpc": [], "http": []}
                for _, service in overlay.objects("Service"):
                    if not service.spec.selector or not all(
                            labels.get(k) == v for k, v in service.spec.selector.items()):
                        continue
                    headless = service.spec.cluster_ip == "None"
                    for p in service.spec.ports:
                        target = named.get(p.target_port, p.target_port)
                        for front, port in fronts.items():
                            if target == port:
                                found[front].append((service.metadata.name, headless))
                # gRPC: client-side round_robin over dns:/// needs every pod's
                # address; an L4 ClusterIP would pin each client to one pod.
                self.assertTrue([n for n, headless in found["grpc"] if headless],
                                "no headless Service for the gRPC port")
                self.assertTrue([n for n, headless in found["http"] if not headless],
                                "no (ClusterIP) Service for the HTTP port")
                # Both fronts are admitted by verifysvc's NetworkPolicy.
                admitted = set()
                for _, policy in overlay.objects("NetworkPolicy"):
                    if selects(policy.spec.pod_selector, labels):
                        for rule in policy.spec.ingress or []:
                            admitted |= {p.port for p in rule.ports or []}
                for front, port in fronts.items():
                    self.assertIn(port, admitted, f"{front} port not admitted")

    def test_servers_authenticate_with_keys_and_certificates_from_secrets(self):
        for where, overlay, _, model, c in self.service_containers():
            with self.subTest(**where):
                flags = overlay.flags(model, c)
                self.assertNotIn(flags.get("allow_unauthenticated", "false"),
                                 ("true", "1"), "--allow_unauthenticated")
                for flag in SECRET_FLAGS[c.name]:
                    self.assertTrue(flags.get(flag), f"--{flag} not set")
                    self.assertIsNotNone(secret_of(model, c, flags[flag]),
                                         f"--{flag}={flags[flag]} is not on a Secret")
                for mount in c.volume_mounts or []:
                    volumes = {v.name: v for v in model.spec.template.spec.volumes}
                    # A claim template's mount ("data") is no pod volume.
                    volume = volumes.get(mount.name)
                    if volume is not None and volume.secret is not None:
                        self.assertTrue(mount.read_only, f"{mount.name} writable")
        # Keys and certificates are never in the repository: no overlay
        # renders a Secret (deploy/make_secrets.sh creates them).
        for overlay in self.overlays.values():
            with self.subTest(overlay=overlay.name, kind="Secret"):
                self.assertEqual([r["metadata"]["name"] for r in overlay.raw
                                  if r["kind"] == "Secret"], [])

    def test_only_verifysvc_reaches_draftsvc_grpc(self):
        for overlay in self.overlays.values():
            with self.subTest(overlay=overlay.name):
                _, sts = overlay.one("StatefulSet", "draftsvc")
                _, deploy = overlay.one("Deployment", "verifysvc")
                draft_labels = sts.spec.template.metadata.labels
                verify_labels = deploy.spec.template.metadata.labels
                (c,) = sts.spec.template.spec.containers
                flags = overlay.flags(sts, c)
                grpc_port = int(flags["port"])
                metrics_port = int(flags["metrics_port"])
                policies = [m for _, m in overlay.objects("NetworkPolicy")
                            if selects(m.spec.pod_selector, draft_labels)]
                self.assertTrue(policies, "no NetworkPolicy selects draftsvc")
                admitted = set()
                for policy in policies:
                    self.assertIn("Ingress", policy.spec.policy_types or [])
                    for rule in policy.spec.ingress or []:
                        ports = {p.port for p in rule.ports or []}
                        if rule.ports and not ports & {grpc_port, "grpc"}:
                            admitted |= ports
                            continue
                        # This rule admits the gRPC port.
                        self.assertTrue(rule._from, "gRPC open to every source")
                        for peer in rule._from:
                            self.assertIsNone(peer.ip_block, "gRPC admits an IP block")
                            self.assertIsNone(peer.namespace_selector,
                                              "gRPC admits other namespaces")
                            self.assertTrue(selects(peer.pod_selector, verify_labels),
                                            "gRPC admits a non-verifysvc peer")
                        admitted.add(grpc_port)
                self.assertIn(grpc_port, admitted, "verifysvc cannot reach draftsvc")
                self.assertIn(metrics_port, admitted, "Prometheus cannot scrape")

    def test_every_flagfile_in_a_config_map_is_read(self):
        for overlay in self.overlays.values():
            read = set()  # (ConfigMap, key) pairs some container reads
            for _, model in overlay.workloads():
                volumes = {v.name: v for v in model.spec.template.spec.volumes or []}
                for c in containers_of(model):
                    mounts = {m.mount_path: m.name for m in c.volume_mounts or []}
                    for arg in c.args or []:
                        if not arg.startswith("--flagfile="):
                            continue
                        for path in arg.partition("=")[2].split(","):
                            directory, _, key = path.rpartition("/")
                            volume = volumes[mounts[directory]]
                            read.add((volume.config_map.name, key))
            for raw, model in overlay.objects("ConfigMap"):
                for key in model.data or {}:
                    with self.subTest(overlay=overlay.name,
                                      config_map=raw["metadata"]["name"], key=key):
                        self.assertIn((raw["metadata"]["name"], key), read,
                                      "a flagfile no container reads")

    def test_termination_grace_exceeds_the_shutdown_grace(self):
        for where, overlay, _, model, c in self.service_containers():
            with self.subTest(**where):
                grace_ms = int(overlay.flags(model, c)["shutdown_grace_ms"])
                pod_s = model.spec.template.spec.termination_grace_period_seconds
                self.assertIsNotNone(pod_s)
                self.assertGreaterEqual(pod_s * 1000, grace_ms + 5000,
                                        "no room to exit after the grace")

    def test_verifysvc_threads_fit_its_cpu_limit(self):
        for overlay in self.overlays.values():
            with self.subTest(overlay=overlay.name):
                _, deploy = overlay.one("Deployment", "verifysvc")
                (c,) = deploy.spec.template.spec.containers
                flags = overlay.flags(deploy, c)
                cpus = parse_quantity(c.resources.limits["cpu"])
                counts = []
                for pool in ("matmul_threads", "intra_op_threads", "blas_threads"):
                    self.assertIn(pool, flags, "default sees all node cores")
                    counts.append(int(flags[pool]))
                    self.assertGreaterEqual(counts[-1], 1, pool)
                    self.assertLessEqual(counts[-1], cpus, pool)
                self.assertLessEqual(sum(c > 1 for c in counts), 1,
                                     "two pools over the cores")

    def test_disruption_budgets_and_autoscaler_cover_the_workloads(self):
        for overlay in self.overlays.values():
            budgets = [m for _, m in overlay.objects("PodDisruptionBudget")]
            for raw, model in overlay.workloads():
                with self.subTest(overlay=overlay.name, workload=raw["metadata"]["name"]):
                    labels = model.spec.template.metadata.labels
                    self.assertEqual(
                        len([b for b in budgets if selects(b.spec.selector, labels)]), 1)
            with self.subTest(overlay=overlay.name, kind="HorizontalPodAutoscaler"):
                _, hpa = overlay.one("HorizontalPodAutoscaler", "verifysvc")
                target = hpa.spec.scale_target_ref
                overlay.one(target.kind, target.name)
                self.assertLessEqual(hpa.spec.min_replicas, hpa.spec.max_replicas)
                raw_deploy, _ = overlay.one("Deployment", "verifysvc")
                self.assertNotIn("replicas", raw_deploy["spec"], "fights the HPA")

    def test_prometheus_can_scrape_both_services(self):
        for where, overlay, raw, model, c in self.service_containers():
            with self.subTest(**where):
                metrics_port = int(overlay.flags(model, c)["metrics_port"])
                annotations = model.spec.template.metadata.annotations or {}
                self.assertEqual(annotations.get("prometheus.io/scrape"), "true")
                self.assertEqual(annotations.get("prometheus.io/port"), str(metrics_port))
                named = {p.name: p.container_port for p in c.ports or []}
                self.assertEqual(named.get("metrics"), metrics_port)
        # ServiceMonitor is a CRD: checked as a plain dict.
        for overlay in self.overlays.values():
            services = [m for _, m in overlay.objects("Service")]
            for monitor, _ in overlay.objects("ServiceMonitor"):
                with self.subTest(overlay=overlay.name,
                                  monitor=monitor["metadata"]["name"]):
                    wanted = monitor["spec"]["selector"]["matchLabels"]
                    matched = [s for s in services
                               if all((s.metadata.labels or {}).get(k) == v
                                      for k, v in wanted.items())]
                    self.assertEqual(len(matched), 1, "selects one Service")
                    ports = {p.name for p in matched[0].spec.ports}
                    for endpoint in monitor["spec"]["endpoints"]:
                        self.assertIn(endpoint["port"], ports)
        self.assertEqual(len(self.overlays["gpu"].objects("ServiceMonitor")), 2)

    def test_gpu_overlay_gives_every_verifysvc_a_gpu(self):
        gpu = self.overlays["gpu"]
        _, deploy = gpu.one("Deployment", "verifysvc")
        spec = deploy.spec.template.spec
        (c,) = spec.containers
        self.assertGreaterEqual(int(c.resources.limits.get("nvidia.com/gpu", 0)), 1,
                                "no nvidia.com/gpu limit")
        self.assertTrue(spec.node_selector or spec.affinity, "no GPU node choice")
        self.assertTrue(any(t.key == "nvidia.com/gpu" for t in spec.tolerations or []),
                        "no toleration for the nvidia.com/gpu taint")
        _, hpa = gpu.one("HorizontalPodAutoscaler", "verifysvc")
        self.assertGreaterEqual(hpa.spec.min_replicas, 2)

    def test_dev_overlay_is_two_cpu_replicas_on_two_shards(self):
        dev = self.overlays["dev"]
        _, sts = dev.one("StatefulSet", "draftsvc")
        self.assertEqual(sts.spec.replicas, 2)
        _, hpa = dev.one("HorizontalPodAutoscaler", "verifysvc")
        self.assertEqual((hpa.spec.min_replicas, hpa.spec.max_replicas), (2, 2))
        for _, model in dev.workloads():
            for c in containers_of(model):
                self.assertNotIn("nvidia.com/gpu",
                                 (c.resources and c.resources.limits) or {})

    def test_flagfiles_parse_with_the_real_binaries(self):
        bin_dir = os.environ.get("DEPLOY_BIN_DIR")
        if not bin_dir:
            self.skipTest("DEPLOY_BIN_DIR not set (tools/deploy_test.sh sets it)")
        for where, overlay, _, model, c in self.service_containers():
            with self.subTest(**where):
                # Containers are named after their binary: //draftsvc:draftsvc.
                binary = os.path.join(bin_dir, c.name, c.name)
                self.assertTrue(os.access(binary, os.X_OK), f"no binary {binary}")
                with tempfile.TemporaryDirectory() as tmp:
                    args = [binary]
                    for arg in c.args or []:
                        if not arg.startswith("--flagfile="):
                            args.append(arg)
                            continue
                        local = []
                        for path in arg.partition("=")[2].split(","):
                            local.append(os.path.join(tmp, f"{len(args)}.{len(local)}"))
                            with open(local[-1], "w") as f:
                                f.write(overlay.flagfile_text(model, c, path))
                        args.append("--flagfile=" + ",".join(local))
                    # --version parses every flag, then exits before serving.
                    run = subprocess.run(args + ["--version"], capture_output=True,
                                         text=True, timeout=60)
                    self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv, verbosity=2)
