"""Which backend llama.cpp runs on, as the app and the CLI report it."""

from __future__ import annotations

import json
import subprocess
import sys

import llama_cpp
import pytest

from app.core.engine.llama_engine import build_capabilities
from app.core.engine.types import EngineCapabilities, backends_of

# What llama_print_system_info writes for builds other than this machine's (llama.cpp 0.3.x).
CUDA = (
    "CUDA : ARCHS = 500,610,700,750,800,860,890 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | "
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | LLAMAFILE = 1 | "
)
METAL = "Metal : EMBED_LIBRARY = 1 | CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | ACCELERATE = 1 | "
VULKAN = "Vulkan : | CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | "


@pytest.mark.unit
@pytest.mark.parametrize(
    ("info", "names"),
    [(CUDA, ("CUDA", "CPU")), (METAL, ("Metal", "CPU")), (VULKAN, ("Vulkan", "CPU")), ("", ())],
)
def test_backend_names_are_read_from_the_system_info(info: str, names: tuple[str, ...]) -> None:
    assert backends_of(info) == names


@pytest.mark.unit
def test_a_gpu_build_says_so_and_a_cpu_build_says_cpu_only() -> None:
    assert EngineCapabilities("0.3.36", CUDA, True, 1).describe_backend() == (
        "CUDA + CPU (GPU offload available)"
    )
    assert EngineCapabilities("0.3.36", METAL, False, 1).describe_backend() == (
        "Metal + CPU (no GPU offload)"
    )
    assert EngineCapabilities("0.3.36", "CPU : AVX2 = 1 | ", False, 1).describe_backend() == (
        "CPU only"
    )


@pytest.mark.unit
def test_this_build_reports_its_cpu_backend_and_whether_it_can_offload() -> None:
    caps = build_capabilities(llama_cpp)
    assert "CPU" in caps.backends
    assert caps.gpu_offload_supported == bool(llama_cpp.llama_supports_gpu_offload())
    # A build without a GPU backend cannot offload, and the other way round.
    assert caps.gpu_offload_supported == any(n != "CPU" for n in caps.backends)


def test_the_backend_command_prints_the_same_in_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "backend", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    caps = build_capabilities(llama_cpp)
    assert data["backends"] == list(caps.backends)
    assert data["gpu_offload_supported"] == caps.gpu_offload_supported
    assert data["system_info"] == caps.system_info
