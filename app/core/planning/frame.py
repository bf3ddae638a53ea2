"""The token budget for a document, and the preflight check that refuses what cannot fit.

budget = n_ctx − chat-template overhead − reply reserve. The overhead is measured, not guessed:
the model's own chat template is rendered around a placeholder document, and the text before and
after the placeholder is counted with the model's tokenizer, special tokens parsed. The
document's spans are evaluated as segments of their own between those two parts, so the three
counts add up exactly to what the context will hold.

A base model (its model card says so, or it has no chat template) never learned an instruction
frame: its prompts are framed for completion instead, the document first and a cue after it
("Summary:", "Answer:"), which the model continues. Plans and jobs take the frame from here alike.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.core.engine.chat_template import render_chat_template
from app.core.engine.gguf import ModelInfo, model_info, read_gguf
from app.core.engine.types import ContextOverflowError
from app.core.tokens import TokenCounter

_PLACEHOLDER = "\x00CONTEXTLENS-DOCUMENT\x00"

# The instructions each call of a job frames the document with (app.core.jobs.tasks); here, so
# that the completion frame of each is next to it.
SUMMARIZE = "Summarize the document."
SUMMARIZE_PART = "Summarize this part of a longer document."
COMBINE = "These are summaries of consecutive parts of one document. Combine them into one summary."
ASK = "Answer the question about the document."
ASK_PART = "Answer the question from this part of a longer document, or say it is not in this part."
COMBINE_ANSWERS = (
    "These are answers from different parts of one document. Give the one best answer."
)
ROLLING = (
    "Update the running summary with the next part of the document. "
    "Reply with the whole updated summary."
)
DEFAULT_TASK = SUMMARIZE
# For a base model: (the line before the document, the cue after it) per instruction. The line
# before is never empty, so the prompt has a first segment also for a model that adds no BOS.
# A question ("\n\nQuestion: ...") comes after the document and before the cue.
COMPLETION_CUES: dict[str, tuple[str, str]] = {
    SUMMARIZE: ("Document:\n\n", "\n\nSummary:"),
    SUMMARIZE_PART: ("Part of a longer document:\n\n", "\n\nSummary of this part:"),
    COMBINE: ("Summaries of consecutive parts of one document:\n\n",
              "\n\nSummary of the whole document:"),
    ASK: ("Document:\n\n", "\nAnswer:"),
    ASK_PART: ("Part of a longer document:\n\n", "\nAnswer:"),
    COMBINE_ANSWERS: ("Answers from different parts of one document:\n\n", "\nBest answer:"),
    ROLLING: ("A document, summarized part by part.\n\n", "\n\nUpdated summary:"),
}  # fmt: skip


@dataclass(frozen=True)
class Budget:
    n_ctx: int
    template_tokens: int  # chat template, system prompt and task around the document
    reserve: int  # tokens kept free for the reply

    @property
    def available(self) -> int:
        """Tokens of the document that fit (never negative)."""
        return max(0, self.n_ctx - self.template_tokens - self.reserve)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "available": self.available}


@dataclass(frozen=True)
class ServerTemplate:
    """A chat template a server reported (llama-server's /props) with its BOS and EOS text:
    frames a prompt as a GGUF's own template does, for a model that is not here."""

    template: str
    bos_token: str = ""
    eos_token: str = ""
    add_bos: bool = False


# What frames a document: a GGUF's own template, a server's, or None (a plain task line).
FrameSource = str | os.PathLike[str] | ServerTemplate | None


@dataclass(frozen=True)
class PromptFrame:
    """The rendered prompt around the document: text before it and after it."""

    before: str
    after: str
    add_bos: bool = False

    def tokens(self, counter: TokenCounter) -> int:
        bos = 1 if self.add_bos else 0
        return bos + counter.count_special(self.before) + counter.count_special(self.after)


def frames_for_completion(info: ModelInfo | None) -> bool:
    """Whether prompts for this model are framed for completion (:func:`completion_frame`): its
    model card says it is a base model (no chat template, or named so). None (a server whose
    model is not here): no, the server's template or the plain frame."""
    return info is not None and info.is_base_model


def completion_frame(task: str = DEFAULT_TASK, *, add_bos: bool = False) -> PromptFrame:
    """The frame of a base model for ``task``: a line naming what follows, the document, and a
    cue the model continues ("Summary:"); an instruction of the person's own (extract) becomes
    the cue's task line."""
    if task in COMPLETION_CUES:
        before, after = COMPLETION_CUES[task]
    else:
        before, after = "Document:\n\n", f"\n\nTask: {task.strip()}\nAnswer:"
    return PromptFrame(before, after, add_bos)


def document_messages(task: str, system: str | None = None) -> list[dict[str, str]]:
    """Chat messages with the task and a placeholder where the document goes."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": f"{task}\n\n{_PLACEHOLDER}"})
    return messages


def split_at_document(rendered: str) -> tuple[str, str]:
    """The rendered prompt before and after the document's placeholder."""
    before, sep, after = rendered.partition(_PLACEHOLDER)
    if not sep:
        raise ValueError("the chat template dropped the user's message; it cannot frame a document")
    return before, after


def prompt_frame(
    template: str | None,
    *,
    task: str = DEFAULT_TASK,
    system: str | None = None,
    bos_token: str = "",
    eos_token: str = "",
    add_bos: bool = False,
    completion: bool = False,
) -> PromptFrame:
    """Render ``template`` with the document replaced by a placeholder and split around it.

    ``completion`` (a base model): :func:`completion_frame`, whatever the template. Without a
    template (a server that does not say its template) the prompt is the task, a blank line,
    the document and a blank line: the one plain frame, for plans and jobs alike.
    """
    if completion:
        return completion_frame(task, add_bos=add_bos)
    if not template:
        return PromptFrame(f"{task}\n\n", "\n\n", add_bos)
    rendered = render_chat_template(
        template, document_messages(task, system), add_generation_prompt=True,
        bos_token=bos_token, eos_token=eos_token,
    )  # fmt: skip
    before, after = split_at_document(rendered)
    if add_bos and bos_token and before.startswith(bos_token):
        before = before[len(bos_token) :]  # llama.cpp adds the BOS token itself
    return PromptFrame(before, after, add_bos)


def model_frame(
    model_path: str | os.PathLike[str], *, task: str = DEFAULT_TASK, system: str | None = None
) -> PromptFrame:
    """The prompt frame of a GGUF model, from its own chat template and special tokens (or the
    completion frame of a base model).

    Cached on the file's identity: reading the GGUF with its whole vocabulary costs about half a
    second, and the window asks for the frame on every plan. A file replaced on disk (another
    mtime or size) is read again.
    """
    path = Path(model_path).resolve()
    try:
        st = path.stat()
    except OSError:  # the reader says what is wrong with the file, in its words
        return _read_frame(str(path), task, system)
    return _cached_frame(str(path), st.st_mtime_ns, st.st_size, task, system)


@functools.lru_cache(maxsize=32)
def _cached_frame(
    path: str, mtime_ns: int, size: int, task: str, system: str | None
) -> PromptFrame:
    del mtime_ns, size  # part of the cache key only
    return _read_frame(path, task, system)


def _read_frame(path: str, task: str, system: str | None) -> PromptFrame:
    gf = read_gguf(path, keep_arrays=("tokenizer.ggml.tokens",))
    tokens_v = gf.get("tokenizer.ggml.tokens")
    tokens = tokens_v.items if tokens_v is not None and tokens_v.items else ()

    def token_text(key: str) -> str:
        tid = gf.get(key)
        return tokens[tid] if isinstance(tid, int) and 0 <= tid < len(tokens) else ""

    return prompt_frame(
        gf.get("tokenizer.chat_template"),
        task=task,
        system=system,
        bos_token=token_text("tokenizer.ggml.bos_token_id"),
        eos_token=token_text("tokenizer.ggml.eos_token_id"),
        add_bos=bool(gf.get("tokenizer.ggml.add_bos_token", False)),
        completion=frames_for_completion(model_info(gf)),
    )


def compute_budget(n_ctx: int, reserve: int, frame: PromptFrame, counter: TokenCounter) -> Budget:
    if n_ctx < 1:
        raise ValueError("the context size must be at least one token")
    if reserve < 0:
        raise ValueError("the reply reserve cannot be negative")
    return Budget(n_ctx=n_ctx, template_tokens=frame.tokens(counter), reserve=reserve)


def document_budget(
    model_path: FrameSource,
    *,
    n_ctx: int,
    reserve: int,
    counter: TokenCounter,
    task: str = DEFAULT_TASK,
) -> Budget:
    """The budget around a document for ``task``: framed by the model's chat template (from
    its GGUF, or as a server reported it), or a plain task line when there is none."""
    if isinstance(model_path, ServerTemplate):
        t = model_path
        frame = prompt_frame(t.template, task=task, bos_token=t.bos_token,
                             eos_token=t.eos_token, add_bos=t.add_bos)  # fmt: skip
    elif model_path:
        frame = model_frame(model_path, task=task)
    else:
        frame = prompt_frame(None, task=task)
    return compute_budget(n_ctx, reserve, frame, counter)


def preflight(prompt_tokens: int, n_ctx: int, reserve: int) -> None:
    """Refuse, before anything reaches llama.cpp, a prompt that leaves no room for the reply."""
    if prompt_tokens + reserve > n_ctx:
        raise ContextOverflowError(prompt_tokens, n_ctx, reserve)
