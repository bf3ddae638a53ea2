"""The engine host: llama.cpp in a child process, driven from the app through a pipe.

A native crash inside llama.cpp (a failed GGML_ASSERT, a segfault, an illegal instruction, the
kernel's OOM killer) kills only the child. The parent notices on its next read, raises
:class:`EngineCrashedError` naming the signal and what to do, and the next :meth:`EngineHost.load`
starts a fresh child. The GGUF header is checked here, in the parent, before the child sees it:
every part of a split model, and the child loads the very files checked (model_files.py).

One request is in flight at a time (the llama context is not thread-safe); :meth:`cancel` is the
one method that may be called from any thread, and it reaches the child through a shared flag. A
cancelled load ends at once when the child is checking the model's chat template, and with the
child when llama.cpp does not stop by itself soon after.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Any

from app.core.child_process import child_env, module_command
from app.core.engine import scratch
from app.core.engine.chat_template import ChatTemplateError
from app.core.engine.gguf import CheckedFile, GGUFError, ModelInfo, check_parts
from app.core.engine.ipc import SharedFlag
from app.core.engine.threads import GOMP_SPINCOUNT
from app.core.engine.types import (
    CancelledError,
    ContextOverflowError,
    EngineCapabilities,
    EngineCrashedError,
    EngineError,
    EngineNotLoadedError,
    EvalResult,
    Finished,
    GenerationEvent,
    KVEdit,
    KVState,
    KVUsage,
    LaneEvent,
    LanesFinished,
    LoadedModel,
    LoadSettings,
    ModelLoadError,
    OnFull,
    SamplingSettings,
    TextDelta,
)
from app.core.telemetry import memory_preflight
from app.core.vocab_tokenizer import tokenizer_header

START_TIMEOUT_S = 60.0
POLL_S = 0.05
# A cancelled load that has not stopped by itself this long after the cancel (llama.cpp reading a
# large file cannot be interrupted) ends with its child, which holds nothing else yet.
LOAD_CANCEL_GRACE_S = 1.5

_SIGNAL_MEANING = {
    signal.SIGSEGV: "a segmentation fault inside llama.cpp",
    signal.SIGABRT: "an abort inside llama.cpp (usually a failed GGML_ASSERT)",
    signal.SIGILL: (
        "an illegal instruction: this llama.cpp build uses CPU instructions this machine "
        "cannot run; rebuild it for this CPU (see README, 'Building llama.cpp')"
    ),
    signal.SIGBUS: "a bus error inside llama.cpp (the model file may have changed on disk)",
    signal.SIGFPE: "an arithmetic fault inside llama.cpp",
    signal.SIGKILL: "it was killed (often the system ran out of memory)",
    signal.SIGTERM: "it was terminated",
}


def describe_exit(exitcode: int | None) -> str:
    """Turn a child exit code into words: 'SIGSEGV (a segmentation fault inside llama.cpp)'."""
    if exitcode is None:
        return "it stopped answering"
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode)
        except ValueError:
            return f"it was stopped by signal {-exitcode}"
        meaning = _SIGNAL_MEANING.get(sig)
        return f"{sig.name} ({meaning})" if meaning else sig.name
    return f"it exited with status {exitcode}"


def engine_env() -> dict[str, str]:
    """The engine child's environment: the app's, with OpenMP's barrier spin bounded
    (threads.GOMP_SPINCOUNT) unless the person set it."""
    env = child_env()
    env.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)
    return env


class EngineHost:
    """The app's handle on the engine child process."""

    # The module the child runs (``python -m``, with ``--fd`` and ``--flag``): the app's own; the
    # crash-isolation tests start theirs, which installs a fault and then runs this one's main.
    child_module = "app.core.engine.child"

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._flag: SharedFlag | None = None
        self._tmpdir: Path | None = None
        self.capabilities: EngineCapabilities | None = None
        self.model: LoadedModel | None = None
        self.model_info: ModelInfo | None = None
        self.vocab_path: str | None = None  # a vocabulary loaded alone (load_vocab)
        self._busy_with = ""
        self._op = ""  # the request in flight, so a crash report can say what it means
        self._log_mark = 0  # where the child's log stood when that request was sent

    # ----- life cycle -----

    def __enter__(self) -> EngineHost:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EngineCapabilities:
        """Start the child if it is not running (it imports llama.cpp: about a second)."""
        with self._lock:
            if self.alive and self.capabilities is not None:
                return self.capabilities
            self._reap()
            self._tmpdir = scratch.make()
            self._flag = SharedFlag(self._tmpdir / "cancel.flag", create=True)
            ours, theirs = socket.socketpair()
            with (self._tmpdir / "engine.log").open("wb") as log, theirs:
                # The child's stderr goes to a file: native code (ggml asserts) writes there, and
                # the parent quotes it when the child dies. It never has the working directory on
                # its path (child_process.py): a folder's own app/ is not imported in its place.
                self._proc = subprocess.Popen(
                    module_command(self.child_module, "--fd", str(theirs.fileno()),
                                   "--flag", str(self._flag.path)),
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    env=engine_env(),
                    start_new_session=True,  # a Ctrl+C in the terminal is the parent's to handle
                )  # fmt: skip
            self._conn = Connection(ours.detach())
            self._busy_with, self._op, self._log_mark = "starting", "start", 0
            reply = self._recv(timeout=START_TIMEOUT_S)
            self._busy_with = self._op = ""
            self.capabilities = self._unwrap(reply)
            return self.capabilities

    def close(self) -> None:
        """Stop the child politely, then firmly; safe to call more than once."""
        with self._lock:
            if self._conn is not None and self.alive:
                try:
                    self._conn.send(("close", {}))
                    if self._conn.poll(5):
                        self._conn.recv()
                except (OSError, EOFError):
                    pass
            self._reap()

    def _reap(self) -> None:
        if self._proc is not None:
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        if self._conn is not None:
            self._conn.close()
        if self._flag is not None:
            self._flag.close()
        if self._tmpdir is not None:
            scratch.remove(self._tmpdir)
        self._proc = self._conn = self._flag = self._tmpdir = None
        self.capabilities = None
        self.model = None
        self.vocab_path = None

    # ----- transport -----

    def _crashed(self) -> EngineCrashedError:
        code: int | None = None
        if self._proc is not None:
            try:
                code = self._proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                code = None
        native = self._native_last_words()
        doing = f" while {self._busy_with}" if self._busy_with else ""
        # A file that kills llama.cpp while loading will do so again: do not suggest a retry,
        # unless it was killed from outside (most often the system running out of memory).
        if self._op != "load":
            advice = "load the model again to start a new engine"
        elif code == -signal.SIGKILL:
            advice = "load it again once memory is free, or with a smaller context"
        else:
            advice = "but llama.cpp cannot load this file as it is"
        msg = f"the engine process died{doing}: {describe_exit(code)}; the app is unaffected, "
        msg += advice
        if native:
            msg += f" (llama.cpp said: {native})"
        self._reap()
        return EngineCrashedError(msg, code)

    def _native_last_words(self) -> str:
        """The most telling line the child wrote to stderr during the request that killed it."""
        if self._tmpdir is None:
            return ""
        try:
            with (self._tmpdir / "engine.log").open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(self._log_mark, fh.tell() - 8192))
                lines = fh.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        for key in ("GGML_ASSERT", "GGML_ABORT", "terminate called", "error", "Error"):
            for line in reversed(lines):
                if key in line and not line.startswith(("Traceback", "Fatal Python")):
                    return line.strip()[:300]
        return ""

    def _log_size(self) -> int:
        try:
            return (self._tmpdir / "engine.log").stat().st_size if self._tmpdir else 0
        except OSError:
            return 0

    def _recv(self, timeout: float | None = None, cancel_grace: float | None = None) -> Any:
        """The child's next message. ``cancel_grace``: once a cancel has waited this long for
        the request to stop, the child is killed and the request ends as cancelled."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cancelled_at: float | None = None
        conn = self._conn
        if conn is None:
            raise EngineCrashedError("the engine is not running; load a model to start it")
        while True:
            try:
                if conn.poll(POLL_S):
                    return conn.recv()
            except (EOFError, OSError):
                raise self._crashed() from None
            if not self.alive:
                # The child may have sent its last words before dying: read them first.
                try:
                    if conn.poll(0):
                        return conn.recv()
                except (EOFError, OSError):
                    pass
                raise self._crashed()
            if deadline is not None and time.monotonic() > deadline and self._proc is not None:
                self._proc.kill()
                raise self._crashed()
            if cancel_grace is not None and self._flag is not None and self._flag.is_set():
                now = time.monotonic()
                cancelled_at = cancelled_at or now
                if now - cancelled_at > cancel_grace and self._proc is not None:
                    doing = self._busy_with
                    self._proc.kill()
                    self._reap()
                    raise CancelledError(f"cancelled {doing}; the engine stopped with it")

    @staticmethod
    def _unwrap(reply: Any) -> Any:
        tag = reply[0]
        if tag == "ok":
            return reply[1]
        if tag == "err":
            _, kind, payload = reply
            if kind == "overflow":
                raise ContextOverflowError(*payload)
            cls: type[Exception] = {
                "load": ModelLoadError,
                "not-loaded": EngineNotLoadedError,
                "cancelled": CancelledError,
                "template": ChatTemplateError,
                "value": ValueError,
            }.get(kind, EngineError)
            raise cls(payload)
        raise EngineError(f"unexpected reply from the engine: {tag!r}")

    def _send(self, op: str, doing: str, kwargs: dict[str, Any]) -> None:
        """Start one request in the running child (the caller holds the lock)."""
        conn, flag = self._conn, self._flag  # set with the process, and cleared with it
        if self._proc is None or conn is None or flag is None:
            raise EngineCrashedError("the engine is not running; load a model to start it")
        if not self.alive:
            raise self._crashed()
        flag.clear()
        self._busy_with, self._op, self._log_mark = doing, op, self._log_size()
        try:
            conn.send((op, kwargs))
        except (OSError, EOFError):
            raise self._crashed() from None

    def _call(self, op: str, doing: str, *, cancel_grace: float | None = None,
              **kwargs: Any) -> Any:  # fmt: skip
        with self._lock:
            self._send(op, doing, kwargs)
            try:
                return self._unwrap(self._recv(cancel_grace=cancel_grace))
            finally:
                self._busy_with = self._op = ""

    # ----- operations -----

    def cancel(self) -> None:
        """Ask the running operation to stop; safe from any thread, a no-op when idle."""
        flag = self._flag
        if flag is not None:
            # ValueError: the engine closed at this very moment, so there is nothing to cancel.
            with contextlib.suppress(ValueError):
                flag.set()

    def load(
        self, path: str | os.PathLike[str], settings: LoadSettings | None = None
    ) -> LoadedModel:
        """Check the GGUF header of every file of the model here, then load it in the child
        (starting one if needed), which gives llama.cpp those files or none (model_files.py)."""
        settings = settings or LoadSettings()
        settings.validate()
        try:
            checked = check_parts(path)
        except GGUFError as exc:
            raise ModelLoadError(f"cannot load {Path(path).name}: {exc}") from None
        info = checked.info
        memory_preflight(info, settings)  # InsufficientMemoryError before anything is allocated
        with self._lock:
            if not self.alive:
                self.start()
            assert self.capabilities is not None
            if settings.n_gpu_layers and not self.capabilities.gpu_offload_supported:
                # the layers will stay on the CPU: the KV cache and weights must fit in RAM
                memory_preflight(info, settings, gpu_offload=False)
            self.model = None
            self.vocab_path = None
            # A cancel stops the load: the child stops checking the chat templates at once, and
            # is killed if llama.cpp does not finish soon.
            loaded: LoadedModel = self._call("load", f"loading {Path(path).name}",
                                cancel_grace=LOAD_CANCEL_GRACE_S,
                                path=str(Path(path).resolve()), settings=settings,
                                files=checked.files)  # fmt: skip
            self.model, self.model_info = loaded, info
            return loaded

    def load_vocab(self, path: str | os.PathLike[str]) -> int:
        """Load only the model's vocabulary, for counting: no weights are read (milliseconds and
        megabytes, also for a 70B model), and vocabulary-only GGUF files work. A loaded model is
        unloaded. Returns the vocabulary size."""
        try:
            header = tokenizer_header(path)  # one sentence for a bad file, before llama.cpp
        except GGUFError as exc:
            raise ModelLoadError(f"cannot read {Path(path).name}: {exc}") from None
        resolved = str(Path(path).resolve())
        files = (CheckedFile(resolved, header.identity),) if header.identity else ()
        with self._lock:
            if not self.alive:
                self.start()
            self.model = None
            n_vocab = self._call("load_vocab", f"reading the vocabulary of {Path(path).name}",
                                 path=resolved, files=files)  # fmt: skip
            self.vocab_path = resolved
            return int(n_vocab)

    def _need_model(self) -> None:
        if self.model is None:
            raise EngineNotLoadedError("no model is loaded; load one first")

    def _need_vocab(self) -> None:
        if self.model is None and self.vocab_path is None:
            raise EngineNotLoadedError("no model is loaded; load one first")

    def tokenize_many(
        self, texts: Sequence[str], *, parse_special: bool = False, continuation: bool = False
    ) -> list[list[int]]:
        """Each text tokenized on its own (no BOS), on the child's cores (``continuation``: as
        :meth:`tokenize`)."""
        self._need_vocab()
        ids: list[list[int]] = self._call("tokenize_many", "tokenizing", texts=list(texts),
                                          parse_special=parse_special,
                                          continuation=continuation)  # fmt: skip
        return ids

    def token_attrs(self) -> list[int]:
        """llama.cpp's attribute of every token of the loaded vocabulary."""
        self._need_vocab()
        attrs: list[int] = self._call("token_attrs", "reading the token attributes")
        return attrs

    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = True,
        parse_special: bool = False,
        continuation: bool = False,
    ) -> list[int]:
        """llama.cpp's tokens of ``text``. With ``continuation``, as the text would be tokenized
        in the middle of a prompt: without the space a SentencePiece model such as Llama 2 or
        Mistral puts before a text tokenized from its start (a document chunk or the words after
        it; no other model differs)."""
        self._need_vocab()
        ids: list[int] = self._call("tokenize", "tokenizing", text=text, add_special=add_special,
                                    parse_special=parse_special,
                                    continuation=continuation)  # fmt: skip
        return ids

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        self._need_model()
        text: str = self._call("detokenize", "detokenizing", tokens=list(tokens), special=special)
        return text

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = True
    ) -> str:
        self._need_model()
        prompt: str = self._call("apply_chat_template", "applying the chat template",
                                 messages=[dict(m) for m in messages],
                                 add_generation_prompt=add_generation_prompt)  # fmt: skip
        return prompt

    def evaluate(self, tokens: Sequence[int]) -> EvalResult:
        """Append tokens to the KV cache (no prefix matching)."""
        self._need_model()
        result: EvalResult = self._call("evaluate", "evaluating tokens", tokens=list(tokens))
        return result

    def reset(self) -> None:
        """Empty the KV cache."""
        self._need_model()
        self._call("reset", "clearing the KV cache")

    def kv_usage(self) -> KVUsage:
        self._need_model()
        usage: KVUsage = self._call("kv_usage", "reading KV usage")
        return usage

    def kv_tokens(self) -> list[int]:
        """The token ids the KV cache holds, by position (what an audit compares with the plan)."""
        self._need_model()
        tokens: list[int] = self._call("kv_tokens", "reading the KV tokens")
        return tokens

    def save_state(self) -> KVState:
        """The KV cache of the sequence with its tokens. The bytes travel through a file in the
        engine's private folder (RAM-backed where /dev/shm exists): a pipe would copy tens of
        megabytes in small pieces, several times slower than llama.cpp's own save."""
        self._need_model()
        path = self._exchange_file()
        try:
            header: KVState = self._call("save_state", "saving the KV state", path=str(path))
            return dataclasses.replace(header, data=path.read_bytes())
        finally:
            path.unlink(missing_ok=True)

    def restore_state(self, state: KVState) -> int:
        """Put a saved KV state back (same model, n_ctx and cache type); the next generation
        that starts with ``state.tokens`` evaluates only what follows them."""
        self._need_model()
        path = self._exchange_file()
        try:
            path.write_bytes(state.data)
            header = dataclasses.replace(state, data=b"")
            restored: int = self._call("restore_state", "restoring the KV state", state=header,
                                       path=str(path))  # fmt: skip
            return restored
        finally:
            path.unlink(missing_ok=True)

    def _exchange_file(self) -> Path:
        assert self._tmpdir is not None
        return self._tmpdir / "kv-state.bin"

    def remove(self, start: int, end: int, *, compact: bool = True) -> KVEdit:
        """Remove KV positions ``[start, end)`` and move what follows down (see Ring.evict);
        ``compact``: and the cells to the front of the cache after a large hole (the default;
        False is the benchmark's baseline)."""
        self._need_model()
        edit: KVEdit = self._call("remove", "removing from the KV cache", start=start, end=end,
                                  compact=compact)  # fmt: skip
        return edit

    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int = 256,
        sampling: SamplingSettings | None = None,
        stop: Sequence[str] = (),
        on_full: OnFull = "stop",
        keep: int = 0,
    ) -> Iterator[GenerationEvent]:
        """Stream a reply to ``prompt`` (token ids). The last event is always :class:`Finished`.

        The KV cache keeps the prompt and reply afterwards, so a next prompt that starts the same
        way evaluates only its new tokens. Abandoning the iterator cancels the generation. When
        the context fills, ``on_full="stop"`` ends the reply (reason ``length``); ``"shift"``
        drops half of what follows the first ``keep`` positions and goes on, with a
        :class:`Shifted` event.
        """
        yield from self._stream("generate", "generating", Finished, {
            "prompt": list(prompt),
            "max_tokens": max_tokens,
            "sampling": sampling or SamplingSettings(),
            "stop": list(stop),
            "on_full": on_full,
            "keep": keep,
        })  # fmt: skip

    def generate_lanes(
        self,
        prefix: Sequence[int],
        suffixes: Sequence[Sequence[int]],
        *,
        lanes: int,
        max_tokens: int = 256,
        sampling: SamplingSettings | None = None,
        stop: Sequence[str] = (),
    ) -> Iterator[LaneEvent]:
        """Stream replies to ``prefix + suffix`` for every suffix, ``lanes`` of them generated
        together as parallel sequences in one batch. The last event is :class:`LanesFinished`.

        Each reply is the one :meth:`generate` would give to that prompt (identical with one
        lane; greedy replies may differ by floating-point rounding with more). The loaded
        context's cache is not touched. Abandoning the iterator cancels every lane.
        """
        yield from self._stream("generate_lanes", "generating in lanes", LanesFinished, {
            "prefix": list(prefix),
            "suffixes": [list(s) for s in suffixes],
            "lanes": lanes,
            "max_tokens": max_tokens,
            "sampling": sampling or SamplingSettings(),
            "stop": list(stop),
        })  # fmt: skip

    def _stream(self, op: str, doing: str, last: type, kwargs: dict[str, Any]) -> Iterator[Any]:
        """The events of a streamed request, up to and including the ``last`` kind."""
        self._need_model()
        with self._lock:
            self._send(op, doing, kwargs)
            finished = False  # True once the child has sent its last message for this request
            try:
                while not finished:
                    reply = self._recv()
                    if reply[0] != "event":
                        finished = True
                        self._unwrap(reply)  # raises the engine's error
                        raise EngineError(f"unexpected reply from the engine: {reply[0]!r}")
                    event = reply[1]
                    finished = isinstance(event, last)
                    yield event
            finally:
                if not finished and self.alive:
                    # The consumer stopped early: cancel and drain so the next request starts clean.
                    assert self._flag is not None  # the child is alive, so its flag is there
                    self._flag.set()
                    while True:
                        reply = self._recv()
                        if reply[0] != "event" or isinstance(reply[1], last):
                            break
                self._busy_with = self._op = ""

    def generate_text(self, prompt: Sequence[int], **kwargs: Any) -> tuple[str, Finished]:
        """Convenience: the whole reply as one string, and the finish record."""
        parts: list[str] = []
        last: Finished | None = None
        for ev in self.generate(prompt, **kwargs):
            if isinstance(ev, TextDelta):
                parts.append(ev.text)
            elif isinstance(ev, Finished):
                last = ev
        assert last is not None
        return "".join(parts), last
