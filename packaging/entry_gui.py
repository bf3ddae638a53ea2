"""Entry point of the packaged window, ``contextlens`` (packaging/contextlens.spec)."""

import multiprocessing
import sys

if __name__ == "__main__":
    # First of all: a child started by multiprocessing's spawn (the planning process,
    # app/core/planning/process.py) or its resource tracker runs its work here and exits.
    multiprocessing.freeze_support()
    from entry_child import run_child_if_asked

    run_child_if_asked()  # the engine host's child: `contextlens -m app.core.engine.child ...`
    from app.ui.main import main

    sys.exit(main())
