"""What a face may name when it asks for a job: the tasks, the default lanes, a cancel token.

Plain values, no engine: the window and the command line import these, never the job runner
(app/core/jobs/tasks.py and the modules it gathers; an import-linter contract says so).
"""

from __future__ import annotations

TASKS = ("summarize", "ask", "extract")  # what a job does with the document
# The map phase's replies generated together (see app/core/engine/lanes.py). On 2 CPU cores and
# 600-token windows four lanes generate 1.4x the tokens/s of one and eight no more, while each
# lane holds a context's worth of cache (tests/benchmarks/bench_batched_map.py).
DEFAULT_LANES = 4


class CancelToken:
    """Set from any thread; the job stops at its next step (the engine is cancelled separately)."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set
