"""The chat templates of a model file, checked when the engine child loads it: compiled only, in
the template sandbox (:class:`SandboxedTemplateCheck`), and whether the model's own template can
frame a document (:func:`template_problem`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.engine.chat_template import check_chat_template
from app.core.textutil import clip_message


class SandboxedTemplateCheck:
    """Stands in for llama-cpp-python's ``Jinja2ChatFormatter`` in this process.

    ``Llama()`` compiles every chat template a file carries with its own Jinja environment,
    folding constant expressions outside any cap: ``{{ 2 ** 100000 }}`` failed the load and
    ``'x' * 300000000`` cost seconds and gigabytes. The app renders templates itself
    (``render_chat_template``), so at load they are only compiled, in the capped sandbox of the
    chat-template renderer process, under its deadline and ``stopped`` (a cancel ends the load);
    a template that does not compile still fails the load as Jinja's TemplateError.
    """

    stopped: Callable[[], bool] | None = None  # the engine's cancel check, set by the engine

    def __init__(self, template: str, **_ignored: Any) -> None:
        check_chat_template(template, cancelled=SandboxedTemplateCheck.stopped)

    def to_chat_handler(self) -> None:
        return None  # llama-cpp-python's chat completion is never used here


def template_problem(metadata: dict[str, Any], apply_chat_template: Callable[..., str]) -> str:
    """Why the model's chat template cannot frame a document, or "" when it can (or when
    there is none: a plain prompt is then the expected thing). Jobs fall back to a plain
    prompt on the same failure; this says so once, at load."""
    from app.core.planning.frame import (  # noqa: PLC0415 (tiktoken: not at engine start)
        document_messages,
        split_at_document,
    )

    if not metadata.get("tokenizer.chat_template"):
        return ""
    try:
        split_at_document(apply_chat_template(document_messages("Summarize.")))
    except ValueError as exc:  # ChatTemplateError is one; its text may be the template's own
        return clip_message(str(exc))
    return ""
