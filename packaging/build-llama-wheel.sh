#!/usr/bin/env bash
# Build llama-cpp-python from source once per (version, build flags) and print the wheel's path.
#
# Why a script of our own instead of a plain `pip install`: pip caches the wheel it built by
# version only, so a wheel built earlier with other flags (for example one that dies with SIGILL on
# CPUs that advertise AMX without the OS enabling it) would silently be reused. Here the cache key
# is the version *and* the CMake arguments, so changing the flags always rebuilds, and an unchanged
# set-up never does — not even from a fresh clone on the same machine.
#
# Environment:
#   PYTHON             interpreter that builds the wheel (default: python3)
#   LLAMA_CPP_VERSION  llama-cpp-python version (default below)
#   LLAMA_BUILD        "native" (default): kernels for the CPU this runs on (-march=native);
#                      "portable": a baseline instruction set that most laptops have, not this
#                      CPU's own: on x86-64 AVX2, FMA and F16C, no AVX-512, no AMX (make
#                      test-portable runs the model tier against it, to see what another CPU does)
#   LLAMA_CMAKE_ARGS   extra CMake arguments, e.g. "-DGGML_CUDA=on" or "-DGGML_METAL=on"
#   CONTEXTLENS_CACHE  where built wheels are kept (default: ${XDG_CACHE_HOME:-~/.cache}/contextlens)
set -euo pipefail

PYTHON="${PYTHON:-python3}"
VERSION="${LLAMA_CPP_VERSION:-0.3.36}"
CACHE="${CONTEXTLENS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/contextlens}"

cmake_args="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
case "$(uname -m)" in
  x86_64|amd64)
    # ggml builds with -march=native; on CPUs that advertise AMX while the OS (or hypervisor)
    # has not enabled it, its AMX kernels die with SIGILL at the first `tilezero`. Explicit -mno-*
    # flags win over -march=native in GCC and Clang, so the AMX code paths are never compiled.
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    cmake_args="$cmake_args -DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx'"
    ;;
esac
case "${LLAMA_BUILD:-native}" in
  native) ;;
  portable)
    # ggml's own switches for each instruction-set extension, with -march=native off; on other
    # architectures ggml's baseline for the architecture.
    cmake_args="$cmake_args -DGGML_NATIVE=OFF"
    case "$(uname -m)" in
      x86_64|amd64)
        cmake_args="$cmake_args -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
        cmake_args="$cmake_args -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF"
        ;;
    esac
    ;;
  *)
    echo "LLAMA_BUILD must be native or portable (got '${LLAMA_BUILD}')" >&2
    exit 2
    ;;
esac
cmake_args="$cmake_args ${LLAMA_CMAKE_ARGS:-}"

# macOS has neither sha256sum nor nproc.
if command -v sha256sum >/dev/null; then hash_cmd="sha256sum"; else hash_cmd="shasum -a 256"; fi
cores="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
key="$(printf '%s\n%s\n%s\n' "$VERSION" "$cmake_args" "$(uname -m)" | $hash_cmd | cut -c1-16)"
dest="$CACHE/wheels/llama-cpp-python-$VERSION-$key"
wheel="$(ls "$dest"/llama_cpp_python-*.whl 2>/dev/null | head -n1 || true)"
if [[ -n "$wheel" ]]; then
  echo "$wheel"
  exit 0
fi

mkdir -p "$CACHE/wheels"
work="$(mktemp -d "$CACHE/wheels/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "building llama-cpp-python $VERSION from source (several minutes on 2 cores)" >&2
echo "  CMAKE_ARGS=$cmake_args" >&2
CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$cores}" \
  "$PYTHON" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
  --wheel-dir "$work/out" "llama-cpp-python==$VERSION" >&2
printf '%s\n' "$cmake_args" > "$work/out/CMAKE_ARGS"
rm -rf "$dest"
mv "$work/out" "$dest"
ls "$dest"/llama_cpp_python-*.whl | head -n1
