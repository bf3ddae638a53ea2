"""The files llama.cpp loads are the files the parent checked: held open in the engine child.

The parent checks every file of a model (:func:`app.core.engine.gguf.check_parts`) and notes
which file each path named (device, inode, size and modification time, as the descriptor it
read through said). Seconds pass before llama.cpp opens the path in the child (it
may first have to start), and a watcher that puts another file in its place meanwhile handed
llama.cpp a header nobody checked: a crash. So the child opens each file once, compares it with
the parent's note (another file there: one sentence, nothing loaded), and gives llama.cpp a name
that leads to that open descriptor, not to whatever the path names by then: on Linux a private
folder of links, each named as its file (a split's parts are found by name) and pointing at
``/proc/self/fd/N``. The descriptors stay open while the model is loaded, so what the engine
reads again later (the tokenizer, the vocabulary) is the same file. Without ``/proc`` (macOS,
Windows) llama.cpp is given the path just compared: the window shrinks from seconds to the
moment between the comparison and llama.cpp's open. A file its owner writes to in place after
the comparison is not covered: that is the owner's own model.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from app.core.engine.gguf import CheckedFile, FileIdentity
from app.core.engine.types import ModelLoadError

PROC_FD = Path("/proc/self/fd")
# Open without blocking: a FIFO put in a file's place would otherwise wait for a writer.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


class HeldFiles:
    """A model's checked files, open in this process; :attr:`path` is what llama.cpp opens."""

    def __init__(self, fds: Sequence[int], path: str, links: Path | None) -> None:
        self._fds = list(fds)
        self.path = path
        self._links = links

    def close(self) -> None:
        """Let go of the files (the model is unloaded); safe to call more than once."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        if self._links is not None:
            shutil.rmtree(self._links, ignore_errors=True)
            self._links = None


def hold_checked(files: Sequence[CheckedFile], links: Path | None) -> HeldFiles:
    """Open each checked file, make sure it is still the one checked, and hold it.

    ``links``: a private folder for the links llama.cpp opens (replaced if it exists); None, or
    no ``/proc/self/fd``, gives llama.cpp the first file's path itself. Raises ModelLoadError in
    one sentence when a file is gone or another is in its place."""
    fds: list[int] = []
    try:
        for checked in files:
            fds.append(_open_same(checked))
        if links is None or not PROC_FD.is_dir():
            return HeldFiles(fds, files[0].path, None)
        _make_links(links, files, fds)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return HeldFiles(fds, str(links / Path(files[0].path).name), links)


def _open_same(checked: CheckedFile) -> int:
    """A descriptor of ``checked.path``, if it still names the file that was checked."""
    name = Path(checked.path).name
    try:
        fd = os.open(checked.path, _OPEN_FLAGS)
    except OSError as exc:
        raise ModelLoadError(
            f"cannot load {name}: it could not be opened after it was checked "
            f"({exc.strerror or exc})"
        ) from None
    try:
        same = FileIdentity.of(os.fstat(fd)) == checked.identity
    except OSError:
        same = False
    if not same:
        os.close(fd)
        raise ModelLoadError(
            f"cannot load {name}: the file changed on disk after it was checked, so it was "
            "not given to llama.cpp; load it again"
        )
    return fd


def _make_links(folder: Path, files: Sequence[CheckedFile], fds: Sequence[int]) -> None:
    """``folder`` holding, for each file, a link of its name to this process's descriptor."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    for checked, fd in zip(files, fds, strict=True):
        (folder / Path(checked.path).name).symlink_to(PROC_FD / str(fd))
