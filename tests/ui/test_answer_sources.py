"""Each sentence of an answer shows its source: the mouse over a sentence of the reply in the
output buffer (real mouse moves on its viewport) highlights the kept sentence that supports it in
the document view, as the window wires them; its tooltip gives the score, or says the kept text
does not support it; a click shows the same source; an opened version's recorded alignment
does the same, and a run recorded without one shows its reply as before."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QHBoxLayout, QToolTip, QWidget

from app.core.jobs.alignment import align
from app.core.jobs.tasks import (
    ChunkEvaluated,
    ChunkQueued,
    JobFinished,
    JobResult,
    KVStats,
    OutputSpan,
    TokenBatch,
)
from app.core.paths import sample_document
from app.ui.buffer_panel import BufferPanel
from app.ui.document_view import SOURCE, DocumentView
from tests.ui.text_probes import is_visible, kinds_in_block, linked_fragments, point_of

JARGON = sample_document().read_text(encoding="utf-8")
START = JARGON.index(":hacker: n.")
DOC = JARGON[START - 30_000 : START + 6_000]  # the entry far down: a highlight must scroll to it
KEPT = ((30_000, 36_000),)
# streamed as the model writes: a leading space, an emoji (two UTF-16 units in Qt's positions)
STREAMED = [" 🌟 Hackers consider themselves", " something of an elite. They mostly live on",
            " the moon. It was first adopted as a badge in the 1960s by TMRC."]  # fmt: skip
REPLY = "".join(STREAMED).strip()


def _window(qtbot) -> tuple[QWidget, BufferPanel, DocumentView]:
    """The output buffer and the document view, wired as the main window wires them."""
    host = QWidget()
    qtbot.addWidget(host)
    panel, view = BufferPanel(4096), DocumentView()
    layout = QHBoxLayout(host)
    layout.addWidget(view)
    layout.addWidget(panel)
    panel.source_clicked.connect(view.highlight_sources)
    host.resize(1400, 700)
    host.show()
    qtbot.waitExposed(host)
    view.set_document(DOC)
    return host, panel, view


def _run(panel: BufferPanel) -> OutputSpan:
    """An `ask` job's events as the job yields them; the result carries the alignment."""
    a, b = KEPT[0]
    panel.on_event(ChunkQueued("answer 1", a, b, 1500))
    panel.on_event(ChunkEvaluated("answer 1", a, b, 1500, 30, 1530, 1))
    for text in STREAMED:
        panel.on_event(TokenBatch("answer 1", text, 8, 1, KEPT))
    panel.on_event(KVStats(1560, 4096, 1560 * 20_000))
    out = OutputSpan("answer 1", REPLY, KEPT, 1, "stop", align(REPLY, DOC, KEPT))
    result = JobResult("ask", "head", "stop", 4096, outputs=[out])
    panel.on_event(JobFinished(result))
    return out


def _sentence_point(panel: BufferPanel, link: str) -> QPoint:
    """The viewport point of the middle of the text linked ``link`` (scrolled into view)."""
    frag = next(linked_fragments(panel, link), None)
    if frag is None:
        raise AssertionError(f"no text linked {link}")
    return point_of(panel, frag)


def _tooltip(panel: BufferPanel, point: QPoint) -> str:
    viewport = panel.output.viewport()
    QApplication.sendEvent(viewport, QHelpEvent(QEvent.Type.ToolTip, point,
                                                viewport.mapToGlobal(point)))  # fmt: skip
    return QToolTip.text()


def _linked_text(panel: BufferPanel, link: str) -> str:
    return "".join(frag.text() for frag in linked_fragments(panel, link))


def test_hovering_a_sentence_highlights_its_source_in_the_document(qtbot) -> None:
    _host, panel, view = _window(qtbot)
    out = _run(panel)
    elite, moon, badge = out.alignment
    assert elite.source is not None and moon.source is None and badge.source is not None
    assert "something of an elite" in DOC[elite.source[0] : elite.source[1]]
    assert "first adopted as a badge" in DOC[badge.source[0] : badge.source[1]]
    assert panel.alignment("answer 1") == out.alignment
    # each sentence is linked on its own, exactly its text (the emoji and the lead space counted)
    elite_text = "🌟 Hackers consider themselves something of an elite."
    assert _linked_text(panel, "span:0:0") == elite_text
    assert _linked_text(panel, "span:0:1") == "They mostly live on the moon."
    assert not is_visible(view, elite.source[0])

    viewport = panel.output.viewport()
    qtbot.mouseMove(viewport, QPoint(2, viewport.height() - 2))  # below the text: no link
    with qtbot.waitSignal(panel.source_clicked) as shown:
        qtbot.mouseMove(viewport, _sentence_point(panel, "span:0:0"))
    assert shown.args == [[elite.source]]
    qtbot.waitUntil(lambda: is_visible(view, elite.source[0]))
    assert SOURCE in kinds_in_block(view, elite.source[0])
    tip = _tooltip(panel, _sentence_point(panel, "span:0:0"))
    assert f"{elite.source[0]:,}–{elite.source[1]:,}" in tip and f"{elite.score:.2f}" in tip

    with qtbot.waitSignal(panel.source_clicked) as shown:
        qtbot.mouseMove(viewport, _sentence_point(panel, "span:0:2"))
    assert shown.args == [[badge.source]]
    qtbot.waitUntil(lambda: SOURCE in kinds_in_block(view, badge.source[0]))

    # a sentence the kept text does not support: no highlight moves, the tooltip says why
    with qtbot.assertNotEmitted(panel.source_clicked, wait=100):
        qtbot.mouseMove(viewport, _sentence_point(panel, "span:0:1"))
    assert _tooltip(panel, _sentence_point(panel, "span:0:1")).startswith(
        "No support in the kept text")
    assert SOURCE in kinds_in_block(view, badge.source[0])  # still the last one shown

    # a click shows the sentence's source too; on the unsupported one, the whole output's
    with qtbot.waitSignal(panel.source_clicked) as clicked:
        qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton,
                         pos=_sentence_point(panel, "span:0:0"))  # fmt: skip
    assert clicked.args == [[elite.source]]
    with qtbot.waitSignal(panel.source_clicked) as clicked:
        qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton,
                         pos=_sentence_point(panel, "span:0:1"))  # fmt: skip
    assert clicked.args == [list(KEPT)]

    panel.retranslate()  # the tooltips are each sentence's own again, not the output's
    assert _tooltip(panel, _sentence_point(panel, "span:0:1")).startswith(
        "No support in the kept text")


def test_an_opened_versions_sentences_show_their_recorded_sources(qtbot) -> None:
    _host, panel, view = _window(qtbot)
    alignment = align(REPLY, DOC, KEPT)
    panel.show_outputs("v1", [("answer 1", REPLY, KEPT, alignment),
                              ("answer 2", "Recorded before alignments.", KEPT)])  # fmt: skip
    assert panel.alignment("answer 1") == alignment and panel.alignment("answer 2") == ()
    assert _linked_text(panel, "span:1") == "Recorded before alignments."
    viewport = panel.output.viewport()
    qtbot.mouseMove(viewport, QPoint(2, viewport.height() - 2))
    with qtbot.waitSignal(panel.source_clicked) as shown:
        qtbot.mouseMove(viewport, _sentence_point(panel, "span:0:2"))
    assert shown.args == [[alignment[2].source]]
    qtbot.waitUntil(lambda: SOURCE in kinds_in_block(view, alignment[2].source[0]))
    with qtbot.assertNotEmitted(panel.source_clicked, wait=100):  # no sentences: click only
        qtbot.mouseMove(viewport, _sentence_point(panel, "span:1"))
