"""Getting a file's bytes without trusting the path: stat first, never block, bounded size.

A path can name a folder, a named pipe (opening one blocks until a writer appears), a device that
never ends, or a file far too large for memory. Each is refused with one sentence before any byte
is read; regular files are opened read-only and read once.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Final

from app.core.documents.messages import human_size
from app.core.documents.model import DocumentError

_CHUNK: Final = 1024 * 1024
_OPEN_FLAGS: Final = (
    os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC
)
_KINDS: Final = (
    (stat.S_ISDIR, "is a folder, not a document"),
    (stat.S_ISFIFO, "is a named pipe, not a document"),
    (stat.S_ISSOCK, "is a socket, not a document"),
    (stat.S_ISCHR, "is a device, not a document"),
    (stat.S_ISBLK, "is a device, not a document"),
)


def check_file(path: Path, name: str, max_bytes: int) -> int:
    """Refuse anything but a regular file within ``max_bytes``; return its size."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise DocumentError(_os_error(path, name, exc)) from exc
    _check_stat(info, name, max_bytes)
    return info.st_size


def read_file(path: Path, name: str, max_bytes: int) -> bytes:
    """The whole file, read once; the checks are repeated on the open file (it may have changed)."""
    with _opened(path, name) as (stream, info):
        _check_stat(info, name, max_bytes)
        # One allocation of the stated size; files that report no size (/proc) or grew since
        # the stat are read on in chunks, still within the cap.
        data = stream.read(info.st_size) if info.st_size else b""
        more = stream.read(_CHUNK)
        if more:
            chunks = [data, more]
            total = len(data) + len(more)
            while more and total <= max_bytes:
                more = stream.read(_CHUNK)
                chunks.append(more)
                total += len(more)
            if total > max_bytes:
                raise DocumentError(too_large(name, total, max_bytes, at_least=True))
            data = b"".join(chunks)
    return data


def read_head(path: Path, name: str, count: int) -> bytes:
    """The first ``count`` bytes of a regular file (what its format is decided from)."""
    with _opened(path, name) as (stream, info):
        _check_kind(info, name)
        return stream.read(count) or b""


@contextmanager
def _opened(path: Path, name: str) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """The file opened without blocking, with its stat; an OS error is one sentence."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise DocumentError(_os_error(path, name, exc)) from exc
    with os.fdopen(fd, "rb", buffering=0) as stream:
        try:
            yield stream, os.fstat(fd)
        except OSError as exc:
            raise DocumentError(_os_error(path, name, exc)) from exc


def too_large(name: str, size: int, limit: int, *, at_least: bool = False) -> str:
    more = "more than " if at_least else ""
    return f"{name} is {more}{human_size(size)}; the limit is {human_size(limit)}."


def _check_kind(info: os.stat_result, name: str) -> None:
    for test, what in _KINDS:
        if test(info.st_mode):
            raise DocumentError(f"{name} {what}.")


def _check_stat(info: os.stat_result, name: str, max_bytes: int) -> None:
    _check_kind(info, name)
    if not stat.S_ISREG(info.st_mode):
        raise DocumentError(f"{name} is not a regular file.")
    if info.st_size > max_bytes:
        raise DocumentError(too_large(name, info.st_size, max_bytes))


def _os_error(path: Path, name: str, exc: OSError) -> str:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return f"{path} does not exist."
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{name} cannot be read: permission denied."
    if exc.errno == errno.EISDIR:
        return f"{name} is a folder, not a document."
    reason = exc.strerror or type(exc).__name__
    return f"{name} cannot be read ({reason[:1].lower()}{reason[1:]})."
