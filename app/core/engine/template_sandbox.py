"""The capped Jinja sandbox a model's chat template renders in: the first of its two fences.

Jinja's immutable sandbox (no attribute tricks, no mutation of our objects; an unsafe attribute
is an error, not an empty string), with every result that one C-level call could make huge
bounded *before* it is computed: the bit length of integer products and powers, the length of
strings built by ``*``, ``+``, ``~``, ``%``, ``replace``, ``expandtabs``, ``join``, ``indent``,
``wordwrap``, ``translate`` and ``format``, the text a list or dict would print as, and the
whole output. Nothing is folded while compiling (Jinja would otherwise call filters and
operators on constants before any of this applies): every filter and test takes the context,
every arithmetic operator is intercepted and the optimizer is off. A deadline and a memory
ceiling are checked on every line the template executes (:func:`watched`), except the lines of
this module's own guards, which are bounded work.

The second fence, the renderer process this runs in, is :mod:`app.core.engine.chat_template`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import operator
import re
import resource
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import FrameType
from typing import Any, cast

from jinja2 import Template, TemplateError, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension, loopcontrols
from jinja2.filters import make_attrgetter
from jinja2.parser import Parser
from jinja2.runtime import markup_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, pass_context

DEFAULT_TIME_LIMIT_S = 2.0
MAX_REPEAT_LEN = 1_000_000  # longest string or list that `*` may build; largest number argument
MAX_OUTPUT_CHARS = 50_000_000
MAX_STRING_CHARS = MAX_OUTPUT_CHARS  # longest string any one operation may build
MAX_INT_BITS = 1 << 16  # largest integer an operation may compute (about 19,700 digits)
MAX_TEMPLATE_CHARS = 1 << 20  # GGUF files carry 128 KiB at most (gguf_reader.py); servers far less
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


# ----- bounds, checked before an operation runs ---------------------------------------------------


def _too_long() -> ChatTemplateError:
    return ChatTemplateError("the chat template builds an implausibly long string")


def _check_arguments(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse a number over the cap: how a short call builds something huge (``center(10**10)``,
    ``ljust``, ``indent``, ``wordwrap``)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int | float) and abs(value) > MAX_REPEAT_LEN:
            shown = f"{value:.3g}" if abs(value) < 1e300 else "an enormous number"
            raise ChatTemplateError(f"the chat template passes a number too large ({shown})")


def _check_format(spec: Any) -> None:
    """Refuse a format string with a width or precision of a million or more."""
    if isinstance(spec, str) and _WIDE.search(spec):
        raise ChatTemplateError("the chat template formats with a width that is too large")


_SCALAR_TEXT = 26  # the most a float, bool or None prints as


def _flat_size(items: Any) -> int | None:
    """The printed size of a collection of strings alone, or of numbers alone, counted by
    C-level calls (a million items in milliseconds); None when it holds anything else."""
    n = len(items)
    if all(map(isinstance, items, itertools.repeat(str))):
        return sum(map(len, items)) + 4 * n + 2
    if all(map(isinstance, items, itertools.repeat(int))):  # bools too
        return sum(map(int.bit_length, items)) // 3 + 4 * n + 2
    if all(map(isinstance, items, itertools.repeat(float | bool | type(None)))):
        return (_SCALAR_TEXT + 2) * n + 2
    return None


def _text_size(value: Any, limit: int = MAX_STRING_CHARS) -> int:
    """About how many characters ``str(value)`` has, counted without building it (a list of a
    million references to a list of a million strings prints as 10**12 characters, in one
    C-level call); counting stops soon after ``limit``. Each object is measured once."""
    if isinstance(value, str | bytes | bytearray):
        return len(value) * (1 if isinstance(value, str) else 4)
    memo: dict[int, int] = {}

    def size(v: Any) -> int:
        if isinstance(v, str):
            return len(v) + 2
        if isinstance(v, bytes | bytearray):
            return 4 * len(v) + 3
        if v is None or isinstance(v, bool | float | complex):
            return _SCALAR_TEXT
        if isinstance(v, int):
            return v.bit_length() // 3 + 2
        if isinstance(v, Namespace):
            v = getattr(v, "_Namespace__attrs", {})
        if not isinstance(v, list | tuple | set | frozenset | dict):
            return 80  # another object: a short repr
        key = id(v)
        if key in memo:
            return memo[key]
        memo[key] = 5  # a cycle prints as [...]
        total = _flat_size(v) if not isinstance(v, dict) else None
        if total is None and isinstance(v, dict):
            keys, values = _flat_size(list(v)), _flat_size(list(v.values()))
            total = None if keys is None or values is None else keys + values
        if total is None:
            total = 2
            for item in v.items() if isinstance(v, dict) else v:
                total += size(item) + 2
                if total > limit:
                    break
        memo[key] = total
        return total

    return size(value)


def _check_text(*values: Any) -> None:
    """Refuse values whose text would be implausibly long (strings are always fine: they were
    bounded when built)."""
    for value in values:
        if not isinstance(value, str) and _text_size(value) > MAX_STRING_CHARS:
            raise _too_long()


def _check_length(n: int) -> None:
    if n > MAX_STRING_CHARS:
        raise _too_long()


def _check_int_bits(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise ChatTemplateError("the chat template computes a number that is too large")


def _replaced_length(s: str | bytes, old: Any, new: Any, count: Any) -> int:
    """The length of ``s.replace(old, new, count)``, computed without replacing."""
    kind = str if isinstance(s, str) else bytes
    if not isinstance(old, kind) or not isinstance(new, kind):
        return len(s)  # the call itself refuses them
    n = len(s) + 1 if not old else s.count(old)  # type: ignore[arg-type]
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return len(s) + n * (len(new) - len(old))


def _check_str_method(obj: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Bound the result of a str or bytes method called from a template; returns the arguments
    to call it with (``join``'s iterable, read once, as a list)."""
    name = getattr(obj, "__name__", "")
    s = getattr(obj, "__self__", None)
    if not isinstance(s, str | bytes) or name not in ("replace", "expandtabs", "join",
                                                      "translate"):  # fmt: skip
        return args
    try:
        bound = inspect.signature(obj).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return args  # the call itself says what is wrong
    given = list(bound.arguments.values())
    if name == "replace" and len(given) >= 2:
        count = given[2] if len(given) > 2 else -1
        _check_length(_replaced_length(s, given[0], given[1], count))
    elif name == "expandtabs":
        tab = given[0] if given and isinstance(given[0], int) else 8
        _check_length(len(s) + s.count(b"\t" if isinstance(s, bytes) else "\t") * tab)  # type: ignore[arg-type]
    elif name == "join" and given:
        items = list(given[0])
        if all(map(isinstance, items, itertools.repeat(str | bytes))):  # else join refuses them
            _check_length(sum(map(len, items)) + len(s) * max(len(items) - 1, 0))
        return [items]
    elif name == "translate" and given:
        table = given[0]
        if isinstance(table, Mapping):
            longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
            _check_length(len(s) * max(longest, 1))
    return args


# ----- filters and tests: never folded while compiling, their results bounded ---------------------

# Filters that do not turn their value into text (the others print it, and are bounded so).
_NOT_TEXT = frozenset({
    "abs", "attr", "batch", "count", "d", "default", "dictsort", "first", "float", "groupby",
    "int", "items", "join", "last", "length", "list", "map", "max", "min", "random", "reject",
    "rejectattr", "reverse", "round", "select", "selectattr", "slice", "sort", "sum", "unique",
    "filesizeformat",
})  # fmt: skip


def _bounded_filter(name: str, env: Any, a: dict[str, Any]) -> None:
    """Bound the result of filter ``name`` called with the arguments ``a`` (by parameter name,
    defaults filled in); ``join`` and ``sum`` get their iterable read once, as a list."""
    if name == "replace":
        s = a["s"] if isinstance(a["s"], str) else str(a["s"])
        a["s"] = s
        _check_length(_replaced_length(s, str(a["old"]), str(a["new"]),
                                       -1 if a["count"] is None else a["count"]))  # fmt: skip
    elif name == "indent":
        s, width = a["s"], a["width"]
        w = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        if isinstance(s, str):
            _check_length(len(s) + (s.count("\n") + 2) * w)
    elif name == "wordwrap":
        s, width, wrap = a["s"], a["width"], a["wrapstring"]
        wrap_len = len(wrap) if isinstance(wrap, str) else 1
        if isinstance(s, str) and isinstance(width, int) and width > 0:
            _check_length(len(s) + (len(s) // width + s.count("\n") + 1) * wrap_len)
    elif name == "format":
        value, fields = a["value"], [*a["args"], *a["kwargs"].values()]
        if isinstance(value, str) and fields:
            largest = max(_text_size(f) for f in fields)
            _check_length(len(value) + value.count("%") * largest)
    elif name == "join":
        items = list(a["value"])
        if a["attribute"] is not None:
            items = list(map(make_attrgetter(env, a["attribute"]), items))
            a["attribute"] = None
        a["value"] = items
        sep = a["d"] if isinstance(a["d"], str) else str(a["d"])
        _check_length(len(sep) * max(len(items) - 1, 0) + _text_size(items))
    elif name == "sum":
        items = list(a["iterable"])
        if a["attribute"] is not None:
            items = list(map(make_attrgetter(env, a["attribute"]), items))
            a["attribute"] = None
        a["iterable"] = items
        every = [a["start"], *items]
        sequences = list(
            itertools.compress(every, map(isinstance, every, itertools.repeat(str | list | tuple)))
        )
        if len(sequences) > 1:  # added one by one: every prefix is copied again
            _check_length(sum(map(len, sequences)) * len(sequences) // 2)
    elif name == "list" and isinstance(a["value"], str) and len(a["value"]) > MAX_REPEAT_LEN:
        raise ChatTemplateError("the chat template builds a list that is too long")


_BOUNDED = frozenset({"replace", "indent", "wordwrap", "format", "join", "sum", "list"})


def _guarded(name: str, fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """A filter or test that takes the context, so Jinja never calls it while compiling (it
    folds calls on constants, before any cap applies: an 88 KiB template of ``replace`` calls
    took 1.9 GiB to compile), with its arguments checked and its result bounded."""
    wants = getattr(fn, "jinja_pass_arg", None)
    wants_name = getattr(wants, "name", None)
    signature: inspect.Signature | None = None
    if kind == "filter" and name in _BOUNDED:
        params = list(inspect.signature(fn).parameters.values())
        signature = inspect.Signature(params[1:] if wants_name else params)

    def first_argument(context: Any) -> tuple[Any, ...]:
        if wants_name == "context":
            return (context,)
        if wants_name == "eval_context":
            return (context.eval_ctx,)
        if wants_name == "environment":
            return (context.environment,)
        return ()

    @functools.wraps(fn)
    def call(context: Any, *args: Any, **kwargs: Any) -> Any:
        _check_arguments(args, kwargs)
        if name == "format" and args:
            _check_format(args[0])
        if kind == "filter" and name not in _NOT_TEXT:
            _check_text(*args, *kwargs.values())
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                pass  # the filter itself says what is wrong
            else:
                bound.apply_defaults()
                _bounded_filter(name, context.environment, bound.arguments)
                args, kwargs = bound.args, bound.kwargs
        return fn(*first_argument(context), *args, **kwargs)

    return pass_context(call)


# ----- the environment ----------------------------------------------------------------------------


class _GenerationTag(Extension):
    """HuggingFace's ``{% generation %}...{% endgeneration %}`` marks: rendered as their body."""

    tags = {"generation"}  # noqa: RUF012 (Jinja's own declaration style)

    def parse(self, parser: Parser) -> list[nodes.Node]:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, with ``a ~ b`` joined through ``environment.checked_concat``."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.checked_concat(context, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _bounded_join(pieces: Iterable[str]) -> str:
    """Every buffer's join (the output, macros, ``{% set %}`` blocks), refused before it is
    built when it would be implausibly long."""
    parts: list[str] = []
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > MAX_OUTPUT_CHARS:
            raise ChatTemplateError("the chat template produced an implausibly long prompt")
        parts.append(piece)
    return "".join(parts)


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}`` before it is printed: a list or dict must print short enough."""
    _check_text(value)
    return value


class _CappedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    code_generator_class = _BoundedCodeGenerator
    concat = staticmethod(_bounded_join)

    def __init__(self, **options: Any) -> None:
        super().__init__(extensions=[loopcontrols, _GenerationTag], optimized=False,
                         finalize=_finalize, **options)  # fmt: skip
        self.filters = {name: _guarded(name, f, "filter") for name, f in self.filters.items()}
        # Jinja's test table is inferred as dict[str, function], which mypy does not call
        tests = cast(dict[str, Callable[..., Any]], self.tests)
        self.tests = {name: _guarded(name, f, "test") for name, f in tests.items()}

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(
            f"access to attribute {attribute!r} of a {type(obj).__name__} object is unsafe"
        )

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_arguments(args, kwargs)
        # A str.format reached some other way than an attribute lookup (``|attr('format')`` on
        # Jinja 3.1.5, CVE-2025-27516) is sandboxed here all the same.
        __obj = __self.wrap_str_format(__obj) or __obj
        args = _check_str_method(__obj, args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        if getattr(value, "__name__", "") not in ("format", "format_map"):
            return None
        spec = getattr(value, "__self__", None)
        _check_format(spec)  # read when looked up, not called
        wrapped = super().wrap_str_format(value)
        if wrapped is None or not isinstance(spec, str):
            return wrapped

        @functools.wraps(wrapped)
        def bounded(*args: Any, **kwargs: Any) -> str:
            fields = [*args, *kwargs.values()]
            if fields and isinstance(fields[0], Mapping) and value.__name__ == "format_map":
                fields = list(fields[0].values())
            if fields:
                _check_length(len(spec) + spec.count("{") * max(map(_text_size, fields)))
            return wrapped(*args, **kwargs)

        return bounded

    def checked_concat(self, context: Any, parts: tuple[Any, ...]) -> str:
        """``a ~ b ~ ...``: each part printed (if short enough to print), the whole bounded."""
        total = 0
        for part in parts:
            total += _text_size(part)
            _check_length(total)
        if context.eval_ctx.autoescape:
            return markup_join(parts)
        return "".join(map(str, parts))

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "*":
            for seq, n in ((left, right), (right, left)):
                repeats = isinstance(seq, str | list | tuple) and isinstance(n, int)
                if repeats and len(seq) * max(n, 0) > MAX_REPEAT_LEN:
                    raise ChatTemplateError("the chat template builds a string that is too long")
            if isinstance(left, int) and isinstance(right, int):
                _check_int_bits(left.bit_length() + right.bit_length())
            return operator.mul(left, right)
        if operator_name == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0:
                if abs(left) > 1:
                    _check_int_bits(left.bit_length() * right)
            elif isinstance(right, int) and abs(right) > MAX_INT_BITS:
                raise ChatTemplateError("the chat template computes a number that is too large")
            return operator.pow(left, right)
        if operator_name == "+":
            if isinstance(left, str) and isinstance(right, str):
                _check_length(len(left) + len(right))
            elif (isinstance(left, list | tuple) and isinstance(right, list | tuple)
                  and len(left) + len(right) > MAX_REPEAT_LEN):  # fmt: skip
                raise ChatTemplateError("the chat template builds a list that is too long")
            return operator.add(left, right)
        if operator_name == "%":
            if isinstance(left, str):
                _check_format(left)
                fields = list(right.values() if isinstance(right, Mapping) else
                              right if isinstance(right, tuple) else (right,))  # fmt: skip
                if fields:
                    _check_length(len(left) + left.count("%") * max(map(_text_size, fields)))
            return operator.mod(left, right)
        return super().call_binop(context, operator_name, left, right)


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the messages: {message}")


def _strftime_now(fmt: str) -> str:
    if not isinstance(fmt, str) or len(fmt) > 1000:  # "%d %B %Y"; each "%c" prints 24 characters
        raise ChatTemplateError("the chat template formats a date with an implausible format")
    return datetime.now().strftime(fmt)


def _environment() -> _CappedSandbox:
    env = _CappedSandbox(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


# ----- compiling and rendering in this process ----------------------------------------------------


def compiled_in_sandbox(template: str) -> Template:
    """The template compiled in the capped sandbox, or Jinja's TemplateError (nothing is folded
    while compiling, so only a template that is not valid Jinja fails here; a RecursionError,
    from a template nested too deeply to parse, is left to the caller)."""
    if len(template) > MAX_TEMPLATE_CHARS:
        raise TemplateError(
            f"it is {len(template):,} characters long, more than the limit of "
            f"{MAX_TEMPLATE_CHARS:,}"
        )
    try:
        return _environment().from_string(template)
    except TemplateError:
        raise
    except (MemoryError, OverflowError, ValueError) as exc:
        raise TemplateError(f"{type(exc).__name__}: {exc}") from None


def compile_chat_template(template: str) -> Template:
    """The template compiled in the capped sandbox; ChatTemplateError when it does not compile."""
    try:
        return compiled_in_sandbox(template)
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template does not compile: {exc}") from None
    except RecursionError:
        raise ChatTemplateError("the chat template is nested too deeply to compile") from None


def check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise ChatTemplateError(f"message {i} needs a 'role' and a 'content'")


@contextlib.contextmanager
def watched(time_limit_s: float) -> Iterator[None]:
    """Trace every line run inside: past the deadline or the memory ceiling, stop it."""
    deadline = time.monotonic() + time_limit_s
    ceiling = _peak_kib() + MAX_GROWTH_KIB
    ticks = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal ticks
        ticks += 1
        if time.monotonic() > deadline:
            raise _Deadline
        if ticks % 16 == 0 and _peak_kib() > ceiling:
            raise _TooBig
        # The guards' own lines are bounded work: traced, they would take ten times as long.
        return None if frame.f_code.co_filename == __file__ else tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    except _Deadline:
        raise ChatTemplateError(
            f"the chat template did not finish within {time_limit_s:g} s"
        ) from None
    except _TooBig:
        raise ChatTemplateError(
            f"the chat template used more than {MAX_GROWTH_KIB // 1024:,} MiB of memory"
        ) from None
    finally:
        sys.settrace(previous)


def render_here(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    extra: Mapping[str, Any] | None = None,
    compiled: Template | None = None,
) -> str:
    """Render ``template`` for ``messages`` in this process, in the capped sandbox (the
    renderer process's own work; anything else calls :func:`render_chat_template`)."""
    check_messages(messages)
    context = {
        "messages": [dict(m) for m in messages],
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
        **(extra or {}),
    }
    try:
        with watched(time_limit_s):
            if compiled is None:
                compiled = compile_chat_template(template)
            out = compiled.render(context)
    except ChatTemplateError:
        raise
    except RecursionError:
        raise ChatTemplateError("the chat template recursed too deeply") from None
    except MemoryError:
        raise ChatTemplateError("the chat template ran out of memory") from None
    except Exception as exc:  # a template is foreign code: any failure is its failure
        raise ChatTemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from None
    if len(out) > MAX_OUTPUT_CHARS:
        raise ChatTemplateError("the chat template produced an implausibly long prompt")
    return out
