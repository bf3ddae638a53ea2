"""contextlens-cli as the tests run it: its own ``main`` in this process by default, a real
process where the process itself is under test.

In this process the command costs what it does, not a new interpreter importing the app again
(about a second each, most of a short command's time); its engine child is a real process either
way. ``process=True`` runs ``python -m app.cli`` as a person does: signals, exit status through
the interpreter, what the child writes to the inherited stderr.
"""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

CLI = [sys.executable, "-m", "app.cli"]


def run(
    *args: str, timeout: float = 120, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """``timeout`` bounds a process; in this process the test's own timeout (pytest-timeout)
    bounds the command."""
    if process:
        return subprocess.run(
            [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    return run_here(*args)


def run_here(*args: str) -> subprocess.CompletedProcess[str]:
    """``main(args)`` with its stdout and stderr captured, as a process's would be: an exit
    through ``SystemExit`` (argparse) gives its status and message as the interpreter would."""
    from app.cli.main import main  # noqa: PLC0415 (a unit test that imports this runs no CLI)

    out, err = _Pipe(), _Pipe()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:  # sys.exit("message"): printed, status 1
                print(exc.code, file=sys.stderr)
                code = 1
    return subprocess.CompletedProcess([*CLI, *args], code, out.text(), err.text())


class _Pipe(io.TextIOWrapper):
    """A text stream with a byte buffer under it, as a pipe's ``sys.stdout`` has."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="replace", write_through=True)

    def text(self) -> str:
        self.flush()
        buffer = self.buffer
        assert isinstance(buffer, io.BytesIO)
        return buffer.getvalue().decode("utf-8", "replace")


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(("error:", "contextlens-cli")), proc.stderr
    assert "Traceback" not in proc.stderr
