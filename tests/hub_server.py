"""A Hugging Face Hub on the loopback interface, for the tests of fetching a model by name.

It answers what ``huggingface_hub`` asks, in the Hub's layout: ``/api/models/{repo}`` (and
``/revision/{rev}``) with the repository's ``siblings``, ``HEAD``/``GET
/{repo}/resolve/{rev}/{file}`` with the headers the client reads (``X-Repo-Commit``, ``ETag`` and
``X-Linked-Etag``/``X-Linked-Size`` as for an LFS file, ``Content-Length``, ``Accept-Ranges``),
range requests, and the Hub's ``X-Error-Code`` on 401 and 404. Files are served from memory.

Switches: ``cut_at`` closes a transfer when it reaches that offset of the file (``cuts`` times),
``trickle_at`` slows it down from that offset (so a cancel lands mid-transfer), ``gated`` repos
answer 401 without the token, and ``cdn`` sends file bodies from another origin (``localhost``
instead of ``127.0.0.1``), as the Hub redirects to its storage. ``log`` holds every request.

The files (:func:`vocab_repos`): the vocabulary-only GGUFs in ``models/vocab``, renamed as a
quantized repository names them, and a split pair written here with the ``gguf`` package.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

VOCAB = Path(__file__).resolve().parent.parent / "models" / "vocab"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_test_token_for_the_loopback_hub"


@dataclass
class Request:
    method: str
    path: str
    host: str
    range: str | None
    authorization: str | None


@dataclass
class HubState:
    repos: dict[str, dict[str, bytes]]
    gated: set[str] = field(default_factory=set)
    token: str = TOKEN
    cut_at: int | None = None
    cuts: int = 0
    trickle_at: int | None = None
    trickle_delay: float = 0.02
    cdn: bool = False
    cdn_origin: str | None = None  # where ``cdn`` redirects (None: localhost on this port)
    missing_status: int = 404  # the Hub answers 401 to an anonymous request for a missing repo
    # a hostile Hub: what it says of a file instead of the truth (by file name); a size of None
    # says none at all
    etags: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int | None] = field(default_factory=dict)
    commit: str = COMMIT
    anything: bytes | None = None  # served for any other path, as a server that answers all
    log: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def gets(self, name: str) -> list[Request]:
        """The body requests for the file ``name`` (on the endpoint or the storage)."""
        return [r for r in self.log if r.method == "GET" and r.path.endswith("/" + name)]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _record(self) -> None:
        state = self.server.state
        with state.lock:
            state.log.append(Request(self.command, self.path, self.headers.get("Host", ""),
                                     self.headers.get("Range"),
                                     self.headers.get("Authorization")))  # fmt: skip

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                error: tuple[str, str] | None = None) -> None:  # fmt: skip
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if error:
            self.send_header("X-Error-Code", error[0])
            self.send_header("X-Error-Message", error[1])
        if status >= 400 and not body:
            body = json.dumps({"error": error[1] if error else "error"}).encode()
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        self._record()
        path = unquote(urlsplit(self.path).path)
        if m := re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/(.+))?$", path):
            self._info(m[1], m[2])
        elif m := re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path):
            self._resolve(m[1], m[2], m[3])
        elif m := re.match(r"^/cdn/([^/]+/[^/]+)/(.+)$", path):
            self._body(self.server.state.repos[m[1]][m[2]])
        elif (anything := self.server.state.anything) is not None:
            self._body(anything, self._about(anything, sha256(anything)))
        else:
            self._answer(404)

    def _repo(self, repo: str, revision: str | None) -> dict[str, bytes] | None:
        files = self.server.state.repos.get(repo)
        if files is None:
            self._answer(self.server.state.missing_status,
                         error=("RepoNotFound", "Repository not found"))
            return None
        if revision not in (None, "main", COMMIT):
            self._answer(404, error=("RevisionNotFound", "Invalid rev id"))
            return None
        return files

    def _info(self, repo: str, revision: str | None) -> None:
        files = self._repo(repo, revision)
        if files is None:
            return
        state = self.server.state
        body = json.dumps({"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                           "gated": "manual" if repo in state.gated else False,
                           "siblings": [{"rfilename": n} for n in sorted(files)]})  # fmt: skip
        self._answer(200, body.encode(), {"Content-Type": "application/json"})

    def _resolve(self, repo: str, revision: str, name: str) -> None:
        files = self._repo(repo, revision)
        if files is None:
            return
        state = self.server.state
        if repo in state.gated and self.headers.get("Authorization") != f"Bearer {state.token}":
            self._answer(401, error=("GatedRepo", f"Access to model {repo} is restricted"))
            return
        data = files.get(name)
        if data is None:
            self._answer(404, headers={"X-Repo-Commit": COMMIT},
                         error=("EntryNotFound", "Entry not found"))  # fmt: skip
            return
        about = self._about(data, state.etags.get(name, sha256(data)))
        if name in state.sizes:
            size = state.sizes[name]
            if size is None:
                del about["X-Linked-Size"]
                if self.command == "HEAD":  # nothing says how large the file is
                    self.close_connection = True
                    self.send_response(200)
                    for key, value in about.items():
                        self.send_header(key, value)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    return
            else:
                about["X-Linked-Size"] = str(size)
        if state.cdn:
            origin = state.cdn_origin or f"http://localhost:{self.server.server_address[1]}"
            self._answer(302, headers={**about, "Location": f"{origin}/cdn/{repo}/{name}"})
            return
        self._body(data, about)

    def _about(self, data: bytes, digest: str) -> dict[str, str]:
        """What the Hub says of a file, as of an LFS one: its commit, ETag and size."""
        return {"X-Repo-Commit": self.server.state.commit, "X-Linked-Etag": f'"{digest}"',
                "X-Linked-Size": str(len(data)), "ETag": f'"{digest}"'}

    def _body(self, data: bytes, about: dict[str, str] | None = None) -> None:
        state = self.server.state
        first = 0
        wanted = self.headers.get("Range")
        if wanted and (m := re.match(r"^bytes=(\d+)-$", wanted)) and int(m[1]) < len(data):
            first = int(m[1])
        headers = {**(about or {}), "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream",
                   "Content-Length": str(len(data) - first)}  # fmt: skip
        if first:
            headers["Content-Range"] = f"bytes {first}-{len(data) - 1}/{len(data)}"
        self.send_response(206 if first else 200)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        with state.lock:
            cut = state.cut_at if state.cuts > 0 and state.cut_at is not None else None
            if cut is not None and first <= cut:
                state.cuts -= 1
            else:
                cut = None
        self._send(data, first, cut)

    def _send(self, data: bytes, first: int, cut: int | None) -> None:
        state = self.server.state
        at = first
        try:
            while at < len(data):
                end = len(data) if cut is None else cut
                slow = state.trickle_at is not None and at >= state.trickle_at
                step = 16 * 1024 if slow else 256 * 1024
                piece = data[at:min(at + step, end)]
                if not piece:
                    break
                self.wfile.write(piece)
                self.wfile.flush()
                at += len(piece)
                if slow:
                    time.sleep(state.trickle_delay)
            if cut is not None:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState


@contextmanager
def running_hub(state: HubState) -> Iterator[str]:
    """Serve ``state`` on 127.0.0.1; yields the endpoint (``http://127.0.0.1:PORT``)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.state = state
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def tiny_split(folder: Path, prefix: str = "tiny-Q8_0", count: int = 2) -> dict[str, bytes]:
    """A split GGUF of ``count`` parts, written with the ``gguf`` package (as gguf-split names
    and marks them), as {name: bytes}."""
    import gguf  # noqa: PLC0415

    parts: dict[str, bytes] = {}
    for number in range(1, count + 1):
        name = f"{prefix}-{number:05d}-of-{count:05d}.gguf"
        writer = gguf.GGUFWriter(str(folder / name), "llama")
        writer.add_uint16("split.no", number - 1)
        writer.add_uint16("split.count", count)
        writer.add_int32("split.tensors.count", 0)
        writer.add_string("general.name", "tiny split")
        writer.add_string("tiny.padding", "x" * 300_000)  # enough bytes for progress to move
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        parts[name] = (folder / name).read_bytes()
    return parts


VOCAB_FILES = {  # name in the served repository <- file in models/vocab
    "ggml-vocab-llama-spm-Q4_K_M.gguf": "ggml-vocab-llama-spm.gguf",
    "ggml-vocab-llama-spm-Q4_K.gguf": "ggml-vocab-phi-3.gguf",
    "ggml-vocab-llama-spm-Q8_0.gguf": "ggml-vocab-baichuan.gguf",
    "big/ggml-vocab-qwen2-F16.gguf": "ggml-vocab-qwen2.gguf",
}


def vocab_repos(folder: Path) -> dict[str, dict[str, bytes]]:
    """The repositories the tests fetch from (the split is written into ``folder``)."""
    vocab = {name: (VOCAB / source).read_bytes() for name, source in VOCAB_FILES.items()}
    return {
        "test-org/vocab-GGUF": {
            **vocab,
            "mmproj-vocab-Q4_K_M.gguf": vocab["ggml-vocab-llama-spm-Q4_K_M.gguf"],
            "README.md": b"# vocabulary-only test models\n",
        },
        "test-org/split-GGUF": {**tiny_split(folder), "README.md": b"# a split\n"},
        "test-org/safetensors-only": {"config.json": b"{}", "model.safetensors": b"\0" * 64},
        "test-org/broken-GGUF": {"broken-Q4_K_M.gguf": b"not a gguf at all" * 100},
        "test-org/gated-GGUF": {"gated-Q4_K_M.gguf": vocab["ggml-vocab-llama-spm-Q4_K_M.gguf"]},
    }


@pytest.fixture
def keyring_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The tests' file keyring (tests/file_keyring.py) in place of the system's, in this
    process."""
    from tests.file_keyring import chosen  # noqa: PLC0415

    with chosen(tmp_path / "keyring.json", monkeypatch) as path:
        yield path


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        keyring_file: Path) -> Iterator[tuple[HubState, str]]:  # fmt: skip
    """The loopback Hub as $HF_ENDPOINT, with no token, online, and a Hugging Face cache of the
    test's own (``$HF_HOME`` = ``tmp_path/hf-home``)."""
    from huggingface_hub import constants  # noqa: PLC0415

    state = HubState(vocab_repos(tmp_path))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with running_hub(state) as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        yield state, endpoint
