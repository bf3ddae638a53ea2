"""contextlens-cli calibrate: the llama.cpp settings that run a model fastest on this machine.

Loads the model under each candidate (threads, batch sizes, flash attention), times a prompt
evaluation and a short generation, prints the table and the choice, and caches it per model and
machine (``--fresh`` measures again). ``--json`` prints one object: ``best``, ``machine``,
``cached`` and ``trials`` (each with ``settings``, ``prompt_tokens_per_s``, ``gen_tokens_per_s``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
from pathlib import Path
from typing import Any

from app.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_ENGINE_CRASHED,
    EXIT_OK,
    BadInput,
    fail,
    sigint_cancels,
)
from app.cli.documents import model_path_or_default
from app.core.cancelled import Cancelled
from app.core.engine.types import DEFAULT_N_CTX


def cmd_calibrate(args: argparse.Namespace) -> int:

    from app.core.default_model import sha256_of
    from app.core.engine.types import EngineError, LoadSettings
    from app.services.calibration import calibrate_model

    try:
        model = model_path_or_default(args.model)
        if model is None:
            raise BadInput("no model: pass --model or fetch the default one (`make`)")
        base = LoadSettings(n_ctx=args.n_ctx)
        base.validate()
        sha = sha256_of(Path(model))
    except (BadInput, ValueError, OSError) as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    stop = threading.Event()  # the trial under way ends first

    def progress(done: int, total: int) -> None:
        print(f"\rcalibrating: {done}/{total} settings tried", end="", file=sys.stderr,
              flush=True)  # fmt: skip

    try:
        with sigint_cancels(stop):
            result, was_cached = calibrate_model(
                Path(model), sha, base, progress=progress, cancelled=stop.is_set,
                fresh=args.fresh)  # fmt: skip
    except (Cancelled, KeyboardInterrupt):  # a second Ctrl+C does not wait
        return fail(EXIT_CANCELLED, "cancelled", args.json)
    except (EngineError, ValueError) as exc:
        return fail(EXIT_ENGINE_CRASHED, str(exc), args.json)
    finally:
        print(file=sys.stderr)
    _report(result, was_cached, args.json)
    return EXIT_OK


def _report(result: Any, was_cached: bool, as_json: bool) -> None:
    if as_json:
        print(json.dumps({**result.to_json(), "cached": was_cached}))
        return
    best = result.best
    print(f"{'threads':>7} {'batch':>6} {'flash':>5} {'prompt tok/s':>13} {'gen tok/s':>10}")
    for t in sorted(result.trials, key=lambda t: t.seconds_per_call):
        s = t.settings
        mark = "  <- chosen" if s == best else ""
        print(f"{s.n_threads:>7} {s.n_batch:>6} {'on' if s.flash_attn else 'off':>5} "
              f"{t.prompt_tokens_per_s:>13,.0f} {t.gen_tokens_per_s:>10,.1f}{mark}")  # fmt: skip
    source = "cached from an earlier calibration" if was_cached else "measured now"
    print(f"chosen ({source}): {dataclasses.asdict(best)}", file=sys.stderr)


def add_commands(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="find the fastest llama.cpp settings on this machine")
    p.add_argument("--model", help="GGUF model (default: the default model)")
    p.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX,
                   help=f"context size (default {DEFAULT_N_CTX})")  # fmt: skip
    p.add_argument("--fresh", action="store_true", help="measure again, ignoring the cache")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_calibrate)
