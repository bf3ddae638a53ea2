"""HTTP to an inference server: one client, retries on connection errors only, one-sentence errors.

A request that never reached the server (refused, unreachable, timed out while connecting) is
safe to send again, so only those are retried here, with a growing pause; anything the server
answered (an HTTP error, a broken stream) is reported as it is, never repeated behind the person's
back. (The engine asks again for one reply a server ended without a finish reason, which is how
llama-cpp-python's server cuts a reply short: app/core/engine/remote.py.) Streams are Server-Sent
Events (``data: {...}`` lines, ``data: [DONE]`` at the end) and can be closed from another thread,
which is how a cancel stops a reply the server is still sending.

What a server sends is bounded: a body over :data:`MAX_BODY_BYTES` or a streamed line over
:data:`MAX_LINE_BYTES` is refused in one sentence (an endless answer would otherwise fill the
memory). An address without a scheme is ``https://`` unless its host is this machine; an API key
about to go over plain HTTP to another machine is said (:func:`key_in_clear`). A client can hold
its requests to what the server serves at once (:meth:`Client.limit_in_flight`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from app.core.engine.types import EngineError

DEFAULT_TIMEOUT_S = 600.0  # between two pieces of a reply: a long prompt on a CPU takes minutes
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF_S = 0.5  # the first pause; each retry waits twice as long as the one before
MAX_ERROR_CHARS = 300  # of a server's own error message, quoted in ours
# What a server may send: the largest real answers are token lists of a long document (about 7
# bytes a token) and a vLLM /metrics page; a streamed event is one token's JSON
MAX_BODY_BYTES = 64 << 20
MAX_LINE_BYTES = 1 << 20


class ServerError(EngineError):
    """The server could not be reached, refused a request, or broke off a reply."""

    def __init__(self, message: str, *, status: int | None = None, body: Any = None) -> None:
        self.status = status
        self.body = body
        super().__init__(message)


class ServerUnreachableError(ServerError):
    """Nothing answered at the address (after the retries)."""


class StreamBrokenError(ServerError):
    """The server stopped sending in the middle of a reply (it died, or the network did)."""


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is this machine: ``localhost`` or a loopback address."""
    if not host:
        return False
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def normalize_url(text: str) -> str:
    """The server's base URL as ContextLens keeps it: scheme, host, port and any path prefix,
    without a trailing ``/v1`` (the endpoints add their own). Without a scheme it is ``http://``
    for this machine and ``https://`` for any other host (``api.example.com:443`` must not go
    out in clear). ValueError with one sentence for anything that is not an http(s) address, or
    one that carries a password."""
    raw = text.strip()
    if not raw:
        raise ValueError("the server address is empty")
    if "://" not in raw:
        raw = ("http://" if is_loopback(urlsplit("//" + raw).hostname) else "https://") + raw
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{text.strip()!r} is not an http:// or https:// address")
    if not parts.hostname:
        raise ValueError(f"{text.strip()!r} names no host")
    if parts.username or parts.password:
        raise ValueError(
            "the address holds a user name or password; give the API key separately "
            "(it is kept in the system keyring, never in the address)"
        )
    try:
        parts.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError:
        raise ValueError(f"{text.strip()!r} has an invalid port") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def same_server(a: str, b: str) -> bool:
    """Whether two addresses name the same server: scheme, host, port (a default one counted)
    and path prefix alike. False when either is not an address."""
    try:
        one, two = urlsplit(normalize_url(a)), urlsplit(normalize_url(b))
    except ValueError:
        return False

    def key(parts: Any) -> tuple[str, str, int, str]:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return parts.scheme, (parts.hostname or "").rstrip("."), port, parts.path

    return key(one) == key(two)


def key_in_clear(url: str, api_key: str | None) -> str | None:
    """The one sentence that warns of an API key about to go unencrypted to another machine
    (plain ``http://`` to a host that is not this one), or None."""
    if not api_key:
        return None
    parts = urlsplit(normalize_url(url))
    if parts.scheme != "http" or is_loopback(parts.hostname):
        return None
    return (
        f"the API key goes to {parts.netloc} over plain HTTP, unencrypted, where anyone on the "
        "network in between can read it (use https:// if the server offers it)"
    )


@dataclass(frozen=True)
class Connection:
    """Where the server is and how to talk to it. The key is never printed or stored here."""

    url: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", normalize_url(self.url))
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        if self.retries < 0:
            raise ValueError("retries cannot be negative")


def _server_message(response: httpx.Response) -> str:
    """The error the server put in its body (OpenAI's ``{"error": {"message"}}``, FastAPI's
    ``{"detail"}``), or its status line."""
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        return text[:MAX_ERROR_CHARS] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:MAX_ERROR_CHARS]
        if isinstance(error, str) and error:
            return error[:MAX_ERROR_CHARS]
        detail = body.get("detail") or body.get("message")
        if detail:
            return str(detail)[:MAX_ERROR_CHARS]
    return response.reason_phrase


def _json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


class InFlightGate:
    """At most ``limit`` requests at a time, over every thread. A thread that holds one sends
    more without waiting: a request it makes while reading a stream of its own must not wait
    for itself (the stream's generator may be closed from another thread: the turn is given
    back all the same)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the limit must be at least 1")
        self.limit = limit
        self._slots = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self._depth: dict[int, int] = {}  # thread -> turns it holds, nested

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._lock:
            depth = self._depth.get(me, 0)
        if depth == 0:
            self._slots.acquire()
        with self._lock:
            self._depth[me] = depth + 1
        try:
            yield
        finally:
            with self._lock:
                if depth:
                    self._depth[me] = depth
                else:
                    self._depth.pop(me, None)
            if depth == 0:
                self._slots.release()


class Client:
    """One HTTP client for one server, shared by every thread that talks to it."""

    def __init__(self, connection: Connection, *, sleep: Callable[[float], None] = time.sleep):
        self.connection = connection
        self._sleep = sleep
        headers = {"Accept": "application/json"}
        if connection.api_key:
            headers["Authorization"] = f"Bearer {connection.api_key}"
        timeout = httpx.Timeout(connection.timeout_s, connect=connection.connect_timeout_s)
        self._http = httpx.Client(base_url=connection.url, headers=headers, timeout=timeout,
                                  trust_env=False)  # fmt: skip
        self._open: set[httpx.Response] = set()
        self._lock = threading.Lock()
        self._gate: InFlightGate | None = None
        self.max_body_bytes = MAX_BODY_BYTES
        self.max_line_bytes = MAX_LINE_BYTES
        self._deadline: tuple[float, float] | None = None  # (monotonic end, its seconds)
        self._cancelled: Callable[[], bool] = lambda: False

    @contextlib.contextmanager
    def within(self, seconds: float, cancelled: Callable[[], bool]) -> Iterator[None]:
        """Every request made inside ends ``seconds`` from now at the latest, or at the next
        chunk after ``cancelled()`` turns true: the timeouts bound each read, and a server that
        trickles its answer a byte at a time otherwise held a caller for as long as it liked."""
        self._deadline = (time.monotonic() + seconds, seconds)
        self._cancelled = cancelled
        try:
            yield
        finally:
            self._deadline, self._cancelled = None, lambda: False

    def _in_time(self, what: str) -> None:
        """ServerError when the caller's wall-clock deadline has passed or it cancelled."""
        if self._cancelled():
            raise ServerError(f"asking {self.host} was cancelled ({what})")
        if self._deadline is not None and time.monotonic() > self._deadline[0]:
            raise ServerError(f"{self.host} took more than {self._deadline[1]:g} s to answer "
                              f"{what}")  # fmt: skip

    @property
    def host(self) -> str:
        return urlsplit(self.connection.url).netloc

    def limit_in_flight(self, limit: int | None) -> None:
        """Hold every request (a stream until it is closed) to ``limit`` at a time; None: no
        limit. For a server that serves one request at a time and cuts a reply short when
        another arrives (llama-cpp-python's, by default)."""
        self._gate = InFlightGate(limit) if limit else None

    @property
    def in_flight_limit(self) -> int | None:
        return self._gate.limit if self._gate is not None else None

    def _turn(self) -> contextlib.AbstractContextManager[None]:
        return self._gate.held() if self._gate is not None else contextlib.nullcontext()

    def close(self) -> None:
        self.abort_streams()
        self._http.close()

    # ----- requests ------------------------------------------------------------------------

    def get(self, path: str, *, timeout: float | None = None) -> httpx.Response:
        """GET ``path``; the response whatever its status (the caller decides what a 404 means)."""
        return self._send("GET", path, None, timeout)

    def post(self, path: str, body: dict[str, Any], *, timeout: float | None = None
             ) -> httpx.Response:  # fmt: skip
        return self._send("POST", path, body, timeout)

    def get_json(self, path: str, *, timeout: float | None = None) -> Any | None:
        """The JSON of a GET, or None when the server has no such endpoint or it is off."""
        response = self.get(path, timeout=timeout)
        if response.status_code in (401, 403):
            raise self.error(response, f"GET {path}")
        return _json_body(response) if response.is_success else None

    def post_json(self, path: str, body: dict[str, Any], what: str) -> Any:
        response = self.post(path, body)
        if not response.is_success:
            raise self.error(response, what)
        data = _json_body(response)
        if data is None:
            raise ServerError(f"{self.host} answered {what} with something that is not JSON")
        return data

    def _send(self, method: str, path: str, body: dict[str, Any] | None,
              timeout: float | None) -> httpx.Response:  # fmt: skip
        """The response, its body read (at most :attr:`max_body_bytes` of it)."""
        kwargs: dict[str, Any] = {"json": body} if body is not None else {}
        if timeout is not None:
            kwargs["timeout"] = httpx.Timeout(timeout, connect=min(timeout, 5.0))
        request = self._http.build_request(method, path, **kwargs)
        self._in_time(f"{method} {path}")
        with self._turn():
            response = self._retrying(lambda: self._http.send(request, stream=True), path,
                                      timeout)  # fmt: skip
            try:
                self._read(response, f"{method} {path}", timeout)
            finally:
                response.close()
        return response

    def _read(self, response: httpx.Response, what: str, timeout: float | None = None) -> None:
        """Read the body of a streamed ``response`` into it, refusing one larger than
        :attr:`max_body_bytes` (an endless body would fill the memory)."""
        limit = self.max_body_bytes
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise self._too_big(what, limit)
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > limit:
                    raise self._too_big(what, limit)
                chunks.append(chunk)
                self._in_time(what)
        except httpx.TimeoutException:
            waited = timeout if timeout is not None else self.connection.timeout_s
            raise ServerError(f"{self.host} did not finish answering {what} within "
                              f"{waited:g} s") from None  # fmt: skip
        except httpx.HTTPError as exc:
            raise ServerError(f"the answer of {self.host} to {what} broke off: "
                              f"{_reason(exc)}") from None  # fmt: skip
        response._content = b"".join(chunks)  # as Response.read() keeps it, for .json() and .text

    def _too_big(self, what: str, limit: int) -> ServerError:
        return ServerError(f"{self.host} sent more than {_size(limit)} in answer to {what}, "
                           "far more than a server's answer; it was cut off there")  # fmt: skip

    def _retrying(self, send: Callable[[], httpx.Response], path: str,
                  timeout: float | None = None) -> httpx.Response:  # fmt: skip
        """``send`` again after a connection error (it never reached the server), up to the
        connection's retries, waiting backoff, 2 x backoff, ... in between. ``timeout`` is the
        request's own, when it has one shorter than the connection's."""
        pause = self.connection.backoff_s
        attempt = 0
        while True:
            try:
                return send()
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt >= self.connection.retries:
                    raise self._unreachable(exc, attempt + 1) from None
                attempt += 1
                self._sleep(pause)
                pause *= 2
            except httpx.TimeoutException:
                waited = timeout if timeout is not None else self.connection.timeout_s
                message = f"{self.host} did not answer {path} within {waited:g} s"
                raise ServerError(message) from None
            except httpx.HTTPError as exc:
                raise ServerError(f"the request to {self.host} failed: {_reason(exc)}") from None

    def _unreachable(self, exc: Exception, attempts: int) -> ServerUnreachableError:
        tries = f" (tried {attempts} times)" if attempts > 1 else ""
        if isinstance(exc, httpx.ConnectTimeout):
            why = f"no answer within {self.connection.connect_timeout_s:g} s"
        else:
            why = _reason(exc)
        return ServerUnreachableError(
            f"cannot reach the server at {self.connection.url}: {why}{tries}"
        )

    def error(self, response: httpx.Response, what: str) -> ServerError:
        """The one sentence for a request the server answered with an error status."""
        code = response.status_code
        message = _server_message(response)
        if code in (401, 403):
            key = "the API key was refused" if self.connection.api_key else "it needs an API key"
            text = f"{self.host} refused {what}: {key} (HTTP {code}: {message})"
        elif code == 404:
            text = f"{self.host} has no {what} (HTTP 404: {message})"
        elif code == 503:
            text = f"{self.host} is not ready for {what} (HTTP 503: {message}); try again soon"
        else:
            text = f"{self.host} refused {what} (HTTP {code}): {message}"
        return ServerError(text, status=code, body=_json_body(response))

    # ----- streams -------------------------------------------------------------------------

    def stream(
        self, path: str, body: dict[str, Any], what: str
    ) -> Generator[dict[str, Any], None, None]:
        """POST ``body`` and yield each event's JSON of a Server-Sent Events reply, up to
        ``[DONE]`` or the end of the stream. :meth:`abort_streams` (from any thread) closes it:
        the iterator then ends early, without an error."""
        # A connection of its own, closed with the stream: one cut short (a cancel, a server
        # that died) never goes back to the pool to fail the next request.
        headers = {"Accept": "text/event-stream", "Connection": "close"}
        request = self._http.build_request("POST", path, json=body, headers=headers)
        with self._turn():
            response = self._retrying(lambda: self._http.send(request, stream=True), path)
            with self._lock:
                self._open.add(response)
            try:
                if not response.is_success:
                    self._read(response, what)
                    raise self.error(response, what)
                yield from self._events(response, what)
            finally:
                with self._lock:
                    self._open.discard(response)
                response.close()

    def _lines(self, response: httpx.Response, what: str) -> Iterator[str]:
        """The lines of a stream (ended by LF, CRLF or CR, as Server-Sent Events may be), none
        longer than :attr:`max_line_bytes`: httpx's own line reader keeps an endless line."""
        limit = self.max_line_bytes
        pending = bytearray()
        scanned = 0  # what of ``pending`` holds no line end (each byte is searched once)
        for chunk in response.iter_bytes():
            pending += chunk
            start = 0
            while (end := _LINE_END.search(pending, max(scanned, start))) is not None:
                if end.group() == b"\r" and end.end() == len(pending):
                    break  # perhaps the first half of a CRLF: the next chunk says
                yield pending[start : end.start()].decode("utf-8", errors="replace")
                start = end.end()
            del pending[:start]
            scanned = len(pending) - pending.endswith(b"\r")
            if len(pending) > limit:
                raise StreamBrokenError(
                    f"{self.host} sent more than {_size(limit)} without a line break in the "
                    f"middle of {what}, which no reply holds; it was cut off there"
                )
        if pending:
            yield pending.rstrip(b"\r").decode("utf-8", errors="replace")

    def _events(self, response: httpx.Response, what: str) -> Iterator[dict[str, Any]]:
        try:
            for line in self._lines(response, what):
                if not line.startswith("data:"):
                    continue  # comments, event names, blank separators
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    raise ServerError(f"{self.host} sent a piece of {what} that is not JSON: "
                                      f"{data[:80]!r}") from None  # fmt: skip
                if isinstance(event, dict):
                    yield event
        except (httpx.StreamClosed, httpx.ResponseNotRead):
            return  # closed by abort_streams: the caller knows it cancelled
        except httpx.TimeoutException:
            raise StreamBrokenError(
                f"{self.host} sent nothing for {self.connection.timeout_s:g} s in the middle "
                f"of {what}"
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.NetworkError) as exc:
            if response.is_closed:
                return
            raise StreamBrokenError(
                f"the connection to {self.host} broke in the middle of {what} "
                f"({_reason(exc)}); the server may have stopped"
            ) from None

    def abort_streams(self) -> None:
        """Close every stream being read: the server sees the client go and stops the reply."""
        with self._lock:
            open_now = list(self._open)
        for response in open_now:
            # closing a socket another thread reads may race; it is closed either way
            with contextlib.suppress(httpx.HTTPError, OSError, RuntimeError):
                response.close()


_LINE_END = re.compile(rb"\r\n|\r|\n")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n:,} bytes"


def _reason(exc: BaseException) -> str:
    """A short, human reason from an httpx error ("connection refused", "name not resolved")."""
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "connection refused" in lowered or "errno 111" in lowered:
        return "the connection was refused (is the server running?)"
    if (
        "name or service not known" in lowered
        or "nodename nor servname" in lowered
        or ("name resolution" in lowered)
    ):
        return "the host name could not be resolved"
    if "wrong version number" in lowered or "record layer failure" in lowered:
        return ("the server does not speak HTTPS (for a plain-HTTP server, write http:// in "
                "front of the address)")  # fmt: skip
    if "certificate" in lowered or "ssl" in lowered:
        return f"the secure connection failed ({text[:120]})"
    return text[:200]
