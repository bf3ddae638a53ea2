"""The closing summary of a run that fuzzed GGUF files counts the cases it tried, by class."""

from __future__ import annotations

import pytest

from tests.core.gguf_fuzz import TALLY_KEY


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    tally = config.stash.get(TALLY_KEY, None)
    if tally is not None and tally.counts:
        terminalreporter.write_sep("-", "GGUF fuzzing")
        terminalreporter.write_line(tally.report())
