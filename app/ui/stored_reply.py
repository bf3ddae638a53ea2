"""A stored version's reply opened again: its recorded outputs decoded, shown in the buffers.

The history keeps each output of a run as the JSON the run recorded it in (step, text, source
spans, the alignment of its sentences; runs recorded before alignments were have none).
:func:`stored_outputs` reads them back as the values the output stage shows, and
:class:`StoredReply` shows them under a caption naming the version (its plan, when made on this
document, is on the document already: see WorkbenchModel.open_version).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QTabWidget

from app.core.jobs.alignment import SentenceSource, alignment_from
from app.services.versions import OpenedVersion
from app.ui.buffer_panel import BufferPanel
from app.ui.i18n import finish_label, strategy_label, task_label
from app.ui.session_model import SessionModel

Span = tuple[int, int]
StoredOutput = tuple[str, str, tuple[Span, ...], tuple[SentenceSource, ...]]


def stored_outputs(outputs: Sequence[Mapping[str, Any]]) -> list[StoredOutput]:
    """Each recorded output as (step, text, source spans, alignment): () for the alignment of a
    run recorded before it, or one that cannot be read."""
    return [(str(o.get("step", "")), str(o.get("text", "")),
             tuple((int(a), int(b)) for a, b in o.get("source_spans", ())),
             alignment_from(o.get("alignment")))
            for o in outputs]  # fmt: skip


class StoredReply(QObject):
    """Shows the reply of each version ``session`` opens in ``buffers``, brought to the front
    of ``tabs``."""

    def __init__(self, session: SessionModel, buffers: BufferPanel, tabs: QTabWidget,
                 parent: QObject | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self._buffers, self._tabs = buffers, tabs
        session.version_opened.connect(self.show)

    def show(self, opened: OpenedVersion) -> None:
        """The recorded reply in the output stage: each answer under its question, each output
        linked to its sources (and its sentences, where recorded, each to its own)."""
        v = opened.version

        def caption() -> str:  # again in the words of a language chosen meanwhile
            return self.tr("v{0} of session #{1}: {2} · {3} · {4}").format(
                v.number, v.session, task_label(v.task), strategy_label(v.strategy),
                finish_label(opened.finish_reason) if opened.finish_reason
                else self.tr("not run"))  # fmt: skip

        self._buffers.set_questions(v.prompt.split("\n") if v.task == "ask" else [])
        self._buffers.show_outputs(caption, stored_outputs(opened.outputs))
        self._tabs.setCurrentWidget(self._buffers)
