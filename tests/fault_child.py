"""``python -m tests.fault_child --fd N --flag PATH``: the engine child with a test's one-shot
fault installed, then the app's own child (app/core/engine/child.py) as it is.

The crash-isolation tests (tests/fault_injection.py) start engines from here: they set
``EngineHost.child_module`` to :data:`FAULT_CHILD`, and ``$CONTEXTLENS_ENGINE_FAULT`` to a JSON
file ``{"phase": ..., "signal": ..., "after": N}``. The child deletes that file as it reads it,
so the engine started after the crash is healthy. The app's code holds no fault: the fault is a
step hook (``app.core.engine.llama_base.StepHook``) that the engine calls before each step.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from app.core.engine import child
from app.core.engine.host import EngineHost

FAULT_CHILD = "tests.fault_child"  # what EngineHost.child_module is set to
FAULT_ENV = "CONTEXTLENS_ENGINE_FAULT"
FAULT_PHASES = ("load", "prompt", "generate", "save")
FAULT_SIGNALS = ("SIGKILL", "SIGSEGV", "SIGABRT")


class Fault:
    """A test's one-shot crash of this child: the real ``signal`` at step ``after`` (0: the first)
    of ``phase``, counted over the child's life.

    Steps: ``load`` — a line llama.cpp logs while it loads the model (about 2,000 a load);
    ``prompt`` — a batch of prompt tokens about to be decoded (``after`` batches are in the KV
    cache); ``generate`` — a token about to be sampled (``after`` tokens were generated, and the
    text so far was sent to the parent); ``save`` — a ``save_state`` call, once llama.cpp has
    written the state.
    """

    def __init__(self, phase: str, signal_name: str, after: int) -> None:
        if phase not in FAULT_PHASES or signal_name not in FAULT_SIGNALS or after < 0:
            raise ValueError(f"bad fault: {phase!r}, {signal_name!r}, {after!r}")
        self.phase, self.signal, self.after = phase, signal.Signals[signal_name], after
        self.steps = 0

    @classmethod
    def from_env(cls) -> Fault | None:
        path = os.environ.get(FAULT_ENV)
        if not path:
            return None
        try:
            with open(path, encoding="utf-8") as fh:
                spec = json.load(fh)
            os.unlink(path)
        except FileNotFoundError:  # spent by an earlier child
            return None
        return cls(spec["phase"], spec["signal"], int(spec.get("after", 0)))

    def due(self, phase: str) -> bool:
        """Count one step of ``phase``; True when the crash is due now."""
        if phase != self.phase:
            return False
        self.steps += 1
        return self.steps == self.after + 1

    def hook(self, phase: str, send_pending: Callable[[], None]) -> None:
        """The engine's step hook: at the step due, what the step holds back reaches the parent
        (the text so far), then the process dies."""
        if self.due(phase):
            send_pending()
            self.fire()

    def fire(self) -> NoReturn:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a planned crash leaves no core
        sys.stderr.flush()
        signal.raise_signal(self.signal)  # the exit status is the signal, as for a real crash
        os._exit(70)  # not reached


def crash(kind: str) -> None:
    """A native fault on request (``CrashingHost.crash``): what a bug inside llama.cpp does."""
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if kind == "segfault":
        ctypes.string_at(0)
    elif kind == "abort":
        os.abort()
    elif kind == "illegal-instruction":
        os.kill(os.getpid(), signal.SIGILL)
    raise ValueError(f"unknown crash kind {kind!r}")


class CrashingHost(EngineHost):
    """An engine host whose child (this module) also crashes on request; the app's own child
    answers only the engine API's operations (app/core/engine/api.py: CHILD_OPERATIONS)."""

    child_module = FAULT_CHILD

    def crash(self, kind: str) -> None:
        self._call("crash", "crashing on purpose", kind=kind)


def main() -> None:
    fault = Fault.from_env()
    child.main(step_hook=fault.hook if fault is not None else None,
               test_operations={"crash": crash})  # fmt: skip


if __name__ == "__main__":
    main()
