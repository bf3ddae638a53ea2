"""contextlens-cli count / plan / chunk: the input buffer, headless.

Counting is exact when a model is available (the one given, or the default one): the fast
encoding is checked against llama.cpp in the engine host before it is used. Without a model,
counts and plans use the cl100k estimate and say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from app.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CONTEXT,
    EXIT_OK,
    BadInput,
    add_task_options,
    fail,
    task_of,
)
from app.core.textutil import terminal_safe


def read_document(path: str) -> Any:
    """The document, or one sentence (BadInput) saying why not. HTML, PDF and DOCX are read in
    a child process with a memory cap (app/core/documents/isolated.py); Ctrl+C ends it too."""
    from app.core.documents import DocumentError
    from app.core.documents.isolated import read_document as read_isolated

    try:
        return read_isolated(path)
    except DocumentError as exc:
        raise BadInput(str(exc)) from None


def model_path_or_default(arg: str | None) -> Path | None:
    """The model to count with: the one given (must exist), else the default one if present."""
    from app.core.default_model import default_model_path

    if arg:
        path = Path(arg).expanduser()
        if not path.is_file():
            raise BadInput(f"the model {arg} does not exist")
        return path
    path = default_model_path()
    return path if path.is_file() else None


@contextmanager
def _exact_counter(model: Path, *, continuation: bool = True) -> Iterator[Any]:
    """The exact counter for ``model``, with the engine host it was checked against (which holds
    only the vocabulary: no weights are read to count). ``continuation``: count texts as the
    jobs put them into a prompt (tokens.host_counter), else each as a whole text."""
    from app.services.errors import BadRequest
    from app.services.exact_count import exact_counter

    with ExitStack() as stack:
        try:
            counter = stack.enter_context(exact_counter(model, continuation=continuation))
        except BadRequest as exc:
            raise BadInput(str(exc)) from None
        yield counter  # the host stays up: a counter that falls back to llama.cpp needs it


def _counter(arg: str | None, stack: ExitStack) -> tuple[Any, Path | None]:
    from app.core.tokens import cl100k

    model = model_path_or_default(arg)
    if model is None:
        return cl100k(), None
    return stack.enter_context(_exact_counter(model)), model


# ---------------------------------------------------------------------------------------------


def cmd_count(args: argparse.Namespace) -> int:
    from app.core.tokens import cl100k, counter_method

    try:
        doc = read_document(args.document)
        with ExitStack() as stack:
            model = model_path_or_default(args.model)
            # the whole document as llama.cpp tokenizes a text from its start
            exact = (stack.enter_context(_exact_counter(model, continuation=False))
                     if model else None)  # fmt: skip
            t0 = time.perf_counter()
            tokens_model = exact.count(doc.text) if exact else None
            t1 = time.perf_counter()
            tokens_cl100k = cl100k().count(doc.text)
            t2 = time.perf_counter()
    except BadInput as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    data = {
        "document": str(doc.path),
        "format": doc.format,
        "encoding": doc.encoding,
        "lossy": doc.lossy,
        "bytes": doc.size,
        "chars": len(doc.text),
        "model": str(model) if model else None,
        "tokens_model": tokens_model,
        "tokens_cl100k": tokens_cl100k,
        "seconds": round(t2 - t0, 4),
        "seconds_model": round(t1 - t0, 4),
        "seconds_cl100k": round(t2 - t1, 4),
        "counter": counter_method(exact) if exact else None,
    }
    if args.json:
        print(json.dumps(data))
        return EXIT_OK
    print(f"{terminal_safe(doc.name)}: {doc.size:,} bytes, {len(doc.text):,} characters "
          f"({doc.format}, {doc.encoding}{', lossy' if doc.lossy else ''})")  # fmt: skip
    if tokens_model is not None and exact is not None and model is not None:
        print(f"  {tokens_model:>12,} tokens  {terminal_safe(model.name)} (exact, "
              f"{t1 - t0:.2f} s; {counter_method(exact)})")  # fmt: skip
    else:
        print("  no model: pass --model or fetch the default one for exact counts")
    print(f"  {tokens_cl100k:>12,} tokens  cl100k_base (estimate, {t2 - t1:.2f} s)")
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    """The plans `run` would make, with its budget: the same task, reply room and frame
    (app.services.jobs.plan_job), before any model is loaded for it."""
    from app.core.engine.types import ContextOverflowError
    from app.core.planning.strategies import QUESTION_STRATEGIES, STRATEGIES, Planner, needle_spans
    from app.core.tokens import counter_method
    from app.services.errors import BadRequest
    from app.services.jobs import JobSpec, plan_job

    names = list(STRATEGIES) if args.strategy == "all" else [args.strategy]
    try:
        if args.strategy != "all" and args.strategy not in STRATEGIES:
            raise BadInput(f"unknown strategy {args.strategy!r} (choose one of "
                           f"{', '.join(STRATEGIES)}, or all)")  # fmt: skip
        spec = JobSpec(task_of(args), tuple(names), questions=tuple(args.question or ()),
                       instruction=args.instruction or "", max_tokens=args.max_tokens)  # fmt: skip
        # `all` under a summary shows retrieve's plan refused with the sentence run would say
        checked = [n for n in names if args.strategy != "all" or spec.task != "summarize"
                   or n not in QUESTION_STRATEGIES]  # fmt: skip
        dataclasses.replace(spec, strategies=tuple(checked)).check()
        if args.n_ctx < 1 or (args.reserve is not None and args.reserve < 0):
            raise BadInput("--n-ctx must be at least 1 and --reserve at least 0")
        if not 0 <= args.overlap < 1:
            raise BadInput("--overlap must be at least 0 and less than 1")
        doc = read_document(args.document)
        with ExitStack() as stack:
            counter, model = _counter(args.model, stack)
            made = plan_job(spec, Planner(doc, counter), model, args.n_ctx, reserve=args.reserve,
                            overlap=args.overlap)  # fmt: skip
            roomless = [m.budget for m in made if m.budget.available < 1]
            if len(roomless) == len(made):  # not even the frame and the reply fit
                b = roomless[0]
                raise ContextOverflowError(b.template_tokens + 1, b.n_ctx, b.reserve)
    except (BadInput, BadRequest) as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    except ContextOverflowError as exc:
        return fail(EXIT_CONTEXT, f"no room for the document: {exc}", args.json)
    except ValueError as exc:  # a chat template that cannot frame a document
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    needles = needle_spans(doc.text, args.needle or [])
    if args.needle and not needles:
        return fail(EXIT_BAD_INPUT, "none of the --needle texts occurs in the document", args.json)
    for m in made:
        p, budget = m.plan, m.budget
        data = {**p.as_dict(), "task": spec.task, "counter": counter.name,
                "exact": counter.exact, "counter_method": counter_method(counter),
                **{k: v for k, v in budget.as_dict().items() if k != "available"}}  # fmt: skip
        if needles:
            data["needle_retention"] = round(p.needle_retention(needles), 4)
        if args.json:
            print(json.dumps(data))
        else:
            _print_plan(p, budget, counter)
            if needles:
                print(f"  needle retention {data['needle_retention']:.0%} of {len(needles)}")
    if len(made) == 1 and made[0].plan.refused:
        # the whole prompt against the context, as the preflight says it, then the plan's words
        p, budget = made[0].plan, made[0].budget
        needed = budget.template_tokens + p.total_tokens
        message = (f"prompt needs {needed:,} tokens, context is {budget.n_ctx:,} "
                   f"(reply reserve {budget.reserve:,}): {p.refused}")  # fmt: skip
        print(f"error: refused: {message}", file=sys.stderr)
        return EXIT_CONTEXT
    return EXIT_OK


def _print_plan(p: Any, budget: Any, counter: Any) -> None:
    from app.core.tokens import LlamaCounter, counter_method

    kind = "exact" if counter.exact else "estimate"
    print(
        f"{p.strategy}: budget {p.budget:,} tokens = context {budget.n_ctx:,} - template "
        f"{budget.template_tokens:,} - reply reserve {budget.reserve:,} ({counter.name}, {kind})"
    )
    if p.question:
        print(f"  for the question: {p.question}")
    if isinstance(counter, LlamaCounter):  # exact but slow: say why, so a long wait is explained
        print(f"  counted by {counter_method(counter)}")
    kept, total = p.of_document()  # of the whole text's count, as `count` and the window say
    print(
        f"  kept {kept:,} of {total:,} tokens; peak {p.peak_tokens:,} in "
        f"context; boundary integrity {p.boundary_integrity:.1%}; planned in {p.seconds:.2f} s"
    )
    if p.refused:
        print(f"  refused: {p.refused}")
    if p.windows:
        print(f"  {len(p.windows):,} passes of at most {p.peak_tokens:,} tokens")
    for label, spans in (("kept", p.kept), ("dropped", p.dropped)):
        for s in spans[:8]:
            print(f"  {label:7s} {s.start:>10,}-{s.end:<10,} {s.tokens:>8,} tok  {s.reason}")
        if len(spans) > 8:
            print(f"  {label:7s} ... {len(spans) - 8:,} more spans")


def cmd_chunk(args: argparse.Namespace) -> int:
    from app.core.planning.chunking import overlapping_chunks

    try:
        if args.max_tokens < 1:
            raise BadInput("--max-tokens must be at least 1")
        if not 0 <= args.overlap < 1:
            raise BadInput("--overlap must be at least 0 and less than 1")
        doc = read_document(args.document)
        with ExitStack() as stack:
            counter, _model = _counter(args.model, stack)
            t0 = time.perf_counter()
            chunks = overlapping_chunks(doc, counter, args.max_tokens, args.overlap)
            seconds = time.perf_counter() - t0
    except BadInput as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    rows = [{"index": c.index, "start": c.start, "end": c.end, "tokens": c.tokens,
             "boundary": c.boundary.name.lower()} for c in chunks]  # fmt: skip
    if args.json:
        data = {"document": str(doc.path), "counter": counter.name, "exact": counter.exact,
                "max_tokens": args.max_tokens, "overlap": args.overlap, "chunks": rows,
                "seconds": round(seconds, 4)}  # fmt: skip
        print(json.dumps(data))
        return EXIT_OK
    print(f"{doc.name}: {len(chunks):,} chunks of at most {args.max_tokens:,} tokens "
          f"({counter.name}), {seconds:.2f} s")  # fmt: skip
    for r in rows:
        text = doc.text[r["start"] : r["end"]].strip().replace("\n", " ")
        preview = text[:60] + ("…" if len(text) > 60 else "")
        print(f"  #{r['index']:<5} {r['start']:>9,}-{r['end']:<9,} {r['tokens']:>6,} tok "
              f"{r['boundary']:9s} {preview}")  # fmt: skip
    return EXIT_OK


def add_commands(sub: Any) -> None:
    """Register count, plan and chunk on the main parser's subcommands."""
    from app.core.planning.strategies import STRATEGIES

    p = sub.add_parser("count", help="count a document's tokens (exact and cl100k)")
    p.add_argument("document", help="txt, md, source code, html, pdf or docx file")
    p.add_argument("--model", help="GGUF model for exact counts (default: the default model)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_count)

    p = sub.add_parser("plan", help="show what an overflow strategy keeps and drops")
    p.add_argument("document")
    p.add_argument("--model", help="GGUF model (default: the default model)")
    p.add_argument("--n-ctx", type=int, required=True, help="context size in tokens")
    p.add_argument("--strategy", required=True, help=f"{', '.join(STRATEGIES)}, or all")
    add_task_options(p)
    p.add_argument("--max-tokens", type=int, default=256,
                   help="longest reply, as for run (default 256): the reply's room")  # fmt: skip
    p.add_argument("--reserve", type=int,
                   help="tokens kept for the reply instead of what run keeps (--max-tokens, "
                        "and room for the question or rolling's running summary)")  # fmt: skip
    p.add_argument("--overlap", type=float, default=0.15, help="window overlap for semantic")
    p.add_argument("--needle", action="append", help="a planted fact to look for (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object per plan")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("chunk", help="cut a document into chunks on semantic boundaries")
    p.add_argument("document")
    p.add_argument("--max-tokens", type=int, required=True, help="token budget per chunk")
    p.add_argument("--overlap", type=float, default=0.0, help="share repeated from the last")
    p.add_argument("--model", help="GGUF model for exact counts (default: the default model)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_chunk)
