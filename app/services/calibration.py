"""Calibrating a model apart from the engine that serves it.

A first calibration tries a dozen settings, each a load, a prompt and a short reply: minutes on
a small machine. Run on the engine that holds the person's model, it kept that model away from
them until it ended. Here it runs on an engine child of its own, so the model the person uses
stays loaded (with safe settings) and the result is offered when it is ready; the caller decides
when the trials may run (``cancelled`` may wait) and says when other work disturbed one.
``contextlens-cli calibrate`` measures the same way, with the cache (:func:`calibrate_model`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from app.core.calibrate import PROMPT_SHARE, Calibration, cached, calibrate, machine_key
from app.core.engine.host import EngineHost
from app.core.engine.types import LoadSettings


def calibrate_apart(
    model: Path,
    model_sha256: str,
    base: LoadSettings,
    *,
    trials: Sequence[LoadSettings] | None = None,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    disturbed: Callable[[], bool] = lambda: False,
    started: Callable[[EngineHost], None] | None = None,
) -> Calibration:
    """Measure ``model``'s candidates (``trials``, by default calibrate's own around ``base``)
    on an engine child started for it, cache the fastest and return it; the child is closed
    after. ``started(host)`` hands the child over as it starts, so that a cancel can interrupt
    the trial under way (``host.cancel()``). Raises Cancelled, EngineError or
    ValueError (nothing could be measured).

    The candidates made from ``base`` get a context of at most PROMPT_SHARE tokens: a trial
    fills a few hundred, and this engine's KV cache comes on top of the one the person uses
    (only the speed knobs are kept, so the context does not change the choice)."""
    base = replace(base, n_ctx=min(base.n_ctx, PROMPT_SHARE))
    with EngineHost() as host:
        if started is not None:
            started(host)
        return calibrate(host, model, model_sha256, base, trials=trials, progress=progress,
                         cancelled=cancelled, use_cache=False, disturbed=disturbed)  # fmt: skip


def calibrate_model(
    model: Path,
    model_sha256: str,
    base: LoadSettings,
    *,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    fresh: bool = False,
) -> tuple[Calibration, bool]:
    """The fastest settings for ``model`` on this machine, measured on an engine child of its own
    (closed after): the cached calibration unless ``fresh``, else each candidate around
    ``base`` in turn (cached then). Returns it and whether it came from the cache. Raises
    Cancelled, EngineError or ValueError (nothing could be measured)."""
    with EngineHost() as host:
        machine = machine_key(host.start())
        was_cached = not fresh and cached(model_sha256, machine, base.kv_cache_type) is not None
        found = calibrate(host, model, model_sha256, base, progress=progress,
                          cancelled=cancelled, use_cache=not fresh)  # fmt: skip
    return found, was_cached
