#!/usr/bin/env bash
# Builds llama.cpp for the benchmark's llama.cpp peer (bench/llamacpp_peer.py,
# bench/run.py --peer=llamacpp). Never run by tools/test.sh or CI.
#
#   tools/llamacpp_build.sh     # idempotent: a second run only prints the version
#
# The sources are the llama.cpp tree vendored in PyPI's llama-cpp-python
# sdist (vendor/llama.cpp), at a pinned version so that runs stay comparable:
# PyPI is the only source this machine may reach. CMake (Debian's, installed
# if missing) builds it for this CPU (GGML_NATIVE), statically, without
# curl/OpenSSL, the server or its web UI. Installed into
# ~/.cache/lookahead/llama.cpp/<llama-cpp-python version>/:
#   bin/           llama-bench, llama-completion (or, in versions before it
#                  existed, llama-cli), llama-lookup, llama-speculative and
#                  llama-speculative-simple when the version has them,
#                  llama-quantize
#   build-info.txt written last: its presence means the install is complete
#
# No model is needed or made here: the peer runs whichever GGUF verifysvc
# serves (bench/run.py --model=NAME, tools/models.sh), and makes an F32 copy
# of it in models/ only when asked or when the file is small
# (bench/run.py --llamacpp_f32; a 1.5B model in F32 is 6 GB). Installs
# made before that hold models/SmolLM2-135M-Instruct.F32.gguf, which
# nothing reads any more.
#
# LLAMA_CPP_PYTHON_VERSION overrides the pin (bench/llamacpp_peer.py passes
# its VERSION, the same: bump both together); JOBS the parallel compile jobs
# (default: all CPUs; the build took 10 minutes on 2 shared cores).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
readonly CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/lookahead"
readonly DEST="$CACHE/llama.cpp/$VERSION"
readonly JOBS="${JOBS:-$(nproc)}"
# What an install holds; an install of an older format is rebuilt (format 2
# added the speculative decoding examples).
readonly FORMAT=2
readonly CMAKE_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DGGML_NATIVE=ON
  -DBUILD_SHARED_LIBS=OFF
  # Offline: no downloads at build or run time.
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=ON  # llama-lookup, llama-speculative
  # An sdist has no git history: name the source in the binaries' --version.
  -DLLAMA_BUILD_NUMBER=0 "-DLLAMA_BUILD_COMMIT=llama-cpp-python-$VERSION"
)

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

# llama.cpp's own version (LLAMA_VERSION_* in its CMakeLists.txt; older
# trees have none) and ggml's.
source_version() {
  local src=$1 llama ggml
  llama=$(sed -n 's/^set(LLAMA_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))$/\2/p' \
    "$src/CMakeLists.txt" | paste -sd.)
  ggml=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))$/\2/p' \
    "$src/ggml/CMakeLists.txt" 2>/dev/null | paste -sd.)
  echo "llama.cpp ${llama:-unknown} (ggml ${ggml:-unknown})"
}

if [[ -f "$DEST/build-info.txt" ]]; then
  if grep -qx "format: $FORMAT" "$DEST/build-info.txt"; then
    echo "llamacpp_build: $(head -1 "$DEST/build-info.txt") present in $DEST"
    exit 0
  fi
  echo "llamacpp_build: $DEST is an older install (not format $FORMAT): rebuilding"
fi

if ! command -v cmake >/dev/null; then
  echo "llamacpp_build: installing cmake (Debian)"
  as_root apt-get install -y -q cmake
fi

start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "llamacpp_build: fetching the llama-cpp-python==$VERSION sdist from PyPI"
python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$tmp" \
  "llama-cpp-python==$VERSION"
tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
src=$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)
[[ -f "$src/CMakeLists.txt" ]] || {
  echo "llamacpp_build: no vendor/llama.cpp in the llama-cpp-python $VERSION sdist" >&2
  exit 1
}
version=$(source_version "$src")
echo "llamacpp_build: $version, configuring"
cmake -S "$src" -B "$tmp/build" "${CMAKE_FLAGS[@]}" >"$tmp/configure.log" 2>&1 || {
  tail -40 "$tmp/configure.log" >&2
  exit 1
}

# The targets this version has: the classic CLI became llama-completion
# when llama-cli turned into a chat front end over the server.
available=$(cmake --build "$tmp/build" --target help | sed -n 's/^\.\.\. //p')
has() { grep -qx "$1" <<<"$available"; }
targets=(llama-bench llama-quantize)
if has llama-completion; then
  targets+=(llama-completion)
elif has llama-cli; then
  targets+=(llama-cli)
else
  echo "llamacpp_build: neither llama-completion nor llama-cli in $version" >&2
  exit 1
fi
for t in llama-lookup llama-speculative llama-speculative-simple; do
  has "$t" && targets+=("$t")
done
for t in llama-bench llama-quantize; do
  has "$t" || { echo "llamacpp_build: no $t target in $version" >&2; exit 1; }
done

echo "llamacpp_build: building ${targets[*]} with $JOBS jobs"
cmake --build "$tmp/build" --config Release -j "$JOBS" --target "${targets[@]}" \
  >"$tmp/build.log" 2>&1 || {
  tail -40 "$tmp/build.log" >&2
  exit 1
}

rm -rf "$DEST"
mkdir -p "$DEST/bin"
for t in "${targets[@]}"; do
  install -m 755 "$tmp/build/bin/$t" "$DEST/bin/$t"
done

seconds=$(($(date +%s) - start))
{
  echo "$version, vendored in llama-cpp-python $VERSION"
  echo "binaries: ${targets[*]}"
  echo "format: $FORMAT"
  echo "cmake: ${CMAKE_FLAGS[*]}"
  echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  echo "build seconds: $seconds (fetch, configure, $JOBS jobs)"
} >"$tmp/build-info.txt"
mv "$tmp/build-info.txt" "$DEST/build-info.txt"
echo "llamacpp_build: $version (llama-cpp-python $VERSION) in $DEST, ${seconds} s"
