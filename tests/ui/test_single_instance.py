"""One window per user: a second launch hands its paths over a local socket and exits 0; bad
requests are refused; a socket left by a crash never blocks a start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtNetwork import QLocalSocket

from app.core.paths import project_root
from app.ui import single_instance
from app.ui.main import parse_args
from app.ui.single_instance import Handover, InstanceServer, claim, send_paths, server_name

WAIT = 20_000


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state folder of the test's own, so the socket name is too."""
    folder = tmp_path / "state"
    monkeypatch.setenv("CONTEXTLENS_STATE", str(folder))
    return folder


@pytest.fixture
def listener(qapp, state: Path) -> Iterator[InstanceServer]:
    """The first instance's server, listening for the next ones."""
    del state
    listening = InstanceServer()
    assert listening.listen()
    yield listening
    listening.close()


def _in_thread(qtbot, call: Callable[[], object]) -> object:
    """Run a blocking client call on a thread while this thread's event loop serves it."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    qtbot.waitUntil(lambda: not thread.is_alive(), timeout=WAIT)
    return out[0]


def test_the_name_is_per_state_folder_and_private(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = server_name()
    assert mine == server_name() and "contextlens-" in mine
    if os.path.isabs(mine):  # a socket in a runtime folder only this user can enter
        assert Path(mine).parent.stat().st_mode & 0o077 == 0
    monkeypatch.setenv("CONTEXTLENS_STATE", str(tmp_path / "other"))
    assert server_name() != mine


def test_a_second_launch_hands_its_paths_to_the_first(
    qtbot, listener: InstanceServer, tmp_path: Path
) -> None:
    doc = tmp_path / "report.txt"
    with qtbot.waitSignal(listener.paths_received, timeout=WAIT) as received:
        answer = _in_thread(qtbot, lambda: send_paths([doc, Path("relative.md")], listener.name))
    assert answer is Handover.TAKEN
    assert received.args[0] == [doc, Path.cwd() / "relative.md"]  # absolute paths
    assert received.args[1] == {}  # no options
    with qtbot.waitSignal(listener.paths_received, timeout=WAIT) as received:  # just raise it
        assert _in_thread(qtbot, lambda: send_paths([], listener.name)) is Handover.TAKEN
    assert received.args[0] == []


def _raw(name: str, data: bytes) -> bytes:
    """Send ``data`` as it is and return the answer (short waits: the server is this thread's)."""
    socket = QLocalSocket()
    socket.connectToServer(name)
    assert socket.waitForConnected(2000)
    socket.write(data)
    socket.flush()
    answer = b""
    for _ in range(250):
        if socket.waitForReadyRead(20) or socket.bytesAvailable():
            answer += bytes(socket.readAll().data())
        if answer.endswith(b"\n"):
            break
    socket.abort()
    return answer


@pytest.mark.parametrize("request_line", [
    b"not json\n", b'{"paths": "one"}\n', b'{"paths": [3]}\n', b"[]\n",
    b'{"paths": [], "options": []}\n', b'{"paths": [], "options": {"n_ctx": "big"}}\n',
    b'{"paths": [], "options": {"n_ctx": true}}\n', b'{"paths": [], "options": {"gpu": 1}}\n',
])  # fmt: skip
def test_a_malformed_request_is_refused_and_opens_nothing(
    qtbot, listener: InstanceServer, request_line: bytes
) -> None:
    got: list[object] = []
    listener.paths_received.connect(lambda paths, options: got.append((paths, options)))
    assert _in_thread(qtbot, lambda: _raw(listener.name, request_line)) == b"error\n"
    assert got == [] and listener.is_listening()  # and it still serves the next launch
    assert _in_thread(qtbot, lambda: send_paths([], listener.name)) is Handover.TAKEN


def test_nothing_listening_means_be_the_first(qapp, state: Path) -> None:
    del state
    assert send_paths([Path("x.txt")]) is Handover.NO_SERVER


CRASH = """
import os, signal, sys
from PySide6.QtCore import QCoreApplication
from app.ui.single_instance import InstanceServer
app = QCoreApplication([])
server = InstanceServer()
assert server.listen()
print(server.name, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_socket_left_by_a_crash_does_not_block_the_next_start(qtbot, state: Path) -> None:
    crashed = subprocess.run([sys.executable, "-c", CRASH], capture_output=True, text=True,
                             cwd=project_root(), env=dict(os.environ), timeout=60,
                             check=False)  # fmt: skip
    name = crashed.stdout.strip()
    assert crashed.returncode == -9 and name == server_name()
    if os.path.isabs(name):
        assert Path(name).exists()  # the dead process's socket file is still there
    outcome, server = claim([Path("a.txt")])
    assert outcome is Handover.NO_SERVER and server is not None and server.is_listening()
    with qtbot.waitSignal(server.paths_received, timeout=WAIT):
        assert _in_thread(qtbot, lambda: send_paths([], name)) is Handover.TAKEN
    server.close()
    assert not (state / "instance.lock").exists()  # the start-up lock was let go


def _launch(qtbot, tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}  # never the person's settings
    second = subprocess.Popen([sys.executable, "-m", "app.ui.main", *args], cwd=project_root(),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    qtbot.waitUntil(lambda: second.poll() is not None, timeout=60_000)
    return second


def test_contextlens_with_a_file_while_running_hands_it_over_and_exits_0(
    qtbot, listener: InstanceServer, tmp_path: Path
) -> None:
    doc = tmp_path / "chapter.txt"
    doc.write_text("Call me Ishmael.", encoding="utf-8")
    with qtbot.waitSignal(listener.paths_received, timeout=60_000) as received:
        second = _launch(qtbot, tmp_path, str(doc))
    assert second.returncode == 0, second.stderr.read() if second.stderr else ""
    assert received.args[0] == [doc]


def test_a_second_launch_hands_its_options_over_or_exits_1_with_the_refusal(
    qtbot, listener: InstanceServer, tmp_path: Path
) -> None:
    doc = tmp_path / "chapter.txt"
    doc.write_text("Call me Ishmael.", encoding="utf-8")
    with qtbot.waitSignal(listener.paths_received, timeout=60_000) as received:
        second = _launch(qtbot, tmp_path, "--n-ctx", "1024", "--theme", "dark", str(doc))
    assert second.returncode == 0, second.stderr.read() if second.stderr else ""
    assert received.args == [[doc], {"n_ctx": 1024, "theme": "dark"}]

    asked: list[dict[str, object]] = []
    got: list[object] = []
    listener.refusal = lambda options: asked.append(options) or (
        "The running window is busy with a run.\nCancel it first." if "n_ctx" in options else "")
    listener.paths_received.connect(lambda paths, options: got.append(paths))
    refused = _launch(qtbot, tmp_path, "--n-ctx", "2048", str(doc))
    assert refused.returncode == 1 and asked == [{"n_ctx": 2048}] and got == []
    assert refused.stderr is not None
    assert refused.stderr.read().strip() == ("contextlens: The running window is busy with a "
                                             "run. Cancel it first.")  # one line  # fmt: skip
    assert _in_thread(qtbot, lambda: send_paths([doc], listener.name)) is Handover.TAKEN
    qtbot.waitUntil(lambda: got == [[doc]], timeout=WAIT)  # the window still takes files


def test_the_command_line_names_what_a_second_launch_hands_over() -> None:
    assert parse_args(["--new-instance", "a.txt"]).new_instance
    args = parse_args(["b.txt"])
    # absolute: the window it goes to runs in another folder
    assert not args.new_instance and args.given == [Path("b.txt").absolute()]
    assert parse_args([]).given == []  # no files: the running window is only raised


# ----- review round 3, row 3: a folder or a socket another user controls ----------------------


def test_a_runtime_folder_that_is_not_private_is_not_used(
    qapp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime folder others may enter (or one platformdirs cannot name: a pre-created
    ``/tmp/runtime-<uid>`` made it raise PermissionError and the app fail to start) leaves the
    socket in a private folder of the state folder, never in a name Qt puts in /tmp."""
    state = Path(tempfile.mkdtemp(prefix="cl-"))  # short: a socket path holds 108 bytes
    monkeypatch.setenv("CONTEXTLENS_STATE", str(state))
    shared = tmp_path / "run"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setattr(single_instance, "_runtime_dir", lambda: shared)
    name = server_name()
    assert name is not None and Path(name).parent == state / "instance"
    assert (state / "instance").stat().st_mode & 0o077 == 0

    def refuse(*_args: object, **_kwargs: object) -> str:
        raise PermissionError("/tmp/runtime-0 belongs to someone else")

    monkeypatch.undo()
    monkeypatch.setenv("CONTEXTLENS_STATE", str(state))
    monkeypatch.setattr(single_instance.platformdirs, "user_runtime_dir", refuse)
    assert single_instance._runtime_dir() is None
    assert server_name() == name
    shutil.rmtree(state, ignore_errors=True)


def test_without_a_private_folder_a_launch_runs_on_its_own(
    qapp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(single_instance, "_runtime_dir", lambda: None)
    monkeypatch.setenv("CONTEXTLENS_STATE", str(tmp_path / ("deep" * 30)))  # no room for a socket
    assert server_name() is None
    assert claim([Path("a.txt")]) == (Handover.NO_SERVER, None)
    assert send_paths([Path("a.txt")]) is Handover.NO_SERVER


SQUATTER = """
import os, socket, sys
path = sys.argv[1]
server = socket.socket(socket.AF_UNIX)
os.setgid(65534)
os.setuid(65534)  # another user
server.bind(path)
os.chmod(path, 0o777)
server.listen()
print("ready", flush=True)
conn, _ = server.accept()
conn.sendall(b"ok\\n")  # "taken": the launch would exit, its files handed to this user
print(conn.recv(65536).decode() or "nothing", flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0,
                    reason="needs root to run the other user's process")  # fmt: skip
def test_a_socket_held_by_another_user_is_told_nothing(qapp, tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="contextlens-squat-"))  # in /tmp: others may enter
    shared.chmod(0o777)
    path = shared / "contextlens-squatted"
    squatter = subprocess.Popen([sys.executable, "-c", SQUATTER, str(path)],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert squatter.stdout is not None and squatter.stdout.readline().strip() == "ready"
        outcome = send_paths([tmp_path / "secret-report.txt"], str(path))
        assert outcome is Handover.NO_ANSWER  # not TAKEN: this launch runs on its own
        received = squatter.communicate(timeout=10)[0]
        assert "secret-report" not in received
    finally:
        if squatter.poll() is None:
            squatter.kill()
        shutil.rmtree(shared, ignore_errors=True)
