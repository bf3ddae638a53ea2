"""Another program that keeps one core busy, for the benchmarks that measure a busy machine.

It runs in a session of its own, as another application would: under Linux's group scheduling
(autogroups, a desktop's per-app cgroups) it then gets a fair share against ContextLens's whole
group, which is what made llama.cpp's threads collapse (app/core/engine/threads.py).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator


@contextlib.contextmanager
def busy_core(lead_s: float = 1.0) -> Iterator[None]:
    """A busy loop from ``lead_s`` before the block (running before the command starts, as
    another application would be) to its end."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        time.sleep(lead_s)
        yield
    finally:
        proc.kill()
        proc.wait()
