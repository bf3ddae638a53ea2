"""The suite's three tiers, chosen with ``-m``: what each test needs decides where it runs.

- ``unit``: no model, no Qt, no subprocess. Pure logic against scripted parts (a fake engine on
  the engine API, a real SQLite file): ``make check`` runs it first, in under two minutes.
- ``model``: the real llama.cpp with the real test models, engine children, CLI processes,
  servers.
- ``window``: the Qt window (offscreen, and the real-display test on Xvfb).

A test is ``unit`` only when it says so (``pytestmark = pytest.mark.unit`` in its module, or the
mark on the test); otherwise tests under ``tests/ui`` are ``window`` and the rest ``model``. A
``unit`` test is held to it while it runs: starting a process or loading llama.cpp or Qt fails
it with a sentence that says which tier it belongs in, so the fast tier stays fast.

``slow`` tests are deselected (never collected as skips) unless ``SLOW=1``.

``make test`` runs the model and window tiers on pytest-xdist workers, each pinned to a core of
its own (:func:`pin_worker`), then the ``serial`` tests alone with every core: those that count
threads, keep a core busy on purpose, or evaluate a prompt long enough on two threads that two
of them sharing one core would take minutes.
"""

from __future__ import annotations

import importlib.abc
import multiprocessing.process
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "model", "window")
_TALLY: Counter[tuple[str, str]] = Counter()  # (tier, outcome) -> tests, for the summary
_MODULE_S: Counter[str] = Counter()  # test module -> seconds of set-up, call and tear-down
# what a unit test must not import: the engine's native library and Qt
HEAVY = ("llama_cpp", "PySide6", "shiboken6", "pyqtgraph")


class TierError(AssertionError):
    """A ``unit`` test reached for something only the other tiers may use."""


def pin_worker() -> None:
    """Under pytest-xdist, run this worker, and every process it starts, on one core of its
    own: llama.cpp then uses one thread per worker (app/core/engine/threads.py reads the
    affinity) instead of two workers' threads spinning against each other on every core."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[int(worker[2:]) % len(cpus)]})


def tier_of(item: pytest.Item) -> str:
    for name in TIERS:
        if item.get_closest_marker(name) is not None:
            return name
    if "ui" in Path(str(item.path)).parts:
        return "window"
    # TIER_PROBE=1 .venv/bin/pytest -m unit -rA tests/core: every test outside tests/ui held to
    # the unit tier, to find the ones that could be marked so
    return "unit" if os.environ.get("TIER_PROBE") == "1" else "model"


def assign(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier (before ``-m`` selects) and deselect ``slow`` ones."""
    for item in items:
        tier = tier_of(item)
        if item.get_closest_marker(tier) is None:
            item.add_marker(tier)
    if os.environ.get("SLOW") == "1":
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def ignored(path: Path, config: pytest.Config) -> bool | None:
    """True for tests/ui and each test module with no unit test when only the unit tier is
    asked for (``-m unit``): a unit test says so in its module's text (``pytest.mark.unit``)."""
    if (config.option.markexpr or "").strip() != "unit" or os.environ.get("TIER_PROBE") == "1":
        return None
    if path.is_dir():
        return path.name == "ui" or None  # the window's tests need Qt, by definition
    if path.suffix != ".py" or not path.name.startswith("test_"):
        return None
    return "pytest.mark.unit" not in path.read_text(encoding="utf-8")


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> None:
        if name.partition(".")[0] in HEAVY:
            raise TierError(f"a unit test imported {name}: mark the test `model` or `window`")


def _refuse_process(*_args: object, **_kwargs: object) -> None:
    raise TierError("a unit test started a process: mark the test `model` (tests/tiers.py)")


def _refuse_model(*_args: object, **_kwargs: object) -> None:
    raise TierError("a unit test loaded a model: mark the test `model` (tests/tiers.py)")


@contextmanager
def held_to_unit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No process, no model loaded and no new import of llama.cpp or Qt while a unit test
    runs. (In a run of every tier an earlier test may have imported them already: the import
    check then has nothing to catch; ``make check`` reads only unit modules, and catches it.)"""
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse_process)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse_process)
    if hasattr(os, "fork"):
        monkeypatch.setattr(os, "fork", _refuse_process)
    if "llama_cpp" in sys.modules:  # imported at collection by a module the test shares
        monkeypatch.setattr(sys.modules["llama_cpp"].Llama, "__init__", _refuse_model)
    finder = _Refuse()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


@contextmanager
def holding(item: pytest.Item) -> Iterator[None]:
    """:func:`held_to_unit` around a ``unit`` test's set-up or call; nothing for the others."""
    if item.get_closest_marker("unit") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as monkeypatch, held_to_unit(monkeypatch):
        yield


def record(report: pytest.TestReport) -> None:
    """Count a test once: by its call, or by a set-up that failed or skipped it; add each phase's
    time to its module's (a module's shared fixtures are paid in its first test's set-up)."""
    _MODULE_S[report.nodeid.split("::", 1)[0]] += report.duration
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        tier = next((t for t in TIERS if t in report.keywords), "model")
        _TALLY[(tier, report.outcome)] += 1


def summary() -> str | None:
    """One line per tier: how many tests passed, failed, skipped."""
    lines = []
    for tier in TIERS:
        counts = {outcome: n for (t, outcome), n in sorted(_TALLY.items()) if t == tier}
        if counts:
            said = ", ".join(f"{n:,} {outcome}" for outcome, n in counts.items())
            lines.append(f"{tier:7s} {said}")
    return "\n".join(lines)


def slowest_modules(n: int = 15) -> str | None:
    """The ``n`` modules that took longest, fixtures included: where the suite's time goes."""
    if not _MODULE_S:
        return None
    total = sum(_MODULE_S.values())
    lines = [f"{s:8.1f}s  {s / total:5.1%}  {module}" for module, s in _MODULE_S.most_common(n)]
    return "\n".join([*lines, f"{total:8.1f}s  in all (summed over workers)"])
