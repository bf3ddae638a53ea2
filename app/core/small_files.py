"""The one reader for the small files a model store holds: manifests, template and parameter
blobs, ``refs/main``, pointer files, the app's own list of folders.

These files lie in folders other programs (or other accounts: Ollama's service user, a shared
cache) write, so a name may be a FIFO that blocks an ``open`` forever or a link to
``/dev/zero`` that a plain ``read_text`` reads until memory runs out. Here a file is read only
when it is a regular file (checked before opening and again on the descriptor opened, after
any link is followed), it is opened without blocking, and at most ``cap`` bytes are read: a
refusal is a :class:`SmallFileError`, one sentence, which callers treat as a file that cannot
be read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
_FLAGS |= getattr(os, "O_CLOEXEC", 0)
_CHUNK = 1 << 16


class SmallFileError(OSError):
    """A small file refused or unreadable; ``reason`` says why without the path."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path} {self.reason}"


def _not_regular(mode: int) -> str:
    """Why a file of this mode is refused, for the sentence."""
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
                       (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return f"is {kind}, not a regular file"
    return "is not a regular file"


def _check(path: Path, st: os.stat_result, cap: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise SmallFileError(path, _not_regular(st.st_mode))
    if st.st_size > cap:
        raise SmallFileError(path, f"is larger than {cap:,} bytes")


def read_small(path: Path, cap: int) -> bytes:
    """The bytes of the regular file ``path`` (a link is followed), ``cap`` bytes at most;
    SmallFileError when it is anything else, larger, or cannot be read."""
    try:
        _check(path, os.stat(path), cap)  # a FIFO or a device is never opened
        fd = os.open(path, _FLAGS)
    except SmallFileError:
        raise
    except OSError as exc:
        raise SmallFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        _check(path, os.fstat(fd), cap)  # what was opened, should the name have changed since
        return _read_at_most(path, fd, cap)
    except SmallFileError:
        raise
    except OSError as exc:
        raise SmallFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def _read_at_most(path: Path, fd: int, cap: int) -> bytes:
    """Up to ``cap`` bytes; a file that grew past ``cap`` since it was checked is refused."""
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, min(_CHUNK, cap + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            raise SmallFileError(path, f"is larger than {cap:,} bytes")
    return b"".join(chunks)


def read_small_text(path: Path, cap: int) -> str:
    """:func:`read_small` decoded as UTF-8; SmallFileError when it is not UTF-8 text."""
    data = read_small(path, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SmallFileError(path, "is not UTF-8 text") from None
