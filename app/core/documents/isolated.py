"""Reading a document where a hostile file can cost neither the app's memory nor its patience.

HTML, PDF and DOCX go through large parsers (BeautifulSoup and lxml, pypdf, python-docx). Their
work is bounded by the readers' caps (``Limits``), but the bounds are in the millions, and a
thread cannot be stopped. So these formats are read in a child process, started the way the
engine's child is (``python -m``, a socket pair, its own session, an empty private working
folder so no ``app`` package lying in the current folder can be imported in its place), whose
address space is capped (``RLIMIT_AS``, ``Limits.reader_memory_bytes``), whose processor time is
capped (``RLIMIT_CPU``, :data:`READER_CPU_S`), which gets only the environment Python needs (no
API key or token) and ends when its parent does, and which :func:`read_document` kills as soon as
its ``cancel`` event is set. If the child dies, only the read fails, in one sentence.

Plain text, Markdown and source code are read in this process: their reading is linear (decode,
then line rules) and already bounded by the size cap, and starting a child (~0.1–0.3 s of
Python start-up and imports, measured in tests/core/test_documents_hostile.py) would more than
double the time a small note takes to open. The format is decided from the file's first
kilobyte, the way :func:`load_document` decides it; a file that changes in between is read as
the format first seen, never parsed as a container in this process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

from app.core.cancelled import Cancelled
from app.core.child_process import minimal_env
from app.core.documents import load_document
from app.core.documents.child import unpack
from app.core.documents.formats import FORMATS, format_for_name, resolve_format
from app.core.documents.messages import human_size
from app.core.documents.model import ContentChanged, Document, DocumentError, Limits
from app.core.documents.reading import check_file, read_file, read_head

IN_PROCESS: Final = frozenset({"text", "markdown", "code"})
POLL_S: Final = 0.05
# The processor time a reader child may use: the largest real documents read in seconds, and
# the readers' caps bound the rest; a parser that loops is stopped here.
READER_CPU_S: Final = 120
_ZIP_MAGIC: Final = (b"PK\x03\x04", b"PK\x05\x06")
_DEFAULT_LIMITS: Final = Limits()


def read_document(
    path: str | os.PathLike[str],
    *,
    limits: Limits = _DEFAULT_LIMITS,
    format: str | None = None,
    cancel: threading.Event | None = None,
    expect_sha256: str | None = None,
) -> Document:
    """:func:`load_document`, with HTML, PDF and DOCX read in a killable, memory-capped child.

    Raises :class:`DocumentError` (one sentence) for a file that cannot be read, and
    :class:`Cancelled` once ``cancel`` is set. Safe to call from any thread. With
    ``expect_sha256``, other bytes raise ContentChanged: before parsing in this process, after
    parsing (under the child's caps) in the child."""
    if format is not None and format not in FORMATS:
        raise ValueError(f"unknown document format {format!r}; expected one of {FORMATS}")
    file_path = Path(path)
    name = file_path.name or str(file_path)
    check_file(file_path, name, limits.max_bytes)
    route = format or _format_from_head(file_path, name)
    if route in IN_PROCESS:
        doc = load_document(file_path, limits=limits, format=route, expect_sha256=expect_sha256)
    else:
        if expect_sha256 is not None and hashlib.sha256(
                read_file(file_path, name, limits.max_bytes)).hexdigest() != expect_sha256:
            raise ContentChanged.of(name)  # not parsed at all
        doc = _in_child(file_path, name, limits=limits, format=format, cancel=cancel)
        if expect_sha256 is not None and doc.sha256 != expect_sha256:
            raise ContentChanged.of(name)  # swapped again in between: parsed under the caps
    if cancel is not None and cancel.is_set():
        raise Cancelled(f"reading {name} was cancelled")
    return doc


def needs_child(path: str | os.PathLike[str], *, format: str | None = None) -> bool:
    """Whether :func:`read_document` reads this file in a child (False if it cannot be read)."""
    file_path = Path(path)
    try:
        return (format or _format_from_head(file_path, file_path.name)) not in IN_PROCESS
    except DocumentError:
        return False


def _format_from_head(path: Path, name: str) -> str:
    """The format :func:`load_document` would pick, from the extension and the first kilobyte;
    "container" for a ZIP archive (DOCX or not, the child finds out)."""
    by_name = format_for_name(path, name)
    head = read_head(path, name, 1024)
    if head.startswith(_ZIP_MAGIC):
        return "container"
    return resolve_format(head, by_name, name=name)


def _in_child(
    path: Path, name: str, *, limits: Limits, format: str | None, cancel: threading.Event | None
) -> Document:
    workdir = tempfile.mkdtemp(prefix="contextlens-reader-")
    ours, theirs = socket.socketpair()
    env = minimal_env()  # a hostile file is parsed there: no key or token goes with it
    proc: subprocess.Popen[bytes] | None = None
    conn = Connection(ours.detach())
    try:
        with theirs:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.core.documents.child",
                 "--fd", str(theirs.fileno()), "--memory", str(limits.reader_memory_bytes),
                 "--cpu", str(READER_CPU_S)],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=workdir,  # `-m` puts the working folder first on sys.path: an empty one
                start_new_session=True,  # a Ctrl+C in the terminal is the parent's to handle
            )  # fmt: skip
        with contextlib.suppress(OSError):  # it died at once: said below
            conn.send({"path": str(path.resolve()), "format": format, "limits": limits})
        reply = _wait(conn, proc, cancel)
        if reply is None:
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"reading {name} was cancelled")
            raise DocumentError(_died(name, proc, limits))
        tag, payload = reply
        if tag == "ok":
            return dataclasses.replace(unpack(payload), path=path)
        if tag == "document":
            raise DocumentError(payload)
        if tag == "memory":
            raise DocumentError(_too_much_memory(name, limits))
        raise DocumentError(f"{name} could not be read ({payload}).")
    finally:
        conn.close()
        if proc is not None:
            _end(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def _wait(
    conn: Connection, proc: subprocess.Popen[bytes], cancel: threading.Event | None
) -> Any | None:
    """The child's reply; None if it died first or ``cancel`` was set (then it is killed)."""
    while True:
        if cancel is not None and cancel.is_set():
            _kill(proc)
            return None
        try:
            if conn.poll(POLL_S):
                return conn.recv()
        except (EOFError, OSError):
            return None
        except MemoryError:  # a reply too large for this process: it stays up
            _kill(proc)
            return ("memory", "")
        if proc.poll() is not None:
            try:  # its reply may have been sent just before it ended
                return conn.recv() if conn.poll(0) else None
            except (EOFError, OSError):
                return None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Reap the child: it exits by itself once it has replied; killed if it lingers."""
    deadline = time.monotonic() + 2.0
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    _kill(proc)
    proc.wait()


def _died(name: str, proc: subprocess.Popen[bytes], limits: Limits) -> str:
    code = proc.wait()
    if code == -signal.SIGKILL:
        return _too_much_memory(name, limits)
    if code == -getattr(signal, "SIGXCPU", -1):
        return (f"{name} could not be read: it took more than {READER_CPU_S} s of processor "
                "time, far more than any document needs.")
    if code < 0:
        try:
            how = signal.Signals(-code).name
        except ValueError:
            how = f"signal {-code}"
        return f"{name} could not be read: the reader process stopped ({how})."
    return f"{name} could not be read: the reader process stopped (exit status {code})."


def _too_much_memory(name: str, limits: Limits) -> str:
    return (
        f"{name} needs more than {human_size(limits.reader_memory_bytes)} of memory to read, "
        "the most a document may use."
    )
