"""Render a model's chat template safely.

A GGUF file carries its chat template as Jinja source, written by whoever made the file. It is
rendered in Jinja's immutable sandbox (no attribute tricks, no mutation of our objects), with
string/list repetition and powers capped, and under a wall-clock deadline that is checked on every
line the compiled template executes, so a template that loops forever or builds a gigabyte string
ends in a clear error instead of a hung or exhausted engine.
"""

from __future__ import annotations

import operator
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import FrameType
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

DEFAULT_TIME_LIMIT_S = 2.0
MAX_REPEAT_LEN = 1_000_000  # longest string or list that `*` may build
MAX_OUTPUT_CHARS = 50_000_000


class ChatTemplateError(ValueError):
    """The template failed, was too slow, or tried something the sandbox forbids."""


class _Deadline(Exception):
    pass


class _CappedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "*":
            for seq, n in ((left, right), (right, left)):
                repeats = isinstance(seq, str | list | tuple) and isinstance(n, int)
                if repeats and len(seq) * max(n, 0) > MAX_REPEAT_LEN:
                    raise ChatTemplateError("the chat template builds a string that is too long")
            return operator.mul(left, right)
        if operator_name == "**":
            if isinstance(right, int) and abs(right) > 64:
                raise ChatTemplateError("the chat template computes a power that is too large")
            return operator.pow(left, right)
        return super().call_binop(context, operator_name, left, right)


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the messages: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> _CappedSandbox:
    env = _CappedSandbox(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def render_chat_template(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """Render ``template`` for ``messages``; raise ChatTemplateError with one clear sentence."""
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise ChatTemplateError(f"message {i} needs a 'role' and a 'content'")
    env = _environment()
    try:
        compiled = env.from_string(template)
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template does not compile: {exc}") from None

    deadline = time.monotonic() + time_limit_s

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise _Deadline
        return tracer

    context = {
        "messages": [dict(m) for m in messages],
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
        **(extra or {}),
    }
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = compiled.render(context)
    except _Deadline:
        raise ChatTemplateError(
            f"the chat template did not finish within {time_limit_s:g} s"
        ) from None
    except ChatTemplateError:
        raise
    except RecursionError:
        raise ChatTemplateError("the chat template recursed too deeply") from None
    except MemoryError:
        raise ChatTemplateError("the chat template ran out of memory") from None
    except Exception as exc:  # a template is foreign code: any failure is its failure
        raise ChatTemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from None
    finally:
        sys.settrace(previous)
    if len(out) > MAX_OUTPUT_CHARS:
        raise ChatTemplateError("the chat template produced an implausibly long prompt")
    return out
