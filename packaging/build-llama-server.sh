#!/usr/bin/env bash
# Build llama.cpp's own HTTP server, llama-server, from the llama.cpp that llama-cpp-python vendors,
# once per (version, build flags, architecture), and print the binary's path. `make setup` runs it
# (and keeps the path in .venv/.llama-server): the tests run against it (tests/core/
# test_llama_server.py, the pool's tests with several servers, the gateway's), and so do the
# remote benchmarks (bench_remote.py, bench_pool.py). The build is cached outside the checkout,
# like the wheel, so a second checkout on the same machine builds nothing: this script then prints
# the path at once. About 5 to 8 minutes on 2 cores.
#
# Environment: PYTHON, LLAMA_CPP_VERSION, LLAMA_CMAKE_ARGS and CONTEXTLENS_CACHE as for
# build-llama-wheel.sh (the same CPU-safe flags: no AMX on x86-64).
set -euo pipefail

PYTHON="${PYTHON:-python3}"
VERSION="${LLAMA_CPP_VERSION:-0.3.36}"
CACHE="${CONTEXTLENS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/contextlens}"

flags=""
case "$(uname -m)" in
  x86_64|amd64) flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
esac
if command -v sha256sum >/dev/null; then hash_cmd="sha256sum"; else hash_cmd="shasum -a 256"; fi
cores="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
key="$(printf '%s\n%s\n%s\n%s\n' "$VERSION" "$flags" "${LLAMA_CMAKE_ARGS:-}" "$(uname -m)" \
  | $hash_cmd | cut -c1-16)"
dest="$CACHE/llama-server/$VERSION-$key"
if [[ -x "$dest/bin/llama-server" ]]; then
  echo "$dest/bin/llama-server"
  exit 0
fi

mkdir -p "$CACHE/llama-server"
work="$(mktemp -d "$CACHE/llama-server/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "building llama-server from llama-cpp-python $VERSION's llama.cpp (several minutes)" >&2
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: --dest "$work" \
  "llama-cpp-python==$VERSION" >&2
tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
# shellcheck disable=SC2086 # LLAMA_CMAKE_ARGS is a list of arguments
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" ${LLAMA_CMAKE_ARGS:-} >&2
cmake --build "$work/build" --target llama-server -j "$cores" >&2
mkdir -p "$work/out/bin"
cp "$work/build/bin/llama-server" "$work/out/bin/"
rm -rf "$dest"
mv "$work/out" "$dest"
echo "$dest/bin/llama-server"
