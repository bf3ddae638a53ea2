"""Fetching a GGUF from the Hugging Face Hub by name, through the ``huggingface_hub`` client.

The reference is parsed and the repository's files are chosen in :mod:`app.core.hub_refs`.
Files land where ``huggingface_hub`` keeps them: in its cache by default (so other tools, and
ContextLens's own model discovery, see them), or in a folder (``local_dir``) when one is given.

The client does the talking: ``HfApi.model_info`` lists the repository's files,
``get_hf_file_metadata`` asks where each file is and what it is (size, ETag, commit), and its
session (``http_stream_backoff``, ``hf_raise_for_status``) carries the transfer. What is ours is
the transfer's loop, for two things the client no longer gives: since huggingface_hub 1.x
each ``hf_hub_download`` writes to a temporary file unique to that call and deletes it on any
error, so nothing resumes across calls; and it reads in 10 MB pieces, so neither a cancel nor the
progress could answer within a second. Here the bytes go to ``<blob>.incomplete`` (in the cache's
``blobs``, or in the folder's ``.cache/huggingface/download``, as the client names them), which
stays after a cut connection, a cancel or Ctrl-C; the next fetch asks for the rest with
``Range: bytes=N-``. A connection that breaks after sending something is resumed at once, a few
times. The whole file is then checked against the Hub's SHA-256 (the ETag of an LFS file) and
renamed into place and filed in the client's layout (the cache's ref and snapshot link, or the
folder's metadata) with the client's own local helpers, without asking the server again. The
files are checked to be a GGUF last.

Nothing the server says becomes a path unchecked: the Hub names a file's blob by its ETag and a
snapshot by its commit, so an ETag is accepted only as 40 or 64 lowercase hex (a git or an LFS
hash), a commit only as 40 hex, a file name only as a relative path inside the repository, and
every path written, linked or removed is checked to stay inside its folder. A download stops at
the size the server announced (a file whose size it does not say is refused), and an ``http://``
endpoint is used only on this machine (loopback): on the way to any other, anyone could change
what arrives.

Xet: the Hub names Xet-stored files with ``X-Xet-Hash`` headers; this transfer never uses Xet
(it follows the same ``resolve`` redirect a plain HTTP download does, which the Hub serves with
range requests), so an endpoint that sends no Xet headers (a mirror, the tests' server) works as
it is, and ``HF_HUB_DISABLE_XET`` is not needed.

``HF_ENDPOINT`` and ``HF_TOKEN`` are read through :mod:`app.core.config` and passed explicitly,
so they hold even when set after ``huggingface_hub`` was imported. A token (``HF_TOKEN``, else
the one kept in the keyring for this endpoint) goes only to that endpoint, never to the storage a
download is redirected to. Every failure is one sentence (:class:`ModelFetchError`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.core import config, credentials
from app.core.cancelled import Cancelled
from app.core.default_model import ModelFetchError
from app.core.hub_refs import HubRef, HubReferenceError, choose_files, parse_reference
from app.core.model_fetch import (
    CancelCheck,
    Progress,
    _cancelled,
    disk_error,
    mb,
)
from app.core.textutil import clip_message

DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT_S = 30.0  # per network operation (connect, each read), not for the whole download
RESUMES = 5  # a broken connection that had sent something is resumed at once, this many times
HASH_CHUNK = 4 << 20
REPORT_EVERY = 256 * 1024  # bytes between progress reports (a chunk is often 16 KB)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ETAG = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")  # a git blob's SHA-1, an LFS file's SHA-256
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REF_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")  # one segment of a branch or tag name
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def endpoint() -> str:
    """The Hub to fetch from: ``$HF_ENDPOINT`` (a mirror) or https://huggingface.co."""
    return (config.current().hf_endpoint or DEFAULT_ENDPOINT).rstrip("/")


def _loopback(host: str | None) -> bool:
    return host is not None and (host in _LOOPBACK or host.startswith("127."))


def check_transport(url: str, what: str) -> None:
    """Refuse ``url`` unless it is https, or http on this machine: a model fetched in clear over
    the network can be changed by anyone on the way (and its ETag with it, so no hash helps)."""
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and _loopback(parts.hostname)):
        return
    raise ModelFetchError(f"{what} {clip_message(url, 200)} is not https: a model is fetched over "
                          "https, or over http only from this machine")  # fmt: skip


def endpoint_host(where: str | None = None) -> str:
    """The host shown to the person ("huggingface.co")."""
    where = where or endpoint()
    return urlsplit(where).netloc or where


def hub_cache_dir() -> Path:
    """Hugging Face's hub cache, where the model list looks (``HF_HUB_CACHE``, ``HF_HOME``)."""
    from app.core.model_sources import hf_cache_roots  # noqa: PLC0415 (the one rule for it)

    return hf_cache_roots()[0]


def hub_token(where: str | None = None) -> str | None:
    """``$HF_TOKEN``, else the token kept in the keyring for the endpoint ``where``."""
    return config.current().hf_token or credentials.hub_token(where or endpoint())


@dataclass(frozen=True)
class _Remote:
    """One file as the Hub describes it: where to get it, its size, ETag and commit."""

    name: str
    url: str
    size: int  # as announced (a file whose size is not said is refused: _describe)
    etag: str
    commit: str


class _Tally:
    """The bytes of all of a model's files on disk so far, reported as ``progress(done, total)``
    at most every :data:`REPORT_EVERY` bytes (and at the end)."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress, self.total, self.done, self._shown = progress, total, 0, -REPORT_EVERY

    def add(self, n: int, *, force: bool = False) -> None:
        self.done += n
        if self.progress and (force or abs(self.done - self._shown) >= REPORT_EVERY):
            self._shown = self.done
            self.progress(self.done, max(self.total, self.done))


def _check(cancel: CancelCheck | None) -> None:
    if _cancelled(cancel):
        raise Cancelled("the download was cancelled; fetching it again resumes where it "
                             "stopped")  # fmt: skip


@contextmanager
def _in_sentences(ref: HubRef, where: str, token: str | None, what: list[str]) -> Iterator[None]:
    """Turn what the client raises into one sentence; ``what`` names the file being fetched."""
    import httpx2  # noqa: PLC0415 (huggingface_hub's HTTP client: only when fetching)
    from filelock import Timeout as LockTimeout  # noqa: PLC0415
    from huggingface_hub import errors  # noqa: PLC0415

    host, repo = endpoint_host(where), ref.repo_id
    need = (f"this model needs a Hugging Face token: {repo} is gated or private; accept its "
            f"terms at {where}/{repo} while signed in, then give a token (`contextlens-cli "
            "hub-token`, the window's Get a Model from Hugging Face, or HF_TOKEN)")  # fmt: skip
    refused = (f"this model needs a Hugging Face token that may read it: the token was refused "
               f"for {repo}; accept its terms at {where}/{repo} with that account")  # fmt: skip
    try:
        yield
    except (ModelFetchError, KeyboardInterrupt):
        raise
    except errors.GatedRepoError:
        raise ModelFetchError(refused if token else need) from None
    except errors.RepositoryNotFoundError as exc:
        if token is None and exc.response is not None and exc.response.status_code == 401:
            # the Hub answers so for a private repository and for one that does not exist
            raise ModelFetchError(
                f"{host} has no public model {repo}: check the name, or, if it is private, it "
                "needs a Hugging Face token (keep one with `contextlens-cli hub-token` or set "
                "HF_TOKEN)"
            ) from None
        raise ModelFetchError(f"{host} has no model {repo} (or it is private and needs a "
                              "Hugging Face token that may read it)") from None  # fmt: skip
    except errors.RevisionNotFoundError:
        raise ModelFetchError(f"{repo} has no revision {ref.revision}") from None
    except errors.EntryNotFoundError:
        raise ModelFetchError(f"{repo} has no file {what[0] if what else ref}") from None
    except errors.OfflineModeIsEnabled:
        raise ModelFetchError(f"HF_HUB_OFFLINE is set, so nothing is downloaded from {host}")\
            from None
    except errors.HfHubHTTPError as exc:
        code = exc.response.status_code if exc.response is not None else 0
        if code in (401, 403):
            raise ModelFetchError(refused if token else need) from None
        raise ModelFetchError(f"{host} answered HTTP {code} when asked for "
                              f"{what[0] if what else repo}") from None  # fmt: skip
    except errors.HFValidationError:
        raise HubReferenceError(f"{repo} is not a valid Hugging Face repository name") from None
    except httpx2.ConnectError:
        raise ModelFetchError(f"cannot reach {host} (no network, or the address is wrong)")\
            from None
    except httpx2.TimeoutException:
        raise ModelFetchError(f"{host} did not answer in time") from None
    except httpx2.HTTPError as exc:
        raise ModelFetchError(f"the connection to {host} failed ({type(exc).__name__})") from None
    except LockTimeout:
        raise ModelFetchError(f"another download of {what[0] if what else repo} is running; "
                              "try again when it has finished") from None  # fmt: skip
    except OSError as exc:
        if exc.errno is None:  # the client's own consistency errors are OSErrors too
            raise ModelFetchError(f"the download from {host} failed: {exc}") from None
        disk_error(exc, Path(exc.filename or "."))


def _auth(headers: dict[str, str], url: str, where: str) -> dict[str, str]:
    """``headers`` without the token unless ``url`` is on the endpoint itself."""
    target, home = urlsplit(url), urlsplit(where)
    same = (target.scheme, target.netloc) == (home.scheme, home.netloc)
    return headers if same else {k: v for k, v in headers.items() if k.lower() != "authorization"}


def _describe(ref: HubRef, name: str, where: str, token: str | bool) -> _Remote:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url  # noqa: PLC0415

    url = hf_hub_url(ref.repo_id, name, revision=ref.revision, endpoint=where)
    meta = get_hf_file_metadata(url, token=token, endpoint=where, timeout=TIMEOUT_S)
    host = endpoint_host(where)
    if not meta.commit_hash or not meta.etag:
        raise ModelFetchError(f"{host} does not answer as the Hugging Face Hub does (no commit "
                              f"or ETag for {name})")  # fmt: skip
    if not _ETAG.match(meta.etag) or not _COMMIT.match(meta.commit_hash):
        etag, commit = clip_message(meta.etag, 80), clip_message(meta.commit_hash, 80)
        raise ModelFetchError(f"{host} does not answer as the Hugging Face Hub does: the ETag "
                              f"{etag!r} or the commit {commit!r} of {name} is not a hash; "
                              "nothing was written")  # fmt: skip
    if meta.size is None or meta.size < 0:
        raise ModelFetchError(f"{host} did not say how large {name} is; a download without a "
                              "size is not started")  # fmt: skip
    check_transport(meta.location, f"{host} sends {name} from")
    return _Remote(name, meta.location, meta.size, meta.etag, meta.commit_hash)


def _check_names(names: list[str], host: str) -> None:
    """Each file name the Hub listed is a relative path inside the repository (no ``..``, no
    absolute path, no backslash or control character): it becomes a path on this disk."""
    for name in names:
        parts = name.split("/")
        if (not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..")
                for p in parts) or any(ord(c) < 32 or c == "\x7f" for c in name)):  # fmt: skip
            raise ModelFetchError(f"{host} listed a file {clip_message(name, 120)!r} that is not "
                                  "a name inside the repository; nothing was written")  # fmt: skip


def _check_revision(revision: str | None) -> None:
    """A revision names a ref file of the cache (``refs/<revision>``): a branch, a tag or a
    commit, segments of letters, digits and ``._-`` only."""
    if revision is not None and not all(_REF_PART.match(p) for p in revision.split("/")):
        raise HubReferenceError(f"{clip_message(revision, 120)!r} is not a revision name (a "
                                "branch, a tag or a commit)")  # fmt: skip


def _inside(path: Path, root: Path) -> None:
    """Refuse ``path`` unless it stays inside ``root`` once links are followed."""
    resolved, top = path.resolve(), root.resolve()
    if resolved != top and not resolved.is_relative_to(top):
        raise ModelFetchError(f"{path} would be outside {root}; nothing was written there")


@dataclass(frozen=True)
class _Place:
    """Where one file goes: the finished file, its partial download, and the lock the client
    takes for it."""

    done: Path
    partial: Path
    lock: Path
    ready: bool  # already there
    root: Path  # the folder (the cache, or the one given) every path here stays inside
    pointer: Path | None = None  # the cache's snapshot link to ``done`` (None: a folder)


def _place(ref: HubRef, remote: _Remote, cache: Path, folder: Path | None) -> _Place:
    from huggingface_hub._local_folder import (  # noqa: PLC0415 (the folder layout's owner)
        get_local_download_paths,
        read_download_metadata,
    )
    from huggingface_hub.file_download import repo_folder_name  # noqa: PLC0415

    if folder is not None:
        paths = get_local_download_paths(folder, remote.name)
        kept = read_download_metadata(folder, remote.name)
        ready = paths.file_path.is_file() and kept is not None and kept.etag == remote.etag
        place = _Place(paths.file_path, paths.incomplete_path(remote.etag), paths.lock_path,
                       ready, folder)  # fmt: skip
    else:
        repo_folder = repo_folder_name(repo_id=ref.repo_id, repo_type="model")
        storage = cache / repo_folder
        blob = storage / "blobs" / remote.etag
        pointer = storage / "snapshots" / remote.commit / remote.name
        lock = cache / ".locks" / repo_folder / f"{remote.etag}.lock"
        place = _Place(blob, blob.with_name(blob.name + ".incomplete"), lock,
                       blob.is_file() or pointer.is_file(), cache, pointer)  # fmt: skip
    for path in (place.done, place.partial, place.lock, place.pointer):
        if path is not None:
            _inside(path, place.root)
    return place


def _on_disk(place: _Place, remote: _Remote) -> int:
    if place.ready:
        return remote.size
    with suppress(OSError):
        size = place.partial.stat().st_size
        return size if size <= remote.size else 0
    return 0


@dataclass(frozen=True)
class _Job:
    """One fetch: where from (and with which token), where to, and its progress and cancel."""

    ref: HubRef
    where: str
    token: str | bool  # False: none (never the client's own stored token)
    headers: dict[str, str]
    cache: Path
    folder: Path | None
    tally: _Tally
    cancel: CancelCheck | None


def _transfer(job: _Job, remote: _Remote, place: _Place) -> None:
    """Bring ``remote``'s bytes into ``place.partial``, from where they stopped."""
    import httpx2  # noqa: PLC0415
    from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff  # noqa: PLC0415

    host, tally, where = endpoint_host(job.where), job.tally, job.where
    size = remote.size
    resumes = RESUMES
    place.partial.parent.mkdir(parents=True, exist_ok=True)
    while True:
        have = place.partial.stat().st_size if place.partial.exists() else 0
        if have > size:  # not this file's beginning
            place.partial.unlink()  # (the tally never counted it: see _on_disk)
            continue
        if have == size:
            return
        wanted = {**_auth(job.headers, remote.url, where), "Accept-Encoding": "identity"}
        if have:
            wanted["Range"] = f"bytes={have}-"
        got = 0
        try:
            with http_stream_backoff("GET", remote.url, headers=wanted, timeout=TIMEOUT_S,
                                     retry_on_exceptions=()) as response:
                hf_raise_for_status(response)
                if have and response.status_code != 206:  # the whole file again: start over
                    tally.add(-have, force=True)
                    have = 0
                with place.partial.open("ab" if have else "wb") as out:
                    for block in response.iter_bytes():
                        _check(job.cancel)
                        if have + got + len(block) > size:
                            break
                        out.write(block)
                        got += len(block)
                        tally.add(len(block))
                    else:
                        return
            place.partial.unlink(missing_ok=True)  # more than announced: not the Hub's file
            raise ModelFetchError(f"{host} sent more than the {mb(size)} it announced for "
                                  f"{remote.name}; the download was stopped and deleted")
        except (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.ReadTimeout):
            if got and resumes:  # it was moving: ask for the rest now
                resumes -= 1
                continue
            raise ModelFetchError(
                f"the connection to {host} broke after {mb(tally.done)} of {mb(tally.total)}; "
                "fetching again resumes there"
            ) from None


def _verify(remote: _Remote, place: _Place, cancel: CancelCheck | None, where: str) -> None:
    """Refuse a partial file that is not the Hub's file (a wrong size, a wrong SHA-256): it is
    deleted, so the next fetch starts over instead of resuming it."""
    size = place.partial.stat().st_size
    problem = None
    if size != remote.size:
        if size < remote.size:
            raise ModelFetchError(
                f"{endpoint_host(where)} closed the connection after {mb(size)} of "
                f"{mb(remote.size)} of {remote.name}; fetching again resumes there"
            )
        problem = f"{mb(size)} arrived instead of {mb(remote.size)}"
    elif _SHA256.match(remote.etag):
        digest = hashlib.sha256()
        with place.partial.open("rb") as f:
            while block := f.read(HASH_CHUNK):
                _check(cancel)
                digest.update(block)
        if digest.hexdigest() != remote.etag:
            problem = "its SHA-256 differs from the Hub's"
    if problem:
        place.partial.unlink(missing_ok=True)
        raise ModelFetchError(f"the download of {remote.name} is not the Hub's file ({problem}); "
                              "it was deleted, fetch it again")  # fmt: skip


def _bring(job: _Job, remote: _Remote, place: _Place) -> None:
    """Download one file (resuming), check it and put it where the client expects it."""
    from huggingface_hub.utils import WeakFileLock  # noqa: PLC0415

    place.lock.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(place.lock, timeout=1):  # the client's lock: one writer per file
        _transfer(job, remote, place)
        _verify(remote, place, job.cancel, job.where)
        os.chmod(place.partial, 0o644)
        os.replace(place.partial, place.done)
    if job.folder is not None:
        from huggingface_hub._local_folder import write_download_metadata  # noqa: PLC0415

        write_download_metadata(job.folder, remote.name, remote.commit, remote.etag)


def _file(job: _Job, remote: _Remote, place: _Place) -> Path:
    """The file where the client's layout has it, filed with the client's own local helpers and
    no request (a second answer of the server would be one more to check): in the cache, the
    revision's ref and the snapshot's link to the blob; in a folder, the file itself, its
    metadata written when it arrived."""
    if place.pointer is None:
        return place.done
    from huggingface_hub.file_download import (  # noqa: PLC0415 (the cache layout's owner)
        _cache_commit_hash_for_specific_revision,
        _create_symlink,
    )

    storage = place.done.parent.parent
    revision = job.ref.revision or "main"
    _inside(storage / "refs" / revision, storage)
    _cache_commit_hash_for_specific_revision(str(storage), revision, remote.commit)
    pointer = place.pointer
    linked = pointer.is_symlink() and pointer.resolve() == place.done.resolve()
    if not linked and not (pointer.is_file() and not pointer.is_symlink()):
        pointer.parent.mkdir(parents=True, exist_ok=True)
        _create_symlink(str(place.done), str(pointer), new_blob=not place.ready)
    return pointer


def _free_space(places: list[tuple[_Remote, _Place]], target: Path) -> None:
    missing = sum(r.size - _on_disk(p, r) for r, p in places)
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return
    if free < missing:
        raise ModelFetchError(f"not enough free space in {target}: the download needs "
                              f"{mb(missing)}, {mb(free)} is free")  # fmt: skip


def _discard(places: list[_Place]) -> None:
    """Remove files that arrived whole but are not a model: the file (a cache's blob) and the
    cache's link to it, each where this fetch put it (never a path a link leads elsewhere)."""
    for place in places:
        for path in (place.pointer, place.done):
            if path is not None:
                with suppress(OSError):
                    path.unlink()


def _check_gguf(paths: list[Path], places: list[_Place], ref: HubRef) -> None:
    """Every file of the model is a GGUF ContextLens can read (each part of a split), or they
    are all removed."""
    from app.core.engine.gguf import GGUFError, check_parts  # noqa: PLC0415

    try:
        check_parts(paths[0])
    except (GGUFError, OSError, ValueError) as exc:
        _discard(places)
        reason = str(exc).rstrip(".") or type(exc).__name__
        raise ModelFetchError(f"{paths[0].name} from {ref.repo_id} is not a GGUF model that "
                              f"ContextLens can read ({reason}); it was removed") from None


def fetch_hub_model(
    reference: str | HubRef,
    folder: Path | None = None,
    progress: Progress | None = None,
    cancel: CancelCheck | None = None,
    *,
    cache_dir: Path | None = None,
    on_plan: Any = None,
) -> Path:
    """Fetch the model ``reference`` names (see :mod:`app.core.hub_refs`) and return the local
    path of its (first) file.

    Into ``folder`` when given, else into the Hugging Face cache (``cache_dir``, default
    :func:`hub_cache_dir`). ``progress(done, total)`` counts the bytes of all its files (a
    resumed download starts at what was there); ``cancel`` (an Event, or a callable returning
    True) stops it within a chunk, keeping the partial file for the next fetch.
    ``on_plan(names, total_bytes)`` hears what will be fetched once the Hub has said. Raises
    :class:`ModelFetchError` in one sentence (:class:`Cancelled` when cancelled)."""
    where = endpoint()
    check_transport(where, "the Hugging Face endpoint")
    ref = reference if isinstance(reference, HubRef) else parse_reference(reference, where)
    _check_revision(ref.revision)
    if ref.filename is not None and not ref.filename.lower().endswith(".gguf"):
        raise HubReferenceError(f"{ref.filename} is not a GGUF file (its name ends otherwise)")
    cache = Path(cache_dir) if cache_dir is not None else hub_cache_dir()
    folder = Path(folder).expanduser().resolve() if folder is not None else None
    secret = hub_token(where)
    token: str | bool = secret or False  # False: never the client's own stored token
    what: list[str] = []
    with _in_sentences(ref, where, secret, what):
        from huggingface_hub import HfApi  # noqa: PLC0415
        from huggingface_hub.utils import build_hf_headers  # noqa: PLC0415

        info = HfApi(endpoint=where, token=token).model_info(ref.repo_id, revision=ref.revision,
                                                             timeout=TIMEOUT_S)  # fmt: skip
        names = choose_files(ref, [s.rfilename for s in info.siblings or []])
        _check_names(names, endpoint_host(where))
        remotes = []
        for name in names:
            what[:] = [name]
            remotes.append(_describe(ref, name, where, token))
        places = [(r, _place(ref, r, cache, folder)) for r in remotes]
        waiting = not all(p.ready for _, p in places)  # all there: nothing to report
        tally = _Tally(progress if waiting else None, sum(r.size for r in remotes))
        if on_plan is not None:
            on_plan(names, tally.total)
        _free_space(places, folder or cache)
        tally.add(sum(_on_disk(p, r) for r, p in places), force=True)
        headers = build_hf_headers(token=token, library_name="contextlens")
        job = _Job(ref, where, token, headers, cache, folder, tally, cancel)
        try:
            for remote, place in places:
                what[:] = [remote.name]
                if not place.ready:
                    _check(cancel)
                    _bring(job, remote, place)
        except OSError as exc:
            if exc.errno is None:
                raise
            disk_error(exc, folder or cache)
        tally.add(0, force=True)
        paths = [_file(job, remote, place) for remote, place in places]
    _check_gguf(paths, [place for _, place in places], ref)
    return paths[0]
