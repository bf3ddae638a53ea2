"""``python -m tests.fault_cli ARGS``: ``contextlens-cli ARGS`` whose engine children start from
tests/fault_child.py, so the fault ``$CONTEXTLENS_ENGINE_FAULT`` names strikes in the CLI's own
engine (tests/cli/test_faults.py)."""

from __future__ import annotations

import sys

from app.cli.main import main as cli_main
from app.core.engine.host import EngineHost
from tests.fault_child import FAULT_CHILD


def main() -> int:
    EngineHost.child_module = FAULT_CHILD
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
