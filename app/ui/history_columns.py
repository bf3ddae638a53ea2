"""The History tree's columns, and what each says for a session or a version.

:class:`Column` names the columns in the order they are shown; :class:`HistoryColumns` words
their headers and cells (texts and tooltips) in the language installed when asked, so the model
(app/ui/history_tree_model.py) produces every text in ``data()`` and a language change is a
redraw. A version's row shows its number, when it was made, its task, prompt, strategy,
settings, how its last run finished and its reply, and whether a saved KV state lets a rollback
to it resume at once; a session's row (when every session is shown) its name, document and
size.
"""

from __future__ import annotations

from enum import IntEnum

from PySide6.QtCore import QObject

from app.core.planning.frame import SUMMARIZE
from app.core.sampling import from_version
from app.services.history import LastRun, SavedState, SessionRow, VersionInfo
from app.ui.i18n import finish_label, strategy_label, task_label

INSTANT = "⚡"  # marks a version whose rollback resumes from a saved KV state
TOOLTIP_CHARS = 2000  # the longest reply a tooltip shows


class Column(IntEnum):
    """The columns of the tree, in the order they are shown."""

    VERSION = 0
    CREATED = 1
    TASK = 2
    PROMPT = 3
    STRATEGY = 4
    SETTINGS = 5
    FINISH = 6  # a session's row shows its size here
    REPLY = 7
    KV = 8


def first_line(text: str, limit: int = 80) -> str:
    """The first line of ``text`` that is not blank, cut to ``limit`` characters."""
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def settings_tip(settings: dict[str, object]) -> str:
    """Every recorded setting, one per line (the column shows the context and reply size)."""
    return "\n".join(f"{key}: {value}" for key, value in sorted(settings.items()))


def shown_prompt(v: VersionInfo) -> str:
    """The prompt a version ran with: summarize's own instruction when none was typed."""
    return v.prompt or (SUMMARIZE if v.task == "summarize" else "")


class HistoryColumns(QObject):
    """The words of the tree: headers, and each cell's text and tooltip (None: none)."""

    def header(self, column: Column) -> str:
        return {
            Column.VERSION: self.tr("Version"),
            Column.CREATED: self.tr("Created"),
            Column.TASK: self.tr("Task"),
            Column.PROMPT: self.tr("Prompt / question"),
            Column.STRATEGY: self.tr("Strategy"),
            Column.SETTINGS: self.tr("Settings"),
            Column.FINISH: self.tr("Finish"),
            Column.REPLY: self.tr("Reply"),
            Column.KV: self.tr("KV state"),
        }[column]

    def versions_count(self, n: int) -> str:
        return self.tr("1 version") if n == 1 else self.tr("{0} versions").format(n)

    # ----- a session's row -----

    def session_text(self, s: SessionRow, column: Column) -> str | None:
        if column is Column.VERSION:
            return self.tr("{0} (#{1})").format(s.name, s.id)
        if column is Column.FINISH:
            return self.versions_count(s.versions)
        return None

    def session_tip(self, s: SessionRow, column: Column) -> str | None:
        return (s.document or None) if column is Column.VERSION else None

    # ----- a version's row -----

    def version_text(self, v: VersionInfo, run: LastRun | None, state: SavedState | None,
                     column: Column, *, with_strategy: bool = False) -> str | None:  # fmt: skip
        """``with_strategy``: the version's label names its strategy too (the versions of one
        compare differ in nothing else, and the Strategy column lies off to the right)."""
        match column:
            case Column.VERSION:
                cancelled = run is not None and run.cancelled
                label = (self.tr("v{0} (cancelled)").format(v.number) if cancelled
                         else f"v{v.number}")  # fmt: skip
                if with_strategy:
                    label = self.tr("{0} · {1}").format(label, strategy_label(v.strategy))
                return label
            case Column.CREATED:
                return v.created.astimezone().strftime("%Y-%m-%d %H:%M")
            case Column.TASK:
                return task_label(v.task)
            case Column.PROMPT:
                return first_line(shown_prompt(v))
            case Column.STRATEGY:
                return strategy_label(v.strategy)
            case Column.SETTINGS:
                return self._settings(v)
            case Column.FINISH:
                if run is None:
                    return None
                return self.tr("{0} · {1:,} + {2:,} tokens").format(
                    finish_label(run.finish_reason), run.prompt_tokens, run.completion_tokens
                )
            case Column.REPLY:
                return None if run is None else first_line(run.reply)
            case Column.KV:
                return None if state is None else self.tr("{0} instant").format(INSTANT)
        return None

    def version_tip(self, v: VersionInfo, run: LastRun | None, state: SavedState | None,
                    column: Column) -> str | None:  # fmt: skip
        match column:
            case Column.VERSION:
                if run is not None and run.cancelled:  # not a finished answer
                    return self.tr("Version #{0} of session #{1}: its run was cancelled, so its "
                                   "reply is cut short").format(v.id, v.session)  # fmt: skip
                return self.tr("Version #{0} of session #{1}").format(v.id, v.session)
            case Column.PROMPT:
                return shown_prompt(v) or None
            case Column.SETTINGS:
                return settings_tip(v.settings) or None
            case Column.FINISH:  # why it ended so, in the words it was recorded with
                return None if run is None else run.error or run.refused or None
            case Column.REPLY:
                return None if run is None else run.reply[:TOOLTIP_CHARS] or None
            case Column.KV:
                return None if state is None else self._state_tip(v, state)
        return None

    def _settings(self, v: VersionInfo) -> str:
        """The context and the reply's size, and the sampling when it is not greedy: two
        versions that differ only in sampling must not look alike."""
        text = self.tr("n_ctx {0} · max {1}").format(
            v.settings.get("n_ctx", "?"), v.settings.get("max_tokens", "?"))  # fmt: skip
        sampling = from_version(v.settings)
        if not sampling.greedy:
            text += " · " + self.tr("temperature {0:g} · seed {1}").format(
                sampling.temperature, sampling.seed)  # fmt: skip
        return text

    def _state_tip(self, v: VersionInfo, state: SavedState) -> str:
        where = (
            self.tr("its own") if state.version == v.id
            else self.tr("that of the version it equals (#{0})").format(state.version)
        )  # fmt: skip
        return self.tr(
            "A rollback resumes from a saved KV state ({0}): {1:,} prompt tokens, context "
            "{2:,}, {3} cache, {4:,.1f} MiB; the prompt is not evaluated again."
        ).format(where, state.prompt_tokens, state.n_ctx, state.cache_type,
                 state.state_bytes / 2**20)  # fmt: skip
