"""Calibrating a model apart from the engine that serves it.

A first calibration tries a dozen settings, each a load, a prompt and a short reply: minutes on
a small machine. Run on the engine that holds the person's model, it kept that model away from
them until it ended. Here it runs on an engine child of its own, so the model the person uses
stays loaded (with safe settings) and the result is offered when it is ready; the caller decides
when the trials may run (``cancelled`` may wait) and says when other work disturbed one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from app.core.calibrate import PROMPT_SHARE, Calibration, calibrate
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
    the trial under way (``host.cancel()``). Raises CalibrationCancelled, EngineError or
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
