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
from pathlib import Path
from typing import Any

import pytest

from app.core.engine.host import EngineHost
from app.core.engine.threads import BUSY_AT, QUIET_AT, CpuMeter, default_threads
from app.core.engine.types import (
    Finished,
    SamplingSettings,
    TextDelta,
    ThreadsChanged,
)
from app.core.jobs.audit import Audit
from app.core.jobs.tasks import EvalProgress, JobFinished, resume, state_after, summarize
from app.core.paths import sample_document
from app.core.tokens import exact_counter, host_tokenize
from tests.engines import Hosts

# every core, alone (`serial`): a core kept busy must be the test's own busy process
pytestmark = [
    pytest.mark.serial,
    pytest.mark.skipif(default_threads() < 2, reason="one core: no thread to give up"),
]

SETTLE_S = 1.5  # the engine's meter reports the last half second


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


def test_a_busy_program_costs_a_thread_and_changes_nothing_else(make_host: Hosts) -> None:
    host = make_host(n_ctx=2048)  # default threads: adaptive
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
        assert ch.describe().startswith(f"{ch.before} → {ch.after} threads: {ch.reason} (")
        assert ch.describe().endswith(" cores)") or "was expected" in ch.describe()
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


def test_a_job_across_thread_changes_is_audited_and_resumed_as_itself(
    make_host: Hosts, model_path: Path
) -> None:
    """Threads change no number (app/core/engine/schedule.py): a job that starts beside a busy
    program (two threads, then one) and goes on after it ends (one, then two again) passes the
    audit, and its reply resumed from its saved KV state, on the quiet machine's thread count,
    is the job's own reply, audited too."""
    host = make_host(n_ctx=2048)  # default threads: adaptive
    text = sample_document().read_text(encoding="utf-8")[6000:9000]
    counter = exact_counter(model_path, host_tokenize(host))
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        time.sleep(SETTLE_S)
        audit = Audit(host, exact_counts=True)
        host.reset()
        result = None
        for ev in summarize(host, text, counter, strategy="head", n_ctx=1024, max_tokens=24,
                            audit=audit, sampling=SamplingSettings(stop_on_repetition=False)):
            if isinstance(ev, EvalProgress) and busy.poll() is None and ev.evaluated > 0:
                busy.kill()  # the prompt is under way: the rest of the job on a quiet machine
                busy.wait()
            elif isinstance(ev, JobFinished):
                result = ev.result
    finally:
        if busy.poll() is None:
            busy.kill()
            busy.wait()
    assert result is not None and result.error is None, result
    audit.raise_if_failed()
    causes = [change["cause"] for change in result.thread_changes]
    assert causes[:1] == ["busy"], result.thread_changes
    for change in result.thread_changes:  # each with the measurement behind it
        measured = "a decode took" if change["cause"] == "slow" else "other programs used"
        assert change["figure"].startswith(measured), change
    if others_now() < QUIET_AT:  # nothing else runs: the thread came back during the job
        assert "quiet" in causes, result.thread_changes
    state = state_after(host, result)
    assert state is not None
    host.reset()
    again = Audit(host, exact_counts=True)
    resumed = next(ev.result for ev in resume(
        host, state, len(result.final_prompt), task="summarize", strategy="head",
        max_tokens=24, sources=result.outputs[-1].source_spans, audit=again,
        sampling=SamplingSettings(stop_on_repetition=False)) if isinstance(ev, JobFinished))
    again.raise_if_failed()
    assert resumed.evaluated_tokens == 1
    assert resumed.text == result.text and resumed.completion_tokens == 24


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


def test_a_rolling_job_on_a_quiet_machine_changes_no_thread_without_cause(
    make_host: Hosts, model_path: Path
) -> None:
    """A rolling summary of a document ten times the context, with nothing else asked of the
    machine: no decode is taken for a collapse ("slow"), and any other change is one the meter
    measured (another program above BUSY_AT of a core, or under QUIET_AT again), with its
    figure in the record. On an idle machine that is no change at all; beside a light program
    (the suite on a shared machine) a burst it measured may still take a thread, and says so."""
    host = make_host(n_ctx=384)  # default threads: adaptive
    whole = sample_document().read_text(encoding="utf-8")
    start = whole.index("\n\n", 100_000) + 2
    text = whole[start : whole.index("\n\n", start + 17_000)]  # about ten contexts
    counter = exact_counter(model_path, host_tokenize(host))
    host.reset()
    result = next(ev.result for ev in summarize(
        host, text, counter, strategy="rolling", n_ctx=384, max_tokens=16,
        sampling=SamplingSettings(stop_on_repetition=False)) if isinstance(ev, JobFinished))
    assert result.error is None and result.evaluated_tokens > 10 * 300, result
    changes = result.thread_changes
    assert not [c for c in changes if c["cause"] == "slow"], changes
    for c in changes:
        assert c["figure"].startswith("other programs used"), c
        assert c["others"] >= BUSY_AT if c["cause"] == "busy" else c["others"] < QUIET_AT, c
    # so with no other program (others 0), no change at all: a busy one needs one measured,
    # and a quiet one follows a busy one
