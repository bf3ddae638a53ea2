"""What every contextlens-cli command shares: the exit codes and the one-line error."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from app.core.jobs.options import TASKS
from app.core.textutil import terminal_safe
from app.services.errors import BadOption, BadRequest

# A contract: 0 done, 2 bad input, 3 engine crashed, 4 refused (does not fit), 5 the audit found
# a mismatch (``run --audit``), 130 cancelled.
EXIT_OK, EXIT_BAD_INPUT, EXIT_ENGINE_CRASHED, EXIT_CONTEXT, EXIT_CANCELLED = 0, 2, 3, 4, 130
EXIT_AUDIT = 5


class BadInput(BadRequest):
    """One sentence for the person; the command exits with code 2."""


def sentence(exc: BaseException) -> str:
    """An error as the command line says it: a job option by its flag (``--max-tokens``)."""
    if isinstance(exc, BadOption):
        return f"--{exc.option.replace('_', '-')} {exc.problem}"
    return str(exc)


def db_path(arg: str | None) -> Path | None:
    """``--db``: the history database given, or None for the user's."""
    return Path(arg).expanduser() if arg else None


def fail(code: int, message: str, as_json: bool) -> int:
    """Report an error as one line on stderr (and a JSON line with --json); return the code.
    The line's control characters are escaped: it may quote a file's name or its header."""
    if as_json:
        print(json.dumps({"type": "error", "exit_code": code, "message": message}), flush=True)
    print(f"error: {terminal_safe(message)}", file=sys.stderr, flush=True)
    return code


def warn(message: str) -> None:
    """A warning on stderr, its control characters escaped (a load warning quotes the model's
    chat template, a server's what the server said)."""
    print(f"warning: {terminal_safe(message)}", file=sys.stderr, flush=True)


def done_record(result: Any) -> dict[str, Any]:
    """The last JSON line of a job: its figures and outputs."""
    data = result.as_dict()
    return {
        "type": "done",
        "task": data["task"],
        "strategy": data["strategy"],
        "finish_reason": data["finish_reason"],
        "prompt_tokens": data["prompt_tokens"],
        "evaluated_tokens": data["evaluated_tokens"],
        # what llama.cpp evaluated (the cache held the rest) against the document's size
        "prompt_tokens_evaluated": data["prompt_tokens_evaluated"],
        "document_tokens": data["document_tokens"],
        "evaluated_per_document_token": data["evaluated_per_document_token"],
        # a pass streamed through the KV ring (segments evicted, tokens they held), or why not
        "evictions": data["evictions"],
        "evicted_tokens": data["evicted_tokens"],
        "fallback": data["fallback"],
        "completion_tokens": data["completion_tokens"],
        "kv_peak_cells": data["kv_peak_cells"],
        "n_ctx": data["n_ctx"],
        "lanes": data["lanes"],  # the map phase's replies generated this many at a time (or null)
        # llama.cpp's thread count at the end, and each change while the job ran (why, when)
        "threads": data["threads"],
        "thread_changes": data["thread_changes"],
        "ttft_s": [round(t, 4) for t in data["ttft_s"]],
        "seconds": round(data["seconds"], 3),
        "truncated": data["truncated"],
        "refused": data["refused"],
        "error": data["error"],
        "plan": data["plan"],
        "outputs": [
            # each sentence of an answer or a summary and the kept sentence that supports it
            {"text": o["text"], "source_spans": o["source_spans"], "step": o["step"],
             "alignment": o["alignment"]}
            for o in data["outputs"]
        ],
    }


@contextlib.contextmanager
def sigint_cancels(token: Any) -> Iterator[Callable[[Any], None]]:
    """While inside, Ctrl+C sets ``token`` (a CancelToken or an Event) and cancels the engine
    handed to the function this yields, once there is one; a second Ctrl+C quits hard."""
    engines: list[Any] = []

    def on_sigint(_sig: int, _frame: FrameType | None) -> None:
        token.set()
        for engine in engines:
            engine.cancel()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield engines.append
    finally:
        signal.signal(signal.SIGINT, previous)


def add_task_options(parser: argparse.ArgumentParser) -> None:
    """``--task``, ``--question`` and ``--instruction``, read by :func:`task_of` (run, compare,
    plan, batch)."""
    parser.add_argument("--task",
                        help="summarize, ask or extract (default: ask when --question is given, "
                             "extract when --instruction is, else summarize); a --question or "
                             "--instruction the task would not use is refused")  # fmt: skip
    parser.add_argument("--question", action="append",
                        help="a question to ask (repeatable; means --task ask); retrieve plans "
                             "once per question")  # fmt: skip
    parser.add_argument(
        "--instruction", help="for extract: what to do with each part (means --task extract)"
    )


# the text each task reads besides the document: (flag, task, what it is for)
_TEXTS = (("--question", "ask", "to ask it"), ("--instruction", "extract", "to extract with it"))


def task_of(args: argparse.Namespace) -> str:
    """The job's task: ``--task``, or the one the text given means (a question is asked, an
    instruction extracts, neither summarizes). A text the named task would drop is refused
    (BadInput): `--task summarize --question Q` never answered Q."""
    given = {"--question": any(q.strip() for q in args.question or ()),
             "--instruction": bool((args.instruction or "").strip())}  # fmt: skip
    if args.task is None:
        if all(given.values()):
            raise BadInput("--question is for ask and --instruction for extract: give one "
                           "of them")  # fmt: skip
        return next((task for flag, task, _ in _TEXTS if given[flag]), "summarize")
    if args.task not in TASKS:
        return str(args.task)  # JobSpec.check names the tasks
    for flag, task, purpose in _TEXTS:
        if given[flag] and args.task != task:
            raise BadInput(f"--task {args.task} does not use {flag}: use --task {task} "
                           f"{purpose}, or leave {flag} out")  # fmt: skip
    return str(args.task)


def add_thread_options(parser: argparse.ArgumentParser) -> None:
    """``--threads`` and ``--fixed-threads``: the local engine's CPU threads."""
    parser.add_argument("--threads", type=int, default=None,
                        help="most CPU threads llama.cpp uses (default: the physical cores); "
                             "fewer while other programs keep cores busy")  # fmt: skip
    parser.add_argument("--fixed-threads", action="store_true",
                        help="always use --threads, however busy the machine is")


def load_settings(args: argparse.Namespace, **fields: Any) -> Any:
    """LoadSettings from the thread options and ``fields``; --threads below 1 is refused by
    LoadSettings.validate in one sentence."""
    from app.core.engine.types import LoadSettings

    if args.threads is not None:
        fields["n_threads"] = args.threads
    return LoadSettings(adapt_threads=not args.fixed_threads, **fields)
