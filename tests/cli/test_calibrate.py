"""`contextlens-cli calibrate`: measures once, then answers from the cache; bad input exits 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK
from app.core.calibrate import GEN_SHARE, PROMPT_SHARE

CLI = [sys.executable, "-m", "app.cli", "calibrate"]


def _calibrate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTEXTLENS_CACHE": str(tmp_path / "cache")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, env=env,
                          check=False)  # fmt: skip


def test_calibrate_measures_once_then_answers_from_the_cache(
    tmp_path: Path, model_path: Path
) -> None:
    first = _calibrate(tmp_path, "--n-ctx", "512", "--json")
    assert first.returncode == EXIT_OK, first.stderr
    measured = json.loads(first.stdout)
    assert measured["cached"] is False and len(measured["trials"]) >= 4
    best = measured["best"]
    fastest = min(measured["trials"], key=lambda t: PROMPT_SHARE / t["prompt_tokens_per_s"]
                  + GEN_SHARE / t["gen_tokens_per_s"])  # fmt: skip
    assert fastest["settings"] == best
    assert "calibrating: 1/" in first.stderr  # progress
    second = _calibrate(tmp_path, "--n-ctx", "512", "--json")
    assert second.returncode == EXIT_OK, second.stderr
    again = json.loads(second.stdout)
    assert again["cached"] is True and again["best"] == best
    table = _calibrate(tmp_path, "--n-ctx", "512")
    assert "<- chosen" in table.stdout and "cached from an earlier calibration" in table.stderr


def test_calibrate_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    for args in (["--model", str(tmp_path / "missing.gguf")], ["--n-ctx", "4"]):
        proc = _calibrate(tmp_path, *args)
        assert proc.returncode == EXIT_BAD_INPUT
        assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: ")
