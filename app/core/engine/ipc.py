"""The two channels between the app and the engine child: a message pipe and a cancel flag.

The child is started as ``python -m app.core.engine.child`` rather than through
``multiprocessing``'s spawn, which would re-import the parent's ``__main__`` (a script, pytest, a
frozen app) in the child. Messages travel over one end of a socket pair handed to the child as an
inherited file descriptor and wrapped in ``multiprocessing.connection.Connection`` (length-prefixed
pickles). Cancel is one byte in a small file mapped into both processes, so the child sees it
while it is busy inside a request and never has to read the pipe to notice.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path


class SharedFlag:
    """One byte of shared memory backed by a file; both processes map the same page."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        if create:
            self.path.write_bytes(b"\0")
        with self.path.open("r+b") as fh:
            self._map = mmap.mmap(fh.fileno(), 1)

    def set(self) -> None:
        self._map[0] = 1

    def clear(self) -> None:
        self._map[0] = 0

    def is_set(self) -> bool:
        return self._map[0] != 0

    def close(self) -> None:
        self._map.close()
