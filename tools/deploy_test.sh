#!/usr/bin/env bash
# Checks the Kubernetes deployment without a cluster: renders deploy/base and
# deploy/overlays/{dev,gpu} with `kubectl kustomize`, then runs
# deploy/policy_test.py on the result. It parses every object into its
# Kubernetes API model and checks the policy (resources, probes, pinned
# images, non-root pods, draftsvc's shards, volumes and NetworkPolicy,
# verifysvc's Services, Secrets, GPUs), lets the real draftsvc and verifysvc
# binaries parse the flagfiles, and runs them with the certificates and keys
# deploy/make_secrets.sh makes (deploy/secrets_test.py).
#
#   tools/deploy_test.sh                  # builds both binaries with Bazel
#   tools/deploy_test.sh --no-binaries    # manifests only
#
# Needs kubectl and python3-kubernetes (tools/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in kubectl /usr/bin/python3; do
  command -v "$tool" >/dev/null || {
    echo "deploy_test: $tool not found: run tools/setup.sh" >&2
    exit 1
  }
done

rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT
for dir in deploy/base deploy/overlays/dev deploy/overlays/gpu; do
  overlay=$(basename "$dir")
  if ! kubectl kustomize "$dir" >"$rendered/$overlay.yaml" 2>"$rendered/$overlay.err"; then
    echo "deploy_test: kubectl kustomize $dir failed:" >&2
    cat "$rendered/$overlay.err" >&2
    exit 1
  fi
  # The overlays keep bases: and patchesStrategicMerge: so that Debian's
  # kubectl 1.20 (kustomize v2.0.3) renders them; kustomize v5 warns about
  # exactly those two. Anything else it says is shown.
  grep -vE "^# Warning: '(bases|patchesStrategicMerge)' is deprecated" \
    "$rendered/$overlay.err" >&2 || true
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
