"""contextlens-cli as the tests start it: a real process, as a user runs it."""

from __future__ import annotations

import subprocess
import sys

CLI = [sys.executable, "-m", "app.cli"]


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(("error:", "contextlens-cli")), proc.stderr
    assert "Traceback" not in proc.stderr
