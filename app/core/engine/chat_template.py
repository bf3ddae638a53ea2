"""Render a model's chat template safely.

A GGUF file (or a server) carries its chat template as Jinja source, written by whoever made it.
It is foreign code, held by two fences:

1. **The capped sandbox** (:func:`render_here`). Jinja's immutable sandbox (no attribute tricks,
   no mutation of our objects; an unsafe attribute is an error, not an empty string), with every
   result that one C-level call could make huge bounded *before* it is computed: the bit length
   of integer products and powers, the length of strings built by ``*``, ``+``, ``~``, ``%``,
   ``replace``, ``expandtabs``, ``join``, ``indent``, ``wordwrap``, ``translate`` and
   ``format``, the text a list or dict would print as, and the whole output. Nothing is folded
   while compiling (Jinja would otherwise call filters and operators on constants before any of
   this applies): every filter and test takes the context, every arithmetic operator is
   intercepted and the optimizer is off. A deadline and a memory ceiling are checked on every
   line the template executes.

2. **The renderer process** (:func:`render_chat_template`, :func:`check_chat_template`). The
   sandbox runs in a child process of its own, started on first use with an address-space limit
   (``RLIMIT_AS``) and a CPU-time limit, and without the app's environment. A call that the
   deadline cannot interrupt (one C-level operation the caps missed) is ended by killing that
   process shortly after the deadline, or at once when the caller cancels (``cancelled``); the
   next template starts a new one. Whatever the template does, the caller gets one
   :class:`ChatTemplateError` sentence within a few seconds, and its own memory is untouched.

The sandbox lives in :mod:`app.core.engine.template_sandbox`; this module is the renderer
process (both its sides, and its entry point: ``python -m app.core.engine.chat_template``),
and callers import the sandbox's names from here too.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from jinja2 import Template, TemplateError

from app.core.child_process import child_env, module_command
from app.core.engine.template_sandbox import (
    DEFAULT_TIME_LIMIT_S,
    MAX_GROWTH_KIB,
    MAX_INT_BITS,
    MAX_OUTPUT_CHARS,
    MAX_REPEAT_LEN,
    MAX_STRING_CHARS,
    MAX_TEMPLATE_CHARS,
    ChatTemplateError,
    check_messages,
    compile_chat_template,
    compiled_in_sandbox,
    render_here,
    watched,
)
from app.core.engine.types import CancelledError
from app.core.textutil import clip_message

# What callers import from here: this module's names and the sandbox's.
__all__ = [
    "DEFAULT_TIME_LIMIT_S",
    "KILL_GRACE_S",
    "MAX_GROWTH_KIB",
    "MAX_INT_BITS",
    "MAX_OUTPUT_CHARS",
    "MAX_REPEAT_LEN",
    "MAX_STRING_CHARS",
    "MAX_TEMPLATE_CHARS",
    "RENDERER_MEMORY",
    "RENDERER_START_S",
    "ChatTemplateError",
    "check_chat_template",
    "close_renderer",
    "compile_chat_template",
    "compiled_in_sandbox",
    "main",
    "render_chat_template",
    "render_here",
    "renderer_pid",
    "serve",
]

# ----- the renderer process: the parent's side ----------------------------------------------------

KILL_GRACE_S = 1.0  # how long past its deadline a template may run before its process is killed
RENDERER_MEMORY = 1 << 30  # address space the renderer may add to what it starts with
RENDERER_START_S = 60.0  # a busy machine can take long to start Python and import Jinja
_POLL_S = 0.02
# Only what Python, the clock and a packaged build's loader need: the renderer gets none of the
# app's secrets (API keys in the environment, for one).
_ENV_KEPT = ("PATH", "LANG", "LANGUAGE", "TZ", "HOME", "SYSTEMROOT", "TMPDIR", "PYTHONHOME",
             "PYTHONPATH", "PYTHONSAFEPATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH")  # fmt: skip
_ENV_KEPT_PREFIXES = ("LC_", "_PYI", "_MEI")


def _renderer_env() -> dict[str, str]:
    return {k: v for k, v in child_env().items()
            if k in _ENV_KEPT or k.startswith(_ENV_KEPT_PREFIXES)}  # fmt: skip


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            return f"it was ended by {signal.Signals(-code).name}"
        except ValueError:
            return f"it was ended by signal {-code}"
    return f"it exited with status {code}"


class _Renderer:
    """The handle on one renderer process: started on first use, replaced when it dies or is
    killed; one template at a time (callers from several threads take turns)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._owner = os.getpid()

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def ask(
        self, request: dict[str, Any], time_limit_s: float, cancelled: Callable[[], bool] | None
    ) -> Any:
        with self._lock:
            if cancelled is not None and cancelled():
                raise CancelledError("cancelled")
            conn, proc = self._start(cancelled)
            try:
                conn.send_bytes(json.dumps(request, default=str).encode("utf-8"))
            except (OSError, ValueError):
                raise self._died(proc) from None
            deadline = time.monotonic() + time_limit_s + KILL_GRACE_S
            while True:
                try:
                    if conn.poll(_POLL_S):
                        raw = conn.recv_bytes()
                        break
                except (EOFError, OSError):
                    raise self._died(proc) from None
                if proc.poll() is not None:
                    raise self._died(proc)
                if cancelled is not None and cancelled():
                    self._kill()
                    raise CancelledError("cancelled")
                if time.monotonic() > deadline:
                    self._kill()
                    raise ChatTemplateError(
                        f"the chat template did not finish within {time_limit_s:g} s"
                    )
        reply = json.loads(raw)
        if "ok" in reply:
            return reply["ok"]
        kind, message = reply.get("error"), clip_message(str(reply.get("message", "")))
        if kind == "memory" or reply.get("retired"):
            with self._lock:  # it ran out of memory and exits: never sent another template
                self._kill()
        if kind == "syntax":
            raise TemplateError(message)
        if kind == "recursion":
            raise RecursionError(message)
        raise ChatTemplateError(message)

    def _start(
        self, cancelled: Callable[[], bool] | None
    ) -> tuple[Connection, subprocess.Popen[bytes]]:
        if self._owner != os.getpid():  # a forked copy of this process: the child is not ours
            self._proc, self._conn, self._owner = None, None, os.getpid()
        if self._proc is not None and self._conn is not None and self._proc.poll() is None:
            return self._conn, self._proc
        self._kill()
        ours, theirs = socket.socketpair()
        with theirs:
            try:
                proc = subprocess.Popen(
                    module_command("app.core.engine.chat_template", "--fd", str(theirs.fileno()),
                                   "--parent", str(os.getpid())),
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=_renderer_env(),
                    start_new_session=True,  # a Ctrl+C in the terminal is the app's to handle
                )  # fmt: skip
            except OSError as exc:
                ours.close()
                raise ChatTemplateError(
                    f"the chat template cannot be rendered: its process did not start ({exc})"
                ) from None
        conn = Connection(ours.detach())
        self._proc, self._conn = proc, conn
        deadline = time.monotonic() + RENDERER_START_S
        try:
            while not conn.poll(_POLL_S):
                if proc.poll() is not None:
                    raise self._died(proc)
                if cancelled is not None and cancelled():
                    self._kill()
                    raise CancelledError("cancelled")
                if time.monotonic() > deadline:
                    self._kill()
                    raise ChatTemplateError("the chat template cannot be rendered: its process "
                                            "did not start in time")  # fmt: skip
            conn.recv_bytes()  # "ready"
        except (EOFError, OSError):
            raise self._died(proc) from None
        return conn, proc

    def _died(self, proc: subprocess.Popen[bytes]) -> ChatTemplateError:
        try:
            code = proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        self._kill()
        if code is not None and -code == getattr(signal, "SIGXCPU", -1):
            return ChatTemplateError("the chat template used too much CPU time")
        return ChatTemplateError(
            f"the chat template stopped its renderer ({_describe_exit(code)}; it may have "
            f"used more than {RENDERER_MEMORY // 2**20:,} MiB of memory)"
        )

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def close(self) -> None:
        """End the renderer (it also ends by itself when this process goes)."""
        with self._lock:
            self._kill()


_renderer = _Renderer()
atexit.register(_renderer.close)


def renderer_pid() -> int | None:
    """The running renderer process of this process, if any (for tests)."""
    return _renderer.pid


def close_renderer() -> None:
    """End this process's renderer; the next template starts a new one."""
    _renderer.close()


def render_chat_template(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    extra: Mapping[str, Any] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> str:
    """Render ``template`` for ``messages`` in the renderer process; raise ChatTemplateError
    with one clear sentence, or CancelledError as soon as ``cancelled()`` turns true."""
    check_messages(messages)
    request = {
        "op": "render",
        "template": template,
        "messages": [dict(m) for m in messages],
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
        "time_limit_s": time_limit_s,
        "extra": dict(extra or {}),
    }
    return str(_renderer.ask(request, time_limit_s, cancelled))


def check_chat_template(
    template: str,
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    cancelled: Callable[[], bool] | None = None,
) -> None:
    """Compile ``template`` in the renderer process: Jinja's TemplateError when it is not valid
    Jinja, RecursionError when it is nested too deeply to compile, ChatTemplateError when
    compiling it ran too long, CancelledError when ``cancelled()`` turned true."""
    _renderer.ask({"op": "check", "template": template, "time_limit_s": time_limit_s},
                  time_limit_s, cancelled)  # fmt: skip


# ----- the renderer process: the child's side -----------------------------------------------------


def _limit_self(parent: int) -> None:
    """Cap this process's address space (and leave no core file behind). It needs no signal to
    die with its parent: an idle renderer sees its pipe close, a busy one meets its CPU limit."""
    if os.getppid() != parent:
        os._exit(0)  # the parent is already gone
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    size = _address_space()
    if size:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = size + RENDERER_MEMORY
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space() -> int:
    """This process's address space now, in bytes (0 where /proc does not say)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _limit_cpu(time_limit_s: float) -> None:
    """A CPU-time limit a little past this request's deadline: the renderer ends itself
    (SIGXCPU) should its parent not be there to kill it."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    want = int(spent + time_limit_s + 2 * KILL_GRACE_S) + 1
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CPU, (want, hard))


class _Compiled:
    """The last few templates compiled (jobs render the same one again and again)."""

    def __init__(self, keep: int = 4) -> None:
        self._keep = keep
        self._by_text: dict[str, Template] = {}

    def get(self, template: str, time_limit_s: float) -> Template:
        found = self._by_text.pop(template, None)
        if found is None:
            with watched(time_limit_s):
                found = compiled_in_sandbox(template)
        self._by_text[template] = found
        while len(self._by_text) > self._keep:
            self._by_text.pop(next(iter(self._by_text)))
        return found


def _answer(request: dict[str, Any], compiled: _Compiled) -> dict[str, Any]:
    limit = float(request.get("time_limit_s", DEFAULT_TIME_LIMIT_S))
    template = request["template"]
    if request["op"] == "check":
        try:
            compiled.get(template, limit)
        except TemplateError as exc:
            return {"error": "syntax", "message": str(exc)}
        except RecursionError:
            return {"error": "recursion", "message": "nested too deeply to compile"}
        return {"ok": None}
    try:
        found = compiled.get(template, limit)
    except TemplateError as exc:
        return {"error": "template", "message": f"the chat template does not compile: {exc}"}
    except RecursionError:
        return {"error": "template", "message": "the chat template is nested too deeply to compile"}
    out = render_here(template, request["messages"],
                      add_generation_prompt=bool(request["add_generation_prompt"]),
                      bos_token=request["bos_token"], eos_token=request["eos_token"],
                      time_limit_s=limit, extra=request.get("extra"), compiled=found)  # fmt: skip
    return {"ok": out}


_OUT_OF_MEMORY = "the chat template ran out of memory"


def serve(fd: int, parent: int) -> None:
    """The renderer's loop: one template at a time, until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_self(parent)
    conn = Connection(fd)
    compiled = _Compiled()
    conn.send_bytes(b'"ready"')
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        _limit_cpu(float(request.get("time_limit_s", DEFAULT_TIME_LIMIT_S)))
        done = False
        try:
            reply = _answer(request, compiled)
        except ChatTemplateError as exc:  # raise_exception('x' * 40_000_000): said, not sent
            reply = {"error": "template", "message": clip_message(str(exc))}
            done = "ran out of memory" in str(exc)
        except MemoryError:
            reply, done = {"error": "memory", "message": _OUT_OF_MEMORY}, True
        except Exception as exc:  # the request itself was malformed: say so, carry on
            reply = {"error": "template", "message": clip_message(
                f"the chat template failed: {type(exc).__name__}: {exc}")}
        if done:
            reply["retired"] = True  # the caller starts a fresh renderer for the next template
        try:
            data = json.dumps(reply).encode("utf-8")
        except MemoryError:
            data = json.dumps({"error": "memory", "message": _OUT_OF_MEMORY,
                               "retired": True}).encode()  # fmt: skip
            done = True
        try:
            conn.send_bytes(data)
        except OSError:
            return
        if done:
            os._exit(0)  # memory ran out once: a fresh process serves the next template


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the renderer: ``python -P -m app.core.engine.chat_template --fd N``."""
    parser = argparse.ArgumentParser(prog="contextlens-chat-template")
    parser.add_argument("--fd", type=int, required=True, help="inherited socket for messages")
    parser.add_argument("--parent", type=int, required=True, help="the process to die with")
    args = parser.parse_args(argv)
    serve(args.fd, args.parent)


if __name__ == "__main__":
    main()
