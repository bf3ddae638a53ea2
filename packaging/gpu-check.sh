#!/usr/bin/env bash
# The GPU check (`make gpu-check`; not part of `make test`): on a machine with an NVIDIA GPU,
# build llama-cpp-python with CUDA (packaging/build-llama-wheel.sh with LLAMA_CMAKE_ARGS
# -DGGML_CUDA=on, cached under its own key, so the CPU build of .venv is untouched) into a venv of
# its own, then run packaging/gpu_check.py there: both test models with every layer offloaded,
# the backend line, the VRAM gauge (NVML), the KV cache on the GPU and one job with the audit,
# in one report.
#
# Without an NVIDIA GPU it says so in one sentence and exits 2 before building anything.
#
# Environment:
#   GPU_VENV          the venv to build (default: .venv-gpu)
#   NVIDIA_SMI        the nvidia-smi to ask whether there is a GPU (default: the one on PATH)
#   LLAMA_CMAKE_ARGS  more CMake arguments for the CUDA build (e.g. -DCMAKE_CUDA_ARCHITECTURES=90)
#   PYTHON            the interpreter that makes the venv (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."

no_gpu() {
  echo "gpu-check: no NVIDIA GPU found ($1); the GPU check needs one, and nothing was built" >&2
  exit 2
}

smi="${NVIDIA_SMI:-nvidia-smi}"
command -v "$smi" >/dev/null 2>&1 || no_gpu "$smi is not installed"
gpus="$("$smi" -L 2>/dev/null || true)"
[[ "$gpus" == GPU\ * ]] || no_gpu "$smi lists none"
echo "gpu-check: $(printf '%s\n' "$gpus" | head -n1)" >&2

if ! command -v nvcc >/dev/null 2>&1; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  else
    echo "gpu-check: no CUDA compiler (nvcc) found: install the CUDA toolkit to build llama.cpp" \
         "with CUDA" >&2
    exit 3
  fi
fi

venv="${GPU_VENV:-.venv-gpu}"
if [[ ! -x "$venv/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
"$venv/bin/python" -m pip install --quiet -e '.[gpu]'
echo "gpu-check: building llama-cpp-python with CUDA (the first time takes a while)" >&2
wheel="$(PYTHON="$venv/bin/python" LLAMA_CMAKE_ARGS="-DGGML_CUDA=on ${LLAMA_CMAKE_ARGS:-}" \
  bash packaging/build-llama-wheel.sh)"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheel"

for name in smollm2-135m gemma-3-270m; do  # verified in place: no download when they are there
  "$venv/bin/contextlens-cli" fetch-model "$name" >/dev/null
done
exec "$venv/bin/python" packaging/gpu_check.py "$@"
