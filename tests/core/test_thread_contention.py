"""The thread policy against a real busy program and the real engine: while another process keeps
a core busy the engine computes on one thread and says so, the reply is the same token for token
(llama.cpp's sums do not depend on the thread count), and once the program ends the engine goes
back to every core. The busy program runs in a session of its own, as another application
would: under Linux's group scheduling that gives it a fair share against the engine's whole
group, which is what made two threads collapse (app/core/engine/threads.py).

The policy's rules on a scripted machine: test_threads.py."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core.engine.host import EngineHost
from app.core.engine.threads import BUSY_AT, QUIET_AT, CpuMeter, default_threads
from app.core.engine.types import (
    Finished,
    LoadSettings,
    SamplingSettings,
    TextDelta,
    ThreadsChanged,
)
from app.core.paths import sample_document

# every core, alone (`serial`): a core kept busy must be the test's own busy process
pytestmark = [
    pytest.mark.serial,
    pytest.mark.skipif(default_threads() < 2, reason="one core: no thread to give up"),
]

SETTLE_S = 1.5  # the engine's meter reports the last half second


@pytest.fixture(scope="module")
def host(model_path: Path) -> Iterator[EngineHost]:
    with EngineHost() as h:
        h.load(model_path, LoadSettings(n_ctx=2048))  # default threads: adaptive
        yield h


def reply(host: EngineHost, prompt: list[int]) -> tuple[str, int, list[ThreadsChanged]]:
    """The reply's text, llama.cpp's thread count at its end, and the changes on the way."""
    host.reset()  # the whole prompt is evaluated each time
    text, changes, threads = [], [], 0
    for ev in host.generate(prompt, max_tokens=16, sampling=SamplingSettings()):
        if isinstance(ev, TextDelta):
            text.append(ev.text)
        elif isinstance(ev, ThreadsChanged):
            changes.append(ev)
        elif isinstance(ev, Finished):
            threads = ev.stats.threads
    return "".join(text), threads, changes


def others_now() -> float:
    """What other programs use right now, measured here the way the engine measures it."""
    meter = CpuMeter()
    for _ in range(4):
        time.sleep(0.25)
        meter.tick()
    return meter.others()


def test_a_busy_program_costs_a_thread_and_changes_nothing_else(host: EngineHost) -> None:
    prompt = host.tokenize(sample_document().read_text(encoding="utf-8")[:3000])[:400]
    before, _, _ = reply(host, prompt)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        time.sleep(SETTLE_S)
        text, threads, changes = reply(host, prompt)
    finally:
        busy.kill()
        busy.wait()
    assert threads == 1, f"the engine kept {threads} threads beside a busy program"
    # the change is an event of the request (unless another program had taken the core before)
    for ch in changes:
        assert ch.after < ch.before and ch.cause in ("busy", "slow"), ch
        assert ch.reason and ch.others >= 0
        assert ch.describe() == f"{ch.before} → {ch.after} threads: {ch.reason}"
    assert text == before  # the same greedy reply on one thread as on all

    time.sleep(SETTLE_S)
    others = others_now()
    text, threads, changes = reply(host, prompt)
    assert text == before
    if others < QUIET_AT:  # the machine is quiet again: every core comes back
        assert threads == default_threads()
        assert any(c.cause == "quiet" and c.after > c.before for c in changes), changes
    elif others > BUSY_AT:  # something else keeps a core busy (a loaded CI machine)
        assert threads < default_threads()


def test_the_cli_reports_the_thread_count(model_path: Path, tmp_path: Path) -> None:
    from app.cli.main import main  # noqa: PLC0415

    prompt = tmp_path / "p.txt"
    prompt.write_text("Say hello.", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    argv = ["generate", "--model", str(model_path), "--prompt-file", str(prompt),
            "--max-tokens", "4", "--json", "--threads", "1", "--fixed-threads"]  # fmt: skip
    with out.open("w", encoding="utf-8") as fh, contextlib.redirect_stdout(fh):
        assert main(argv) == 0
    lines: list[dict[str, Any]] = [json.loads(ln) for ln in out.read_text().splitlines()]
    done = lines[-1]
    assert done["type"] == "done" and done["threads"] == 1
    assert not [ln for ln in lines if ln["type"] == "threads_changed"]  # fixed: never moves
