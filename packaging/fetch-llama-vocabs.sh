#!/usr/bin/env bash
# Put llama.cpp's vocabulary-only test models (models/ggml-vocab-*.gguf of its tokenizer tests)
# into a folder, for the per-family differential token tests and bench_tokens.py.
#
# They ship inside llama-cpp-python's source distribution, the very llama.cpp the app runs, so
# the tests compare against the tokenizer they were written for. The sdist (about 77 MB) comes
# from the package registry once and is kept in the cache folder.
#
# Usage: fetch-llama-vocabs.sh DEST   (PYTHON, LLAMA_CPP_VERSION, CONTEXTLENS_CACHE as in
# build-llama-wheel.sh)
set -euo pipefail

dest="${1:?usage: fetch-llama-vocabs.sh DEST}"
PYTHON="${PYTHON:-python3}"
VERSION="${LLAMA_CPP_VERSION:-0.3.36}"
CACHE="${CONTEXTLENS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/contextlens}"
sdists="$CACHE/sdists"
sdist="$sdists/llama_cpp_python-$VERSION.tar.gz"

if [[ ! -f "$sdist" ]]; then
  mkdir -p "$sdists"
  echo "downloading llama-cpp-python $VERSION's source for its vocabulary test files" >&2
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check \
    --dest "$sdists" "llama-cpp-python==$VERSION" >&2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -xzf "$sdist" -C "$work" --wildcards "*/vendor/llama.cpp/models/ggml-vocab-*.gguf"
mkdir -p "$dest"
find "$work" -name 'ggml-vocab-*.gguf' -exec cp {} "$dest/" \;
count="$(find "$dest" -name 'ggml-vocab-*.gguf' | wc -l)"
if [[ "$count" -lt 10 ]]; then
  echo "fetch-llama-vocabs: only $count vocabulary files found in $sdist" >&2
  exit 1
fi
touch "$dest/.fetched"
