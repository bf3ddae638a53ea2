"""Render a model's chat template safely.

A GGUF file carries its chat template as Jinja source, written by whoever made the file. It is
rendered in Jinja's immutable sandbox (no attribute tricks, no mutation of our objects; an
unsafe attribute is an error, not an empty string), with string/list repetition, powers, padding
widths and every numeric argument capped, and under a wall-clock deadline and a memory ceiling
that are checked on the lines the compiled template executes, so a template that loops forever or
builds a gigabyte string ends in a clear error instead of a hung or exhausted engine.
"""

from __future__ import annotations

import functools
import operator
import re
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import FrameType
from typing import Any

from jinja2 import TemplateError, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

DEFAULT_TIME_LIMIT_S = 2.0
MAX_REPEAT_LEN = 1_000_000  # longest string or list that `*` may build; largest number argument
MAX_OUTPUT_CHARS = 50_000_000
MAX_GROWTH_KIB = 512 * 1024  # the most the process's peak memory may grow while rendering
_WIDE = re.compile(r"\d{7,}")  # a width or precision of a million or more in a format string


class ChatTemplateError(ValueError):
    """The template failed, was too slow, or tried something the sandbox forbids."""


class _Deadline(Exception):
    pass


class _TooBig(Exception):
    pass


def _peak_kib() -> int:
    """The process's peak resident memory so far, in KiB (Linux's unit for ru_maxrss)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _check_arguments(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse a number over the cap: how a short call builds something huge (``center(10**10)``,
    ``ljust``, ``indent``, ``wordwrap``)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int | float) and abs(value) > MAX_REPEAT_LEN:
            raise ChatTemplateError(f"the chat template passes a number too large ({value:.3g})")


def _check_format(spec: Any) -> None:
    """Refuse a format string with a width or precision of a million or more."""
    if isinstance(spec, str) and _WIDE.search(spec):
        raise ChatTemplateError("the chat template formats with a width that is too large")


def _guarded(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A filter or test with its arguments checked (``wraps`` keeps Jinja's pass_* marks)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        _check_arguments(args, kwargs)
        if name == "format" and args:
            _check_format(args[0])
        return fn(*args, **kwargs)

    return call


class _GenerationTag(Extension):
    """HuggingFace's ``{% generation %}...{% endgeneration %}`` marks: rendered as their body."""

    tags = {"generation"}  # noqa: RUF012 (Jinja's own declaration style)

    def parse(self, parser: Parser) -> list[nodes.Node]:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _CappedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(extensions=[loopcontrols, _GenerationTag], **options)
        self.filters = {name: _guarded(name, f) for name, f in self.filters.items()}
        self.tests = {name: _guarded(name, f) for name, f in self.tests.items()}

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(
            f"access to attribute {attribute!r} of a {type(obj).__name__} object is unsafe"
        )

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_arguments(args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        if getattr(value, "__name__", "") in ("format", "format_map"):
            _check_format(getattr(value, "__self__", None))  # read when looked up, not called
        return super().wrap_str_format(value)

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
        if operator_name == "%":
            _check_format(left)
            return operator.mod(left, right)
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


def compiled_in_sandbox(template: str) -> Any:
    """The template compiled in the capped sandbox, or Jinja's TemplateError (Jinja folds
    constant expressions while compiling: they meet the same caps, and what escapes them is
    reported as a TemplateError too; a RecursionError, from a template nested too deeply to
    parse, is left to the caller)."""
    try:
        return _environment().from_string(template)
    except TemplateError:
        raise
    except (MemoryError, OverflowError, ValueError) as exc:
        raise TemplateError(f"{type(exc).__name__}: {exc}") from None


def compile_chat_template(template: str) -> Any:
    """The template compiled in the capped sandbox; ChatTemplateError when it does not compile."""
    try:
        return compiled_in_sandbox(template)
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template does not compile: {exc}") from None
    except RecursionError:
        raise ChatTemplateError("the chat template is nested too deeply to compile") from None


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
    compiled = compile_chat_template(template)
    deadline = time.monotonic() + time_limit_s
    ceiling = _peak_kib() + MAX_GROWTH_KIB
    ticks = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal ticks
        ticks += 1
        if time.monotonic() > deadline:
            raise _Deadline
        if ticks % 64 == 0 and _peak_kib() > ceiling:
            raise _TooBig
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
    except _TooBig:
        raise ChatTemplateError(
            f"the chat template used more than {MAX_GROWTH_KIB // 1024:,} MiB of memory"
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
