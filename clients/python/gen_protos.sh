#!/usr/bin/env bash
# Generates the lookahead.v1 Python modules (messages and gRPC stubs) from
# proto/ into clients/python/lookahead_client/proto/ (gitignored). Run it
# once after a checkout and after any change to proto/; running it again
# rewrites the same files.
#
#   clients/python/gen_protos.sh
#
# Uses the system protoc and grpc_python_plugin (Debian's protobuf-compiler
# and protobuf-compiler-grpc, installed by tools/setup.sh): the same
# compiler that generates the servers' C++ code.
set -euo pipefail

readonly CLIENT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly REPO_ROOT="$(cd "$CLIENT_DIR/../.." && pwd)"
readonly OUT_DIR="$CLIENT_DIR/lookahead_client/proto"
readonly PLUGIN="$(command -v grpc_python_plugin || true)"

if ! command -v protoc >/dev/null || [[ -z "$PLUGIN" ]]; then
  echo "gen_protos: needs protoc and grpc_python_plugin; run tools/setup.sh" >&2
  exit 1
fi

# Generate into a scratch directory and swap it in whole, so an interrupted
# run never leaves a half-written package behind.
tmp="$(mktemp -d "$CLIENT_DIR/.gen.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
protoc --proto_path="$REPO_ROOT" --plugin=protoc-gen-grpc_python="$PLUGIN" \
  --python_out="$tmp" --grpc_python_out="$tmp" \
  "$REPO_ROOT/proto/draft.proto" "$REPO_ROOT/proto/generation.proto"

# protoc names imports after the .proto paths ("from proto import
# draft_pb2"), which would claim a top-level package called `proto`. Make
# them relative so the modules live inside lookahead_client.proto. The
# descriptors keep their "proto/..." file names, as the servers' do.
sed -i 's/^from proto import /from . import /' "$tmp"/proto/*.py
echo '"""Generated from proto/ by gen_protos.sh. DO NOT EDIT."""' \
  >"$tmp/proto/__init__.py"

rm -rf "$OUT_DIR"
mv "$tmp/proto" "$OUT_DIR"
echo "gen_protos: wrote $(ls "$OUT_DIR" | tr '\n' ' ')into ${OUT_DIR#"$REPO_ROOT"/}"
