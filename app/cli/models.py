"""``contextlens-cli models``: the models this machine has."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app.cli.common import EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from app.core.paths import list_models, models_dir

    models = list_models()
    if not models:
        print(f"no *.gguf files in {models_dir()}", file=sys.stderr)
    for p in models:
        print(p)
    return EXIT_OK


def add_commands(sub: Any) -> None:
    p = sub.add_parser("models", help="list the models in models/")
    p.set_defaults(func=cmd_models)
