"""Stage 3 of the buffer: the reply as it streams, each output linked to where it came from.

Each output of a run (a step's reply: "summary", "answer 1", a window of a rolling summary) is
a span of the text, headed by its step's title (an answer by its question) and linked as a
whole to its sources in the document; once the job has finished, each sentence of an answer or
a summary is linked on its own to the kept sentence that supports it (a dotted line under one
the kept text does not support). Hovered or clicked, a link asks the document to highlight its
source (``source_clicked``). Streamed text is appended at the end, never laid out again, and
the view follows the end only while the person has not scrolled up.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextBrowser, QWidget

from app.core.jobs.alignment import SentenceSource
from app.core.jobs.events import OutputSpan

Span = tuple[int, int]
_ANSWER_STEP = re.compile(r"answer (\d+)")  # the job's step of the answer to question N
_LINK = re.compile(r"(\d+)(?::(\d+))?")  # an output's link: span:<output>[:<sentence>]


@dataclass
class _OutputSpanView:
    step: str
    sources: tuple[Span, ...]
    parts: list[str] = field(default_factory=list)
    at: int = -1  # the output document's position of its first character (-1: none shown yet)
    # each sentence and the kept sentence that supports it (the job's, once it has finished)
    alignment: tuple[SentenceSource, ...] = ()

    @property
    def text(self) -> str:
        return "".join(self.parts)


class ReplyView(QTextBrowser):
    """The outputs of a run (or of a version opened again), their headings and status lines.
    Output spans are numbered in order: span ``i``'s link is ``span:i``, its sentence ``k``'s
    ``span:i:k``. The buffer panel calls :meth:`retranslate` when the language changes."""

    # [(start, end), ...]: document characters to highlight: an output's sources when it is
    # clicked, the source of an answer's or a summary's sentence when it is hovered or clicked
    source_clicked = Signal(list)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.anchorClicked.connect(self._on_anchor)
        self.highlighted.connect(self._on_hover)  # the mouse over a link, or off it
        self._hovered: Span | None = None  # the source of the sentence under the mouse
        self._spans: list[_OutputSpanView] = []
        self._questions: list[str] = []  # the run's questions, for the answers' headings

    # ----- what is shown -----

    def clear_outputs(self) -> None:
        """No output, heading or line left."""
        self._spans = []
        self.clear()

    @property
    def span_count(self) -> int:
        return len(self._spans)

    def output_text(self, step: str | None = None) -> str:
        """The text of the last output span named ``step`` (streamed, or composed by the job and
        shown when it finished); without a step, every output span in order, separated by blank
        lines (headings and status lines left out)."""
        if step is not None:
            return next((s.text for s in reversed(self._spans) if s.step == step), "")
        return "\n\n".join(s.text for s in self._spans)

    def spans(self) -> list[tuple[str, tuple[Span, ...]]]:
        """(step, source spans) of each output span shown, in order; index = anchor number."""
        return [(s.step, s.sources) for s in self._spans]

    def sentence_sources(self, step: str) -> tuple[SentenceSource, ...]:
        """The sentences of the last output span named ``step`` shown tied to their sources
        (offsets into its text as the job recorded it, stripped); () when none are."""
        return next((s.alignment for s in reversed(self._spans) if s.step == step), ())

    def set_questions(self, questions: Sequence[str]) -> None:
        """The questions of the run shown (or of the version opened): each answer is headed
        by its question, not by its step's name ("answer 1" over every answer of a thread)."""
        self._questions = [q.strip() for q in questions if q.strip()]

    # ----- writing -----

    def add_output(self, step: str, sources: Sequence[Span], text: str | None = None,
                   alignment: Sequence[SentenceSource] = ()) -> int:  # fmt: skip
        """A new output span of ``step`` under its heading, with its ``text`` (None: it streams
        in later) and its sentences linked as ``alignment`` ties them; returns its number."""
        self._spans.append(_OutputSpanView(step, tuple(sources)))
        index = len(self._spans) - 1
        self.heading(self._step_title(step))
        if text is not None:
            self.show_text(index, text)
            self._link_sentences(index, text, alignment)
        return index

    def show_text(self, index: int, text: str) -> None:
        """More text of output span ``index``, at the end (where its text goes on)."""
        view = self._spans[index]
        if view.at < 0:
            view.at = self._cursor_at_end().position()
        view.parts.append(text)
        self._insert(text, self._span_format(index))

    def finish(self, outputs: Sequence[OutputSpan], first: int) -> None:
        """A job's ``outputs``, the provenance of record, over the spans it streamed (those from
        number ``first``): a streamed span takes its output's sources (map-reduce's summary
        points at the windows it combined), an output the job composed without streaming
        (rolling's final summary, extract's merge) is shown here. Each sentence of an answer or
        a summary is then linked to its own source."""
        streamed = self._spans[first:]
        for out in outputs:
            match = next((s for s in streamed if s.step == out.step), None)
            if match is not None:
                streamed.remove(match)
                match.sources = tuple(out.source_spans)
                self._link_sentences(self._spans.index(match), out.text, out.alignment)
            elif out.text:
                self.add_output(out.step, out.source_spans, out.text, out.alignment)

    def heading(self, text: str, size: float = 1.0) -> None:
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold)
        if size != 1.0:
            fmt.setFontPointSize(self.font().pointSizeF() * size)
        self._new_block()
        self._insert(text, fmt)
        self._cursor_at_end().insertBlock()

    def line(self, text: str, *, bold: bool = False) -> None:
        """A status line (italic), or an error (bold), in a block of its own."""
        fmt = QTextCharFormat()
        fmt.setFontItalic(not bold)
        if bold:
            fmt.setFontWeight(QFont.Weight.Bold)
        self._new_block()
        self._insert(text, fmt)

    def retranslate(self) -> None:
        """The tooltip of every output link shown, in the language now installed."""
        doc = self.document()
        links: list[tuple[int, int, str]] = []  # (position, length, link) of each fragment
        block = doc.begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                href = fragment.charFormat().anchorHref()
                if href.startswith("span:"):
                    links.append((fragment.position(), fragment.length(), href))
                it += 1
            block = block.next()
        if not links:
            return
        generic = self._span_format(0).toolTip()
        cursor = QTextCursor(doc)
        for position, length, href in links:
            tip = QTextCharFormat()
            found = self._linked(href.removeprefix("span:"))
            sentence = found[1] if found is not None else None
            tip.setToolTip(generic if sentence is None else self._sentence_tip(sentence))
            cursor.setPosition(position)
            cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(tip)

    # ----- the text itself -----

    def _cursor_at_end(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _insert(self, text: str, fmt: QTextCharFormat) -> None:
        bar = self.verticalScrollBar()
        follow = bar.value() >= bar.maximum() - 4
        self._cursor_at_end().insertText(text, fmt)
        if follow:
            bar.setValue(bar.maximum())

    def _new_block(self) -> None:
        if not self.document().isEmpty():
            self._cursor_at_end().insertBlock()

    def _step_title(self, step: str) -> str:
        found = _ANSWER_STEP.fullmatch(step)
        if found is None or not 0 < int(found.group(1)) <= len(self._questions):
            return step
        return self.tr("Answer to “{0}”").format(self._questions[int(found.group(1)) - 1])

    def _link_sentences(self, index: int, text: str,
                        alignment: Sequence[SentenceSource]) -> None:  # fmt: skip
        """Each sentence of output span ``index`` (``text`` as the job recorded it: what was
        shown, stripped) linked on its own: hovered or clicked, it shows its source; its
        tooltip gives the score, or says the kept text does not support it."""
        view = self._spans[index]
        shown = view.text
        lead = len(shown) - len(shown.lstrip())
        if not alignment or view.at < 0 or shown[lead : lead + len(text)] != text:
            return  # not shown as recorded (never: the job's text is what streamed)
        view.alignment = tuple(alignment)
        cursor = QTextCursor(self.document())
        for k, sentence in enumerate(view.alignment):
            a = lead + min(sentence.start, len(text))
            b = lead + min(max(sentence.end, sentence.start), len(text))
            start = view.at + _utf16(shown[:a])  # Qt counts UTF-16 units: an emoji is two
            cursor.setPosition(start)
            cursor.setPosition(start + _utf16(shown[a:b]), QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(self._sentence_format(index, k))

    def _sentence_format(self, index: int, k: int) -> QTextCharFormat:
        sentence = self._spans[index].alignment[k]
        fmt = QTextCharFormat()
        fmt.setAnchor(True)
        fmt.setAnchorHref(f"span:{index}:{k}")
        fmt.setToolTip(self._sentence_tip(sentence))
        if sentence.source is None:  # a dotted line under what the kept text does not say
            fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
        return fmt

    def _sentence_tip(self, sentence: SentenceSource) -> str:
        if sentence.source is None:
            return self.tr("No support in the kept text (best match: score {0:.2f})").format(
                sentence.score)  # fmt: skip
        a, b = sentence.source
        return self.tr("Source: document characters {0:,}–{1:,}, score {2:.2f} (highlighted "
                       "in the document)").format(a, b, sentence.score)  # fmt: skip

    def _span_format(self, index: int) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setAnchor(True)
        fmt.setAnchorHref(f"span:{index}")
        fmt.setToolTip(self.tr("Click to highlight the document text this output came from"))
        return fmt

    # ----- links -----

    def _linked(self, link: str) -> tuple[_OutputSpanView, SentenceSource | None] | None:
        """The output span (and the sentence of it) a link names: ``<output>[:<sentence>]``."""
        found = _LINK.fullmatch(link)
        if found is None or int(found.group(1)) >= len(self._spans):
            return None
        view = self._spans[int(found.group(1))]
        if found.group(2) is None:
            return view, None
        k = int(found.group(2))
        return view, view.alignment[k] if k < len(view.alignment) else None

    def _on_anchor(self, url: QUrl) -> None:
        """A click on an output shows its sources; on a sentence tied to a source, that one."""
        found = self._linked(url.path()) if url.scheme() == "span" else None
        if found is None:
            return
        view, sentence = found
        if sentence is not None and sentence.source is not None:
            self.source_clicked.emit([sentence.source])
            return
        self.source_clicked.emit([tuple(s) for s in view.sources])

    def _on_hover(self, url: QUrl) -> None:
        """The mouse over a sentence tied to a source shows that source (once per sentence:
        moving within it does not scroll the document again)."""
        found = self._linked(url.path()) if url.scheme() == "span" else None
        source = found[1].source if found is not None and found[1] is not None else None
        if source is not None and source != self._hovered:
            self.source_clicked.emit([source])
        self._hovered = source


def _utf16(text: str) -> int:
    """The length of ``text`` in UTF-16 code units (Qt's text positions)."""
    return len(text.encode("utf-16-le")) // 2
