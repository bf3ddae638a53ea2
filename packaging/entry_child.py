"""What a packaged executable does when the app starts it as a child rather than as the app.

From a checkout or a wheel the app starts the engine host as ``python -m app.core.engine.child``
(app/core/engine/host.py). In the packaged build ``sys.executable`` is the app itself, so that
command line arrives at the app's own entry point: a module of the app runs here as ``python -m``
would run it, and anything else (``-m pip``, which fetches the default model from a checkout)
cannot run in the packaged build and says so in one line.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence


def run_child_if_asked(argv: Sequence[str] | None = None) -> None:
    """Run ``-m MODULE ARGS...`` and exit, or return at once for an ordinary start."""
    argv = list(sys.argv if argv is None else argv)
    if len(argv) < 3 or argv[1] != "-m":
        return
    module = argv[2]
    if module == "app" or module.startswith("app."):
        sys.argv = [module, *argv[3:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        sys.exit(0)
    from app.core.paths import models_dir

    print(
        f"the packaged ContextLens cannot run `python -m {module}`: get the default model with "
        f"File > Get the Default Model in the window, or put a .gguf file in {models_dir()}",
        file=sys.stderr,
    )
    sys.exit(2)
