"""One token total for a document (issue 49, row 8), in the window: the document's header and
the plan line under it say the same total at n_ctx 2,048 and 4,096 (the plan's chunks add up
to one or two tokens more on the sample text, cut inside runs of spaces in its ASCII art)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.paths import sample_document
from tests.ui.total_probes import header_total, said
from tests.ui.windows import Windows


@pytest.mark.parametrize("n_ctx", [2048, 4096])
def test_the_header_and_the_plan_line_say_one_total(
    qtbot, make_window: Windows, model_path: Path, n_ctx: int
) -> None:
    window = make_window(model_path, sample_document(), n_ctx=n_ctx)
    with qtbot.waitSignal(window.ready, timeout=120_000):  # loaded and counted
        window.show()
    with qtbot.waitSignal(window.plan_shown, timeout=120_000) as shown:
        window.update_plan()  # by the model's counter, not the estimate made before it loaded
    plan = shown.args[0]
    total = header_total(window)
    assert plan.total_tokens != total, "the chunks add up to the count: the test shows nothing"
    line = window.document_view.plan_info.text()
    assert said(r"of ([\d,]+) tokens reach the model", line) == total
    assert said(r": ([\d,]+) of", line) == plan.kept_tokens <= plan.budget < n_ctx
