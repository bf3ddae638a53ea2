"""`make gpu-check` without a GPU: one sentence, a non-zero exit, nothing built or loaded.

The check itself needs an NVIDIA GPU (packaging/gpu-check.sh builds llama.cpp with CUDA and
packaging/gpu_check.py runs both models fully offloaded); these machines have none, so what is
tested here is that it says so at once, both when nvidia-smi is missing and when it lists no GPU,
and that the checker refuses likewise when NVML finds none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.paths import project_root
from app.core.telemetry import gpu_state

SCRIPT = project_root() / "packaging" / "gpu-check.sh"
CHECKER = project_root() / "packaging" / "gpu_check.py"
NO_GPU = "gpu-check: no NVIDIA GPU found"


def run_script(tmp_path: Path, smi: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NVIDIA_SMI": smi, "GPU_VENV": str(tmp_path / "venv-gpu")}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env,
                          timeout=60, check=False)  # fmt: skip


def test_without_nvidia_smi_it_says_so_and_builds_nothing(tmp_path: Path) -> None:
    done = run_script(tmp_path, str(tmp_path / "no-such-nvidia-smi"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"{NO_GPU} ({tmp_path / 'no-such-nvidia-smi'} is not installed); the GPU check needs "
        "one, and nothing was built"
    ]
    assert not (tmp_path / "venv-gpu").exists()


def test_an_nvidia_smi_that_lists_no_gpu_is_no_gpu(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"  # what the real one prints on a machine without a GPU
    smi.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    smi.chmod(0o755)
    done = run_script(tmp_path, str(smi))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"{NO_GPU} ({smi} lists none); the GPU check needs one, and nothing was built"
    ]
    assert not (tmp_path / "venv-gpu").exists()


@pytest.mark.skipif(gpu_state().available, reason="this machine has an NVIDIA GPU")
def test_the_checker_refuses_before_loading_anything() -> None:
    done = subprocess.run([sys.executable, str(CHECKER)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{NO_GPU} (") and line.endswith("); the GPU check needs one")
