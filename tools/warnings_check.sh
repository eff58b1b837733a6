#!/usr/bin/env bash
# Fails iff compiling our C++ sources, as the build is configured (.bazelrc),
# prints a warning; prints each one under its source file.
#
# A warm `bazel build` shows only the warnings of what it recompiles: Bazel
# replays none from cached actions. So this asks Bazel for the command line
# of every C++ compile action of the targets,
#
#   bazel aquery 'mnemonic("CppCompile", //...)' --output=jsonproto
#
# and runs each again, in the layout of the execution root (`bazel info
# execution_root`), with its object file and dependency file sent to
# /dev/null: the build's outputs stay as they are. Each compiles with the
# build's own flags, -O2 included, so the warnings that need code generation
# (-Wmaybe-uninitialized after inlining an intrinsic, say) show too. A
# warning whose line lies in a system header but which our code's inlining
# causes counts as ours.
#
#   tools/warnings_check.sh                  # every target: //...
#   tools/warnings_check.sh //kernels/...    # some targets
#   JOBS=1 tools/warnings_check.sh           # compiles at a time (default 2)
#
# Builds the targets first (for the generated proto headers); a source that
# does not compile counts as a failure. //... is ~225 compiles, ~17 minutes
# on 2 cores: run it by hand before a change that touches many files.
# tools/test.sh checks //kernels/... (25 compiles, about a minute), where
# intrinsics compiled with -O3 warn after inlining. Not covered: link
# actions, the nvcc genrules of kernels/cuda, and the CUDA build
# (tools/cuda_build.sh, its own output base).
set -euo pipefail
cd "$(dirname "$0")/.."

(($# > 0)) || set -- //...
bazel build --keep_going "$@" ||
  echo "warnings_check: the build failed; compiling each source anyway" >&2
# The compiles run in a copy of the execution root's layout: Bazel replants
# the real one's symlinks at each build (only the top-level folders that
# build needs), so another command in the workspace would pull sources away
# under us.
execroot=$(bazel info execution_root)
output_base=$(bazel info output_base)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for entry in *; do
  [[ "$entry" == bazel-* ]] || ln -s "$PWD/$entry" "$work/$entry"
done
ln -s "$execroot/bazel-out" "$work/bazel-out"
ln -s "$output_base/external" "$work/external"
actions="$work/actions.json"
targets=$(printf ' + %s' "$@")
bazel aquery "mnemonic(\"CppCompile\", ${targets:3})" --output=jsonproto \
  >"$actions"

/usr/bin/python3 - "$actions" "$work" "${JOBS:-2}" <<'EOF'
import concurrent.futures
import json
import subprocess
import sys

actions_path, root, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])


def Command(arguments):
    """The compile command line with -o and -MF sent to /dev/null."""
    command = []
    skip = False
    for arg in arguments:
        if skip:
            skip = False
        elif arg == "-MD":
            pass
        elif arg == "-MF":
            skip = True
        elif arg == "-o":
            command += ["-o", "/dev/null"]
            skip = True
        else:
            command.append(arg)
    return command


def Compile(arguments):
    source = arguments[arguments.index("-c") + 1]
    run = subprocess.run(Command(arguments), cwd=root, capture_output=True,
                         text=True)
    return source, run.returncode, run.stdout + run.stderr


actions = json.load(open(actions_path)).get("actions", [])
warned = failed = 0
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    for source, code, output in pool.map(
            Compile, [a["arguments"] for a in actions]):
        if code != 0:
            failed += 1
            print(f"=== {source}: compile failed\n{output}", flush=True)
        elif "warning:" in output:
            warned += 1
            print(f"=== {source}: warnings\n{output}", flush=True)
print(f"warnings_check: {len(actions)} compiles, {warned} with warnings, "
      f"{failed} failed")
sys.exit(1 if warned or failed else 0)
EOF
