#!/usr/bin/env bash
# Checks the Kubernetes deployment without a cluster: renders deploy/base and
# deploy/overlays/{dev,gpu} with `kubectl kustomize` (which must print no
# warning, deprecations included), then runs deploy/policy_test.py on the
# result. It parses every object into its Kubernetes API model and checks the
# policy (resources, probes, pinned images, non-root pods, draftsvc's shards,
# volumes and NetworkPolicy, verifysvc's Services, Secrets, GPUs), lets the
# real draftsvc and verifysvc binaries parse the flagfiles, and runs them with
# the certificates and keys deploy/make_secrets.sh makes
# (deploy/secrets_test.py).
#
#   tools/deploy_test.sh                  # builds both binaries with Bazel
#   tools/deploy_test.sh --no-binaries    # manifests only
#
# Needs kubectl and python3-kubernetes (tools/setup.sh installs them). The
# overlays are written for kubectl 1.21+ (kustomize v4+). Debian bookworm's
# kubectl 1.20 (kustomize v2.0.3) knows neither directories under
# `resources:` nor `patches:`: with it the test renders a copy translated to
# `bases:` and `patchesStrategicMerge:` and skips the no-warning check.
# KUBECTL=path picks another kubectl.
set -euo pipefail
cd "$(dirname "$0")/.."

kubectl=${KUBECTL:-kubectl}
for tool in "$kubectl" /usr/bin/python3; do
  command -v "$tool" >/dev/null || {
    echo "deploy_test: $tool not found: run tools/setup.sh" >&2
    exit 1
  }
done

rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT
kubectl_minor=$("$kubectl" version --client -o json | /usr/bin/python3 -c '
import json, re, sys
print(re.match(r"\d+", json.load(sys.stdin)["clientVersion"]["minor"]).group())')
src=deploy
if ((kubectl_minor < 21)); then
  echo "deploy_test: kubectl 1.$kubectl_minor (kustomize v2): rendering a copy" \
    "with bases: and patchesStrategicMerge:"
  src="$rendered/deploy"
  mkdir "$src"
  cp -r deploy/base deploy/monitoring deploy/overlays "$src"
  /usr/bin/python3 - "$src"/overlays/*/kustomization.yaml <<'EOF'
import pathlib, sys, yaml
for path in map(pathlib.Path, sys.argv[1:]):
    k = yaml.safe_load(path.read_text())
    entries = k.pop("resources", [])
    k["bases"] = [e for e in entries if (path.parent / e).is_dir()]
    k["resources"] = [e for e in entries if not (path.parent / e).is_dir()]
    patches = k.pop("patches", [])
    if any(set(p) != {"path"} for p in patches):
        sys.exit(f"deploy_test: {path}: only `patches: - path:` translates")
    k["patchesStrategicMerge"] = [p["path"] for p in patches]
    path.write_text(yaml.safe_dump({key: v for key, v in k.items() if v}))
EOF
fi
for dir in base overlays/dev overlays/gpu; do
  overlay=$(basename "$dir")
  if ! "$kubectl" kustomize "$src/$dir" >"$rendered/$overlay.yaml" 2>"$rendered/$overlay.err"; then
    echo "deploy_test: kubectl kustomize deploy/$dir failed:" >&2
    cat "$rendered/$overlay.err" >&2
    exit 1
  fi
  # kustomize v5 prints deprecation warnings on stderr; the kustomizations
  # use no deprecated field, so anything printed there fails the test.
  if [[ -s "$rendered/$overlay.err" ]]; then
    cat "$rendered/$overlay.err" >&2
    if [[ "$src" == deploy ]]; then
      echo "deploy_test: kubectl kustomize deploy/$dir printed warnings" >&2
      exit 1
    fi
  fi
  echo "deploy_test: rendered $overlay: $(grep -c '^kind:' "$rendered/$overlay.yaml") objects"
done

bin_dir=""
if [[ "${1:-}" != "--no-binaries" ]]; then
  bazel build //draftsvc:draftsvc //verifysvc:verifysvc
  bin_dir="$PWD/.bazel/bin"
fi

DEPLOY_RENDERED_DIR="$rendered" DEPLOY_BIN_DIR="$bin_dir" \
  /usr/bin/python3 deploy/policy_test.py
# The Secrets of deploy/make_secrets.sh against the real binaries: mutual TLS
# to a shard by its pod name, the probes' certificates, verifysvc's names.
if [[ -n "$bin_dir" ]]; then
  DEPLOY_BIN_DIR="$bin_dir" /usr/bin/python3 deploy/secrets_test.py
fi
