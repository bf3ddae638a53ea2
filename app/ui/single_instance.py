"""One window per user: a second launch hands its files to the running one and exits.

The first instance listens on a local socket (a Unix socket in a folder only this user can
enter, the runtime folder or one in the state folder; a named pipe on Windows). A launch that
finds no such folder, or a socket held by another user's process, runs on its own. A later
``contextlens FILE…`` connects, sends the absolute paths and the options it was given
(``--n-ctx``, ``--lang``, ``--theme``) as one JSON line, waits for ``ok`` and exits 0; the
running window opens each path (a ``.ctxlens`` export is imported into the history, a ``.gguf``
is chosen as the model, anything else opens as the document), honours the options and comes to
the front. Options it cannot honour (a context size while a run is going on) are refused with
one sentence, which the launch prints before it exits 1: an option is never dropped in silence.
A socket left behind by a crashed run is removed before listening, so it never blocks a start;
a running instance that does not answer is left alone, and the new window then runs on its own.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import socket as sockets
import stat
import struct
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import platformdirs
from PySide6.QtCore import QLockFile, QObject, Qt, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket
from PySide6.QtWidgets import QWidget

from app.core.paths import APP_NAME
from app.ui.session_guard import state_dir

log = logging.getLogger(__name__)
ACK = b"ok\n"
REFUSED = b"error\n"
MAX_MESSAGE = 1 << 20  # bytes of one request; paths, not documents
CONNECT_TIMEOUT_MS = 500
ANSWER_TIMEOUT_MS = 5000
STARTUP_LOCK_MS = 3000
POLL_MS = 20
MAX_ANSWER = 4096  # "ok", or a refusal and its sentence
REFUSAL = b"refused: "
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS


OPTIONS = {"n_ctx": int, "lang": str, "theme": str}  # what a launch may hand over, and its type


class HandoverRefused(Exception):
    """The running window will not take what this launch gave it; the message says why."""


class Handover(enum.Enum):
    TAKEN = "taken"  # a running instance took the paths: this launch is done
    NO_SERVER = "no server"  # nothing listens (or only a stale socket): be the first
    NO_ANSWER = "no answer"  # something listens but did not acknowledge: run on its own


class Opens(Protocol):
    def take_launch(self, paths: Sequence[Path], options: Mapping[str, object]) -> None: ...


def server_name() -> str | None:
    """Per user and per state folder (so tests and a second profile keep apart). On POSIX a
    socket in a folder this user alone can enter: the runtime folder, else one in the state
    folder; None when neither can hold it (the launch then runs on its own). Qt's fallback, a
    name it places in /tmp, is never used: another user could hold that name first and be
    handed the files this user opens. On Windows a named pipe Qt makes this user's only."""
    key = hashlib.sha256(str(state_dir().absolute()).encode()).hexdigest()[:16]
    name = f"{APP_NAME}-{key}"
    if os.name != "posix":
        return name
    for folder in (_runtime_dir(), state_dir() / "instance"):
        if (folder is not None and _private(folder)
                and len(str(folder / name)) <= _MAX_SOCKET_PATH):  # fmt: skip
            return str(folder / name)
    return None


def _runtime_dir() -> Path | None:
    """The user's runtime folder as platformdirs names it (None when it cannot say)."""
    try:
        with warnings.catch_warnings():  # no XDG_RUNTIME_DIR: platformdirs warns, falls back
            warnings.simplefilter("ignore")
            return Path(platformdirs.user_runtime_dir(APP_NAME))
    except Exception:  # a fallback folder another user made first: PermissionError, …
        return None


def _private(folder: Path) -> bool:
    """Whether ``folder`` is (or, created now, becomes) this user's alone: owned by this user,
    no access for others, and not a link."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & 0o077)  # fmt: skip


def _peer_is_this_user(socket: QLocalSocket) -> bool:
    """Whether the process at the other end of ``socket`` runs as this user (Linux: the
    kernel's SO_PEERCRED; elsewhere the private folder is the guard, and this says True)."""
    option = getattr(sockets, "SO_PEERCRED", None)
    fd = int(socket.socketDescriptor())
    if option is None or fd < 0:
        return True
    with sockets.socket(fileno=os.dup(fd)) as peer:
        try:
            _pid, uid, _gid = struct.unpack("3i", peer.getsockopt(
                sockets.SOL_SOCKET, option, struct.calcsize("3i")))  # fmt: skip
        except OSError:
            return False
    return uid == os.getuid()


def _request(paths: Sequence[Path], options: Mapping[str, object]) -> bytes:
    message = {"paths": [os.path.abspath(p) for p in paths], "options": dict(options)}
    return (json.dumps(message) + "\n").encode()


def send_paths(
    paths: Sequence[Path],
    name: str | None = None,
    *,
    options: Mapping[str, object] | None = None,
    answer_timeout_ms: int = ANSWER_TIMEOUT_MS,
) -> Handover:
    """Hand ``paths`` (none: just raise the window) and ``options`` to the instance listening
    on ``name``. Blocking; runs before this launch has an event loop, or on any thread.
    Raises HandoverRefused when the running window refuses an option."""
    name = name or server_name()
    if name is None:
        return Handover.NO_SERVER
    socket = QLocalSocket()
    socket.connectToServer(name)
    if not socket.waitForConnected(CONNECT_TIMEOUT_MS):
        return Handover.NO_SERVER
    if not _peer_is_this_user(socket):  # someone else's process holds the name: tell it nothing
        socket.abort()
        log.warning("single instance off: %s is held by another user's process", name)
        return Handover.NO_ANSWER
    socket.write(_request(paths, options or {}))
    socket.flush()
    answer = b""
    deadline = time.monotonic() + answer_timeout_ms / 1000
    # short waits: each holds the GIL, and the server may be this process's own GUI thread
    while not answer.endswith(b"\n") and len(answer) < MAX_ANSWER:
        if socket.waitForReadyRead(POLL_MS) or socket.bytesAvailable():
            answer += bytes(socket.readAll().data())
        elif socket.state() != QLocalSocket.LocalSocketState.ConnectedState:
            break
        if time.monotonic() > deadline:
            break
    socket.abort()
    if answer == ACK:
        return Handover.TAKEN
    if answer.startswith(REFUSAL) and answer.endswith(b"\n"):
        raise HandoverRefused(answer[len(REFUSAL):].decode("utf-8", "replace").strip())
    log.warning("the running instance did not take the files (answer %r)", answer)
    return Handover.NO_ANSWER


class InstanceServer(QObject):
    """Listens for later launches; ``paths_received`` carries each one's paths (a list of
    Path, maybe empty) and options (a dict, see OPTIONS) on the GUI thread, once ``refusal``
    (the window's judge of the options: "" takes them) has let them in."""

    paths_received = Signal(list, dict)

    def __init__(self, name: str | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name or server_name() or ""  # "": nowhere private to listen
        self.refusal: Callable[[dict[str, object]], str] = lambda _options: ""
        self._server = QLocalServer(self)
        self._server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self._server.newConnection.connect(self._on_connection)
        self._buffers: dict[QLocalSocket, bytes] = {}

    def listen(self) -> bool:
        """Listen, removing a socket file a crashed run left; False (and logged) when that
        fails: the window then works on its own."""
        if not self.name:
            log.warning("single instance off: no folder of this user's alone for its socket")
            return False
        QLocalServer.removeServer(self.name)
        if self._server.listen(self.name):
            return True
        log.warning("single instance off: cannot listen on %s (%s)", self.name,
                    self._server.errorString())  # fmt: skip
        return False

    def is_listening(self) -> bool:
        return self._server.isListening()

    def close(self) -> None:
        self._server.close()

    def _on_connection(self) -> None:
        while self._server.hasPendingConnections():
            socket = self._server.nextPendingConnection()
            self._buffers[socket] = b""
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(lambda s=socket: self._drop(s))

    def _drop(self, socket: QLocalSocket) -> None:
        self._buffers.pop(socket, None)
        socket.deleteLater()

    def _read(self, socket: QLocalSocket) -> None:
        if socket not in self._buffers:
            return
        data = self._buffers[socket] + bytes(socket.readAll().data())
        self._buffers[socket] = data
        if b"\n" not in data and len(data) <= MAX_MESSAGE:
            return
        del self._buffers[socket]
        request = _parse(data.split(b"\n", 1)[0]) if len(data) <= MAX_MESSAGE else None
        why = "" if request is None else self.refusal(request[1])
        if request is None:
            socket.write(REFUSED)
        elif why:
            socket.write(REFUSAL + " ".join(why.split()).encode()[:MAX_ANSWER // 2] + b"\n")
        else:
            socket.write(ACK)
        socket.flush()
        socket.disconnectFromServer()
        if request is not None and not why:
            self.paths_received.emit(*request)


def _parse(line: bytes) -> tuple[list[Path], dict[str, object]] | None:
    """The paths and options of one request, or None (logged) when it is not one."""
    try:
        message = json.loads(line)
    except ValueError:
        message = None
    paths = message.get("paths") if isinstance(message, dict) else None
    options = message.get("options", {}) if isinstance(message, dict) else None
    if (not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths)
            or not isinstance(options, dict)
            or not all(k in OPTIONS and isinstance(v, OPTIONS[k]) and not isinstance(v, bool)
                       for k, v in options.items())):  # fmt: skip
        log.warning("ignored a malformed request from a second launch: %.200r", line)
        return None
    return [Path(p) for p in paths], options


@contextmanager
def _startup_lock() -> Iterator[None]:
    """Two launches at the same moment: one decides (send, or listen) at a time."""
    folder = state_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        yield
        return
    lock = QLockFile(str(folder / "instance.lock"))
    held = lock.tryLock(STARTUP_LOCK_MS)
    try:
        yield
    finally:
        if held:
            lock.unlock()


def claim(paths: Sequence[Path], name: str | None = None, *,
          options: Mapping[str, object] | None = None,
          ) -> tuple[Handover, InstanceServer | None]:  # fmt: skip
    """Hand ``paths`` and ``options`` to a running instance, or become the one others hand
    theirs to.

    (TAKEN, None): this launch is done. (NO_SERVER, server): listen with ``server`` (not
    listening if the socket could not be made). (NO_ANSWER, None): run on its own. Raises
    HandoverRefused when the running window refuses the options."""
    name = name or server_name()
    if name is None:  # nowhere private for the channel: this launch runs on its own
        return Handover.NO_SERVER, None
    with _startup_lock():
        outcome = send_paths(paths, name, options=options)
        if outcome is not Handover.NO_SERVER:
            return outcome, None
        server = InstanceServer(name)
        server.listen()
        return outcome, server


def open_in(window: Opens, paths: Sequence[Path], options: Mapping[str, object]) -> None:
    """Open what a later launch sent and take its options, then bring the window to the
    front."""
    window.take_launch(paths, options)
    if isinstance(window, QWidget):
        bring_to_front(window)


def bring_to_front(window: QWidget) -> None:
    window.show()
    window.setWindowState(
        (window.windowState() & ~Qt.WindowState.WindowMinimized) | Qt.WindowState.WindowActive
    )
    window.raise_()
    window.activateWindow()
