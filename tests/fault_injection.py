"""Arming the engine child's one-shot fault (tests/fault_child.py, ``Fault``) from a test,
seeded random draws of where it strikes, and the tally the closing summary prints.

A fault is a JSON file named by ``$CONTEXTLENS_ENGINE_FAULT``, read by engine children started
from tests/fault_child.py (``EngineHost.child_module``): the next one started reads it, deletes
it, and kills itself with the real signal at that step of that phase. Engines started afterwards
(the restart after the crash) find no file and are healthy.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import random
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.core.engine.host import EngineHost
from tests.fault_child import FAULT_CHILD, FAULT_ENV, FAULT_PHASES, FAULT_SIGNALS

# Where each phase can strike in the jobs of these tests (``after`` is drawn below the bound):
# load — llama.cpp logs about 2,100 lines while it loads the default model; prompt — the prompt
# of the tests' job is 7 or 8 batches of 32 tokens; generate — at least 3 tokens, so there is
# text to keep, and fewer than the job's 16; save — the crash comes in one of the first 3 saves.
AFTER_RANGE = {"load": (0, 1999), "prompt": (0, 6), "generate": (3, 15), "save": (0, 2)}


@dataclass(frozen=True)
class Draw:
    phase: str
    signal: str
    after: int

    @property
    def signum(self) -> int:
        return int(signal.Signals[self.signal])

    def __str__(self) -> str:
        return f"{self.phase}/{self.signal}/after={self.after}"

    def within(self, reply_tokens: int) -> Draw:
        """This draw, moved where a healthy reply of ``reply_tokens`` tokens still reaches it:
        how long the reply is comes from this machine's kernels, and a generate fault strikes
        as a token is about to be sampled, so after at most ``reply_tokens - 1`` of them (a reply
        its length ended samples no more)."""
        if self.phase != "generate":
            return self
        return dataclasses.replace(self, after=max(1, min(self.after, reply_tokens - 1)))


def draw(rng: random.Random, phase: str | None = None, sig: str | None = None) -> Draw:
    phase = phase or rng.choice(FAULT_PHASES)
    sig = sig or rng.choice(FAULT_SIGNALS)
    return Draw(phase, sig, rng.randint(*AFTER_RANGE[phase]))


def draws(seed: int, n: int) -> list[Draw]:
    """``n`` random faults, the same ones for the same seed."""
    rng = random.Random(seed)
    return [draw(rng) for _ in range(n)]


def matrix(seed: int) -> list[Draw]:
    """Every phase with every signal, each at a seeded random step."""
    rng = random.Random(seed)
    return [draw(rng, phase, sig) for phase in FAULT_PHASES for sig in FAULT_SIGNALS]


def arm(monkeypatch: pytest.MonkeyPatch, folder: Path, fault: Draw) -> Path:
    """Write the fault file, point the environment at it and start engines from the test's
    child: the next engine started takes it."""
    print(f"fault drawn: {fault}")  # shown with -s, and with the failure of the test
    path = folder / f"fault-{fault.phase}-{fault.signal}-{fault.after}.json"
    path.write_text(json.dumps({"phase": fault.phase, "signal": fault.signal,
                                "after": fault.after}))  # fmt: skip
    monkeypatch.setenv(FAULT_ENV, str(path))
    monkeypatch.setattr(EngineHost, "child_module", FAULT_CHILD)
    return path


def check_crash_sentence(message: str, fault: Draw) -> None:
    """The error a person sees: one line, one sentence, naming the signal and what to do."""
    assert message.startswith("the engine process died"), message
    assert fault.signal in message, message
    assert "\n" not in message and len(message) < 400, message
    assert message.count(". ") == 0, message  # one sentence
    if fault.phase != "load":
        assert message.endswith("load the model again to start a new engine"), message


class FaultTally:
    """Faults injected (the child seen dying of the drawn signal), by phase and signal."""

    def __init__(self) -> None:
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def add(self, fault: Draw) -> None:
        self.counts[(fault.phase, fault.signal)] += 1

    def report(self) -> str:
        total = sum(self.counts.values())
        lines = [f"{total} engine faults injected"]
        for phase in FAULT_PHASES:
            row = ", ".join(f"{self.counts[(phase, s)]} {s}" for s in FAULT_SIGNALS
                            if self.counts[(phase, s)])  # fmt: skip
            if row:
                lines.append(f"  {phase:<9}{row}")
        return "\n".join(lines)


FAULT_TALLY_KEY = pytest.StashKey[FaultTally]()


def tally_of(config: pytest.Config) -> FaultTally:
    return config.stash.setdefault(FAULT_TALLY_KEY, FaultTally())
