"""The engine host's child side: the one process that touches llama.cpp, and its request loop.

Everything native happens here, so that an abort, a segfault or an illegal instruction inside
llama.cpp ends this process and never the app. The parent (``host.py``) sends one request at a
time over a pipe; this loop answers with ``("ok", result)``, a stream of ``("event", ...)`` or
``("err", kind, payload)``. It is the single serial owner of the llama context, a
:class:`~app.core.engine.llama_engine.LlamaEngine` (each request one of its public methods).

Cancel arrives through a shared flag, not the pipe, so it is seen while a request runs: between
generated tokens, and inside a long prompt decode through llama.cpp's abort callback.

What a single reply shares with the batched replies of the lanes (``lanes.py``) is in modules of
its own that both import: decoding and cancel (``decoding.py``), the sampler chain
(``sampler.py``), tokens to streamed text with stop strings and loops (``reply_text.py``). The
lanes get the loaded model from the engine as :class:`LlamaHandles`, never the engine itself.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from app.core import config
from app.core.engine.api import CHILD_OPERATIONS, STREAMED_OPERATIONS
from app.core.engine.chat_template import ChatTemplateError
from app.core.engine.ipc import SharedFlag
from app.core.engine.llama_base import StepHook
from app.core.engine.llama_engine import LlamaEngine
from app.core.engine.types import (
    CancelledError,
    ContextOverflowError,
    EngineNotLoadedError,
    ModelLoadError,
)


def _error_reply(exc: BaseException) -> tuple[str, str, Any]:
    if isinstance(exc, ContextOverflowError):
        return ("err", "overflow", (exc.prompt_tokens, exc.n_ctx, exc.reserve))
    kinds: list[tuple[type[BaseException], str]] = [
        (ModelLoadError, "load"),
        (EngineNotLoadedError, "not-loaded"),
        (CancelledError, "cancelled"),
        (ChatTemplateError, "template"),
        (ValueError, "value"),
    ]
    for cls, kind in kinds:
        if isinstance(exc, cls):
            return ("err", kind, str(exc))
    return ("err", "engine", f"{type(exc).__name__}: {exc}")


def serve(conn: Connection, cancel_flag: SharedFlag, step_hook: StepHook | None = None,
          test_operations: Mapping[str, Callable[..., Any]] | None = None) -> None:  # fmt: skip
    """Child main loop: answer requests until the pipe closes or a 'close' request arrives.
    Only the operations the engine API declares are answered (``api.CHILD_OPERATIONS``); any
    other name is refused in one sentence. ``step_hook`` and ``test_operations``: a test's
    checkpoint in the engine (see :data:`StepHook`) and its own requests (tests/fault_child.py:
    a native crash on demand); None in the app."""
    engine = LlamaEngine(cancel_flag, step_hook)
    extra = dict(test_operations or {})
    conn.send(("ok", engine.capabilities()))
    while True:
        try:
            op, kwargs = conn.recv()
        except (EOFError, OSError):
            break
        if op == "close":
            engine.unload()
            conn.send(("ok", None))
            break
        try:
            if op in STREAMED_OPERATIONS:  # events, then the last one
                getattr(engine, op)(emit=lambda ev: conn.send(("event", ev)), **kwargs)
                continue
            if op in CHILD_OPERATIONS:
                handler = getattr(engine, op)
            elif op in extra:
                handler = extra[op]
            else:
                raise ValueError(f"unknown engine operation {op!r}")
            conn.send(("ok", handler(**kwargs)))
        except Exception as exc:
            if not isinstance(exc, ValueError | EngineNotLoadedError | ModelLoadError):
                traceback.print_exc(file=sys.stderr)
            conn.send(_error_reply(exc))


def main(argv: Sequence[str] | None = None, *, step_hook: StepHook | None = None,
         test_operations: Mapping[str, Callable[..., Any]] | None = None) -> None:  # fmt: skip
    """Entry point of the child: ``python -m app.core.engine.child --fd N --flag PATH``.
    ``step_hook``, ``test_operations``: as :func:`serve` (a test's own entry module passes
    them)."""
    parser = argparse.ArgumentParser(prog="contextlens-engine")
    parser.add_argument("--fd", type=int, required=True, help="inherited socket for messages")
    parser.add_argument("--flag", required=True, help="file holding the shared cancel byte")
    args = parser.parse_args(argv)
    conn = Connection(args.fd)
    flag = SharedFlag(args.flag)
    try:
        serve(conn, flag, step_hook, test_operations)
    finally:
        flag.close()
        conn.close()


if __name__ == "__main__":
    with config.using():  # the environment, read once (app/core/config.py)
        main()
