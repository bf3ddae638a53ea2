"""Sampling presets and how a version's stored sampling reads back.

The presets are the three starting points the desktop anchors offer (LM Studio, KoboldCpp,
llama-server's web UI): *Deterministic* is greedy decoding, the jobs' default, reproducible
and equal across engines; *Balanced* samples at a moderate temperature with a light repetition
penalty and DRY, which keeps a small model out of its loops; *Creative* samples wider. A
preset sets every field but the seed, which stays as chosen, so "Balanced, seed 7" is one
reproducible reply. The window and the CLI both start from these.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from app.core.engine.types import SamplingSettings

DETERMINISTIC = "deterministic"
BALANCED = "balanced"
CREATIVE = "creative"

PRESETS: dict[str, SamplingSettings] = {
    DETERMINISTIC: SamplingSettings(),
    BALANCED: SamplingSettings(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05,
                               repeat_penalty=1.1, repeat_last_n=64, dry_multiplier=0.8),
    CREATIVE: SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.05,
                               repeat_penalty=1.05, repeat_last_n=128, dry_multiplier=0.8),
}  # fmt: skip


def preset(name: str, *, seed: int = 0) -> SamplingSettings:
    """The preset ``name`` with ``seed``; ValueError naming the presets for an unknown one."""
    if name not in PRESETS:
        raise ValueError(f"unknown sampling preset {name!r} (choose one of {', '.join(PRESETS)})")
    return replace(PRESETS[name], seed=seed)


def preset_of(settings: SamplingSettings) -> str | None:
    """The preset ``settings`` are (the seed and the loop stop aside), or None when they are
    a custom mix."""
    for name, p in PRESETS.items():
        if replace(p, seed=settings.seed, stop_on_repetition=settings.stop_on_repetition) == (
            settings
        ):
            return name
    return None


def stored(settings: SamplingSettings) -> dict[str, Any]:
    """What a version records: every field, so ``snapshots show`` and a diff list them all."""
    return settings.as_dict()


def from_version(version_settings: dict[str, Any] | None) -> SamplingSettings:
    """The sampling a version ran with: its ``settings["sampling"]``; a version recorded before
    sampling was stored ran greedy, which is the default."""
    return SamplingSettings.from_dict((version_settings or {}).get("sampling"))


def describe(settings: SamplingSettings) -> str:
    """One line for people: "greedy" or "temperature 0.7, top-k 40, …, seed 1" (only what
    differs from off)."""
    s = settings
    parts = ["greedy"] if s.greedy else [f"temperature {s.temperature:g}"]
    if not s.greedy:
        if s.top_k > 0:
            parts.append(f"top-k {s.top_k}")
        if s.top_p < 1:
            parts.append(f"top-p {s.top_p:g}")
        if s.min_p > 0:
            parts.append(f"min-p {s.min_p:g}")
    if s.repeat_penalty != 1.0 and s.repeat_last_n != 0:
        parts.append(f"repeat penalty {s.repeat_penalty:g} over {_window(s.repeat_last_n)}")
    if s.dry_multiplier > 0 and s.dry_last_n != 0:
        parts.append(f"DRY {s.dry_multiplier:g} (base {s.dry_base:g}, allowed "
                     f"{s.dry_allowed_length}, over {_window(s.dry_last_n)})")  # fmt: skip
    if not s.greedy:
        parts.append(f"seed {s.seed}")
    if not s.stop_on_repetition:
        parts.append("loops not stopped")
    return ", ".join(parts)


def _window(n: int) -> str:
    return "the whole context" if n < 0 else f"the last {n} tokens"


FIELDS = tuple(f.name for f in fields(SamplingSettings))
