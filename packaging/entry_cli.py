"""Entry point of the packaged command line, ``contextlens-cli`` (packaging/contextlens.spec)."""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()  # see entry_gui.py
    from entry_child import run_child_if_asked

    run_child_if_asked()
    from app.cli.main import main

    sys.exit(main())
