"""The sampling options of generate, run, compare and batch: one definition, one check.

``--sampling PRESET`` starts from a preset (deterministic, the default: greedy); each flag given
overrides its field. A bad value is refused before anything loads, in one sentence that names
the flag.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from app.cli.common import BadInput

# field of SamplingSettings -> (type, help); the flag is the field with dashes
_FLAGS: dict[str, tuple[type, str]] = {
    "temperature": (float, "0 = greedy, the default; above it, sampled"),
    "top_k": (int, "keep the k likeliest tokens (0: off; sampled replies only)"),
    "top_p": (float, "keep the likeliest tokens up to this probability mass (1: off)"),
    "min_p": (float, "drop tokens below this share of the likeliest one's probability (0: off)"),
    "repeat_penalty": (float, "penalize tokens seen in the window (1: off, the default)"),
    "repeat_last_n": (int, "the repeat penalty's window in tokens (default 64; -1: the context)"),
    "dry_multiplier": (float, "DRY: penalize continuing a repeated sequence (0: off, the default)"),
    "dry_base": (float, "DRY: how fast its penalty grows with the repeat's length (default 1.75)"),
    "dry_allowed_length": (int, "DRY: repeats this long go unpenalized (default 2)"),
    "dry_last_n": (int, "DRY: its window in tokens (default -1: the whole context)"),
    "seed": (int, "the seed of a sampled reply: the same seed and settings give the same reply"),
}


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    """The sampling flags, grouped in the command's help."""
    from app.core.sampling import PRESETS

    group = p.add_argument_group("sampling")
    group.add_argument("--sampling", metavar="PRESET", default="deterministic",
                       help=f"start from a preset: {', '.join(PRESETS)} (default deterministic: "
                            "greedy); the flags below override it")  # fmt: skip
    for name, (kind, help_text) in _FLAGS.items():
        group.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=None,
                           help=help_text)  # fmt: skip
    group.add_argument("--stop-on-repetition", action=argparse.BooleanOptionalAction,
                       default=True,
                       help="end a reply that loops, with finish reason 'repetition' "
                            "(default on)")  # fmt: skip


def sampling_from_args(args: argparse.Namespace) -> Any:
    """The SamplingSettings the flags ask for; BadInput in one sentence for a bad value."""
    from app.core.sampling import preset

    try:
        base = preset(args.sampling, seed=0)
    except ValueError as exc:
        raise BadInput(f"--sampling: {exc}") from None
    given = {name: getattr(args, name) for name in _FLAGS if getattr(args, name) is not None}
    settings = replace(base, **given, stop_on_repetition=args.stop_on_repetition)
    for name, rule in settings.problems():
        raise BadInput(f"--{name.replace('_', '-')} {rule} (got {getattr(settings, name)})")
    return settings
