"""The closing summary of a run counts what it threw at the engine: the GGUF files fuzzed, by
class, the faults injected into the engine child, by phase and signal, and the jobs audited."""

from __future__ import annotations

import pytest

from tests.core.audit_corpus import AUDITED
from tests.core.gguf_fuzz import TALLY_KEY
from tests.fault_injection import FAULT_TALLY_KEY


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    tally = config.stash.get(TALLY_KEY, None)
    if tally is not None and tally.counts:
        terminalreporter.write_sep("-", "GGUF fuzzing")
        terminalreporter.write_line(tally.report())
    faults = config.stash.get(FAULT_TALLY_KEY, None)
    if faults is not None and faults.counts:
        terminalreporter.write_sep("-", "engine fault injection")
        terminalreporter.write_line(faults.report())
    if AUDITED["jobs"]:
        counts = AUDITED
        terminalreporter.write_sep("-", "faithfulness audit")
        terminalreporter.write_line(
            f"{counts['jobs']} jobs on {len(counts['documents'])} documents passed the audit "
            f"against llama.cpp: {counts['calls']:,} model calls, "
            f"{counts['document_tokens']:,} document tokens checked position by position"
        )
