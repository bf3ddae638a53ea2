"""What every contextlens-cli command shares: the exit codes and the one-line error."""

from __future__ import annotations

import json
import sys

# A contract: 0 done, 2 bad input, 3 engine crashed, 4 refused (does not fit), 5 the audit found
# a mismatch (``run --audit``), 130 cancelled.
EXIT_OK, EXIT_BAD_INPUT, EXIT_ENGINE_CRASHED, EXIT_CONTEXT, EXIT_CANCELLED = 0, 2, 3, 4, 130
EXIT_AUDIT = 5


class BadInput(Exception):
    """One sentence for the person; the command exits with code 2."""


def fail(code: int, message: str, as_json: bool) -> int:
    """Report an error as one line on stderr (and a JSON line with --json); return the code."""
    if as_json:
        print(json.dumps({"type": "error", "exit_code": code, "message": message}), flush=True)
    print(f"error: {message}", file=sys.stderr, flush=True)
    return code
