"""What a server may send, and how many requests it gets: against small servers on loopback.

A hostile server sends an endless body, an endless line in a stream, a body announced as 10 GB, a
gzip body that inflates without end and events past the reply's length; the client runs in a child
process whose address space is capped (RLIMIT_AS), so a read that kept everything would die there
with MemoryError instead of taking this machine's memory, and each must end in one sentence.

A fake llama-cpp-python server (the endpoints ContextLens probes, a reply a word at a time) cuts
replies short as that server does when another request arrives: the engine asks again and goes on
where the text stopped, says so when the reply asked for again begins otherwise, and never has
more requests in flight than the server serves.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.core.engine import remote as remote_module
from app.core.engine.remote import CUT_SHORT, RemoteEngine, ServerInfo, reply_cap
from app.core.engine.remote_http import (
    MAX_BODY_BYTES,
    MAX_LINE_BYTES,
    Client,
    Connection,
    InFlightGate,
    ServerError,
    StreamBrokenError,
)
from app.core.engine.remote_info import kv_from_slots
from app.core.engine.types import Finished, TextDelta
from app.core.tokens import cl100k

ROOT = Path(__file__).parents[2]
ADDRESS_SPACE = 1 << 30  # the child's cap: far above a capped read, far below an endless one
PIECE = b"x" * 65536


class _Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # a body without a length runs until the connection closes

    def _endless(self, first: bytes, piece: bytes = PIECE) -> None:
        self.wfile.write(first)
        try:
            while True:
                self.wfile.write(piece)
        except OSError:
            pass  # the client hung up: what it should do

    def do_GET(self) -> None:
        if self.path == "/endless":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self._endless(b'{"data": ["')
        elif self.path == "/announced":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(10 << 30))
            self.end_headers()
            self._endless(b"{")
        elif self.path == "/gzip":  # a few KB on the wire for every 64 MB it inflates to
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.end_headers()
            squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
            head = squeeze.compress(b'{"data": "') + squeeze.flush(zlib.Z_SYNC_FLUSH)
            zeros = squeeze.compress(b"0" * (1 << 20)) + squeeze.flush(zlib.Z_SYNC_FLUSH)
            self._endless(head, zeros)
        elif self.path == "/small":
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(500 if self.path == "/endless-error" else 200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.path == "/endless-line":
            self._endless(b'data: {"choices": [{"text": "')
        elif self.path == "/endless-error":
            self._endless(b'{"error": "')
        else:  # events without end, each a valid token
            event = b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n'
            self._endless(event, event * 64)

    def log_message(self, *args: object) -> None:
        pass


def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """The address of a loopback server answering with ``handler``, for as long as it lasts."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    yield from _serving(_Hostile)


CHILD = textwrap.dedent("""
    import json, resource, sys, time
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from app.core.engine.remote_http import Client, Connection, ServerError
    client = Client(Connection(sys.argv[1], retries=0, timeout_s=30))
    said = {}

    def attempt(name, call):
        t0 = time.perf_counter()
        try:
            call()
            outcome = "no error"
        except ServerError as exc:
            outcome = str(exc)
        except MemoryError:
            outcome = "MemoryError"
        said[name] = [outcome, time.perf_counter() - t0]

    attempt("body", lambda: client.get_json("/endless"))
    attempt("announced", lambda: client.get_json("/announced"))
    attempt("gzip", lambda: client.get_json("/gzip"))
    attempt("line", lambda: list(client.stream("/endless-line", {}, "a completion request")))
    attempt("error body", lambda: list(client.stream("/endless-error", {}, "a completion request")))
    attempt("small", lambda: client.get_json("/small"))
    print(json.dumps(said))
""")


def test_endless_answers_are_cut_off_in_one_sentence_within_a_capped_memory(hostile: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, hostile, str(ADDRESS_SPACE)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = {name: outcome for name, (outcome, _) in json.loads(done.stdout).items()}
    host = hostile.removeprefix("http://")
    body = f"{MAX_BODY_BYTES >> 20} MiB"
    for name, what in (("body", "GET /endless"), ("announced", "GET /announced"),
                       ("gzip", "GET /gzip")):  # fmt: skip
        assert said[name] == (f"{host} sent more than {body} in answer to {what}, far more "
                              "than a server's answer; it was cut off there")  # fmt: skip
    assert said["line"] == (
        f"{host} sent more than {MAX_LINE_BYTES >> 20} MiB without a line break in the "
        "middle of a completion request, which no reply holds; it was cut off there"
    )
    assert said["error body"].startswith(f"{host} sent more than {body} in answer to a "
                                         "completion request")  # fmt: skip
    assert said["small"] == "no error"
    seconds = [s for _, s in json.loads(done.stdout).values()]
    assert max(seconds) < 30  # each stops at the cap, not at the end of the memory


@pytest.mark.unit
def test_a_smaller_cap_is_kept_to_the_byte(hostile: str) -> None:
    """Without a subprocess: the reads stop at the client's own limits."""
    with contextlib.closing(Client(Connection(hostile, retries=0))) as client:
        client.max_body_bytes, client.max_line_bytes = 100_000, 10_000
        with pytest.raises(ServerError, match="sent more than 100,000 bytes in answer"):
            client.get_json("/endless")
        with pytest.raises(StreamBrokenError, match="without a line break"):
            list(client.stream("/endless-line", {}, "a completion request"))
        assert client.get_json("/small") == {"ok": True}


@pytest.mark.unit
def test_lines_end_at_lf_crlf_or_cr_even_across_chunks() -> None:
    class _Fake:
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = chunks

        def iter_bytes(self) -> Iterator[bytes]:
            yield from self.chunks

    client = Client(Connection("127.0.0.1:9"))
    chunks = [b"data: 1\r", b"\ndata: 2\rdata: 3\n", b"\ndata: \xc3", b"\xa9\r\n", b"last"]
    lines = list(client._lines(_Fake(chunks), "a reply"))  # type: ignore[arg-type]
    assert lines == ["data: 1", "data: 2", "data: 3", "", "data: é", "last"]
    drip = [bytes([b]) for b in b"".join(chunks)]  # a byte at a time: the same lines
    assert list(client._lines(_Fake(drip), "a reply")) == lines  # type: ignore[arg-type]
    client.close()


# ----- a fake llama-cpp-python server ---------------------------------------------------------

WORDS = [f" w{i}" for i in range(12)]


class _FakeLlamaCppPython(BaseHTTPRequestHandler):
    """/v1/models, /extras/tokenize and /extras/detokenize as llama-cpp-python's server answers
    them (a character a token), and a streamed reply of WORDS; ``cut`` says after how many
    words each of the next replies is cut short (``[DONE]`` without a finish reason)."""

    protocol_version = "HTTP/1.1"
    server: Any

    def _json(self, data: Any, status: int = 200) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self._leave()  # before the client can have its answer and send the next request
        self.wfile.write(body)

    def _enter(self) -> None:
        self._in = True
        with self.server.lock:
            self.server.in_flight += 1
            self.server.most = max(self.server.most, self.server.in_flight)

    def _leave(self) -> None:
        """The request is over for the count (once), as the client may see it end."""
        if getattr(self, "_in", False):
            self._in = False
            with self.server.lock:
                self.server.in_flight -= 1

    def do_GET(self) -> None:
        self._enter()
        try:
            if self.path == "/v1/models":
                self._json({"object": "list", "data": [{"id": "fake", "object": "model"}]})
            else:
                self._json({"detail": "Not Found"}, 404)
        finally:
            self._leave()

    def do_POST(self) -> None:
        self._enter()
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if self.path == "/extras/tokenize":
                time.sleep(0.01)
                self._json({"tokens": [ord(c) for c in body["input"]]})
            elif self.path == "/extras/detokenize":
                self._json({"text": "".join(chr(t) for t in body["tokens"])})
            elif self.path == "/v1/completions":
                self._complete(body)
            else:
                self._json({"detail": "Not Found"}, 404)
        finally:
            self._leave()

    def _complete(self, body: dict[str, Any]) -> None:
        with self.server.lock:
            self.server.completions += 1
            cut = self.server.cut.pop(0) if self.server.cut else None
            words = self.server.replies.pop(0) if self.server.replies else WORDS
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        n = min(len(words), int(body["max_tokens"]))
        for i, word in enumerate(words[:n]):
            if cut is not None and i == cut:
                break
            last = i == n - 1
            finish = ("stop" if n == len(words) else "length") if last else None
            event = {"choices": [{"text": word, "index": 0, "finish_reason": finish}]}
            if last:
                self._leave()  # the client's reply ends with this event
            self.wfile.write(f"data: {json.dumps(event)}\r\n\r\n".encode())
            self.wfile.flush()
            time.sleep(0.005)
        self.wfile.write(b"data: [DONE]\r\n\r\n")
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FakeLlamaCppPython)
        self.lock = threading.Lock()
        self.in_flight = self.most = self.completions = 0
        self.cut: list[int | None] = []
        self.replies: list[list[str]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    server = FakeServer()
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def fake_remote(fake: FakeServer) -> Iterator[RemoteEngine]:
    """A remote engine connected to the scripted server (FakeServer), retrying at once."""
    engine = RemoteEngine(Connection(fake.url), n_ctx=512)
    engine._sleep = lambda _s: None
    info = engine.connect()
    assert info.kind == "llama-cpp-python" and info.slots == 1
    yield engine
    engine.close()


def _reply(engine: RemoteEngine, max_tokens: int = 64) -> tuple[str, Finished]:
    text, done = "", None
    for ev in engine.generate(engine.tokenize("Say the words."), max_tokens=max_tokens):
        if isinstance(ev, TextDelta):
            text += ev.text
        elif isinstance(ev, Finished):
            done = ev
    assert done is not None
    return text, done


@pytest.mark.unit
def test_a_reply_cut_short_is_asked_for_again_and_goes_on_where_it_stopped(
    fake: FakeServer, fake_remote: RemoteEngine
) -> None:
    fake.cut = [5, 2]  # the first try ends after 5 words, the second after 2, the third is whole
    text, done = _reply(fake_remote)
    assert text == "".join(WORDS)  # every word once, in order
    assert done.stats.finish_reason == "stop" and done.stats.completion_tokens == len(WORDS)
    assert fake.completions == 3


@pytest.mark.unit
def test_a_reply_cut_short_every_time_is_one_sentence(
    fake: FakeServer, fake_remote: RemoteEngine
) -> None:
    fake.cut = [3, 3, 3]
    with pytest.raises(StreamBrokenError) as exc:
        _reply(fake_remote)
    host = fake.url.removeprefix("http://")
    assert str(exc.value) == (f"{host} ended the reply without saying why, after 3 tokens "
                              f"(asked 3 times) ({CUT_SHORT})")  # fmt: skip
    assert fake.completions == 3


@pytest.mark.unit
def test_a_reply_asked_for_again_that_begins_otherwise_is_not_glued_on(
    fake: FakeServer, fake_remote: RemoteEngine
) -> None:
    fake.cut = [4]
    fake.replies = [WORDS, [" other", *WORDS[1:]]]  # sampled: the second try says another thing
    shown: list[str] = []
    with pytest.raises(StreamBrokenError) as exc:
        for ev in fake_remote.generate(fake_remote.tokenize("Say the words."), max_tokens=64):
            if isinstance(ev, TextDelta):
                shown.append(ev.text)
    assert "".join(shown) == "".join(WORDS[:4])  # what was shown stays what the first try said
    assert "(asked 2 times, the last one beginning another reply)" in str(exc.value)


@pytest.mark.unit
def test_a_server_that_ignores_max_tokens_is_stopped_at_it(hostile: str) -> None:
    """The hostile server's /v1/completions sends token events without end."""
    engine = RemoteEngine(Connection(hostile, retries=0), n_ctx=512)
    engine._info = ServerInfo(hostile, "openai-compatible", "m", 512, "given", None, "estimate",
                              False, "", None, "", False)  # fmt: skip
    engine._estimate = cl100k()
    with engine:
        text, done = "", None
        for ev in engine.generate(engine.tokenize("hi"), max_tokens=50):
            if isinstance(ev, TextDelta):
                text += ev.text
            elif isinstance(ev, Finished):
                done = ev
    assert done is not None and done.stats.finish_reason == "length"
    assert text == "a" * 50 and done.stats.completion_tokens == 50


@pytest.mark.unit
def test_a_one_request_server_never_gets_two_at_once(
    fake: FakeServer, fake_remote: RemoteEngine
) -> None:
    """Counting tokens while a reply streams is what cuts the reply short on llama-cpp-python's
    server: every request waits for its turn, so the reply ends whole and the counts are right."""
    fake.most = 0
    counts: list[int] = []
    counter = fake_remote.counter()

    def count() -> None:
        for _ in range(5):
            counts.extend(counter.count_many([f"text {i}" for i in range(8)]))

    others = [threading.Thread(target=count) for _ in range(2)]
    for t in others:
        t.start()
    texts = [_reply(fake_remote)[0] for _ in range(3)]
    for t in others:
        t.join(timeout=60)
    assert texts == ["".join(WORDS)] * 3 and fake.completions == 3
    assert counts == [len(f"text {i}") for i in range(8)] * 10
    assert fake.most == 1  # never two requests in flight


@pytest.mark.unit
def test_replies_wait_for_a_free_slot_on_a_server_with_slots(fake: FakeServer) -> None:
    """llama-server answers other requests beside its slots: only replies wait for one."""
    engine = RemoteEngine(Connection(fake.url), n_ctx=512)
    engine.connect()
    engine._info = replace(engine.info, kind="llama-server", slots=2)
    engine._hold_to("llama-server", 2)
    assert engine._client.in_flight_limit is None and engine._replies is not None
    fake.most = 0
    texts: list[str] = []
    prompt = engine.tokenize("Say the words.")

    def ask() -> None:
        texts.append("".join(ev.text for ev in engine.generate(prompt, max_tokens=64)
                             if isinstance(ev, TextDelta)))  # fmt: skip

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    engine.close()
    assert texts == ["".join(WORDS)] * 5 and fake.most == 2


@pytest.mark.unit
def test_the_gate_lets_a_thread_that_holds_a_turn_go_on() -> None:
    gate = InFlightGate(1)
    with gate.held(), gate.held():  # nested in one thread: no deadlock
        waited = threading.Event()

        def other() -> None:
            with gate.held():
                waited.set()

        t = threading.Thread(target=other)
        t.start()
        assert not waited.wait(0.2)  # another thread waits for the turn
    t.join(timeout=5)
    assert waited.is_set()
    with pytest.raises(ValueError):
        InFlightGate(0)


METRICS_CHILD = textwrap.dedent("""
    import json, sys, time
    from app.core.engine import remote_info
    from app.core.engine.remote_info import kv_from_metrics
    cap = getattr(remote_info, "MAX_METRICS_CHARS", 1 << 20)
    hostile = "a{\\n" * (int(sys.argv[1]) // 3)  # what MULTILINE ``\\{[^}]*\\}`` backtracked on
    t0 = time.perf_counter()
    found = kv_from_metrics(hostile)
    beyond = "x" * cap + "\\nllamacpp:kv_cache_tokens 5\\n"
    print(json.dumps([found, time.perf_counter() - t0, kv_from_metrics(beyond)]))
""")


def test_a_hostile_metrics_page_is_read_in_one_pass_up_to_its_cap() -> None:
    """Review round 3, row 1: lines like ``a{`` made the /metrics pattern quadratic (1.25 s for
    96 kB, about 5 minutes at 1 MB, holding the GIL; a server may send 64 MiB). Read line by
    line with string operations and only the first MAX_METRICS_CHARS, the largest body a
    server may send is a fraction of a second; a KV line past the cap is not read."""
    done = subprocess.run([sys.executable, "-c", METRICS_CHILD, str(MAX_BODY_BYTES)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found, seconds, beyond = json.loads(done.stdout)
    assert found is None and beyond is None
    assert seconds < 20  # quadratic, the first 96 kB alone took 1.25 s and 64 MiB would take days


# ----- review round 3, row 5: what a server may send in a reply -------------------------------


@pytest.mark.unit
def test_a_reply_piece_that_is_not_text_is_one_sentence(
    fake: FakeServer, fake_remote: RemoteEngine
) -> None:
    """A non-string ``"text"`` raised TypeError out of the engine, which the window's engine
    thread did not catch: the job never ended."""
    for piece in (5, ["a"], {"t": 1}):
        fake.replies = [[" a", piece]]  # type: ignore[list-item]
        with pytest.raises(StreamBrokenError) as err:
            _reply(fake_remote)
        assert str(err.value) == (f"{fake_remote._client.host} sent a piece of the reply that is "
                                  "not text")  # fmt: skip


@pytest.mark.unit
def test_a_reply_far_longer_than_its_tokens_is_cut_at_its_cap(
    fake: FakeServer, fake_remote: RemoteEngine
) -> None:
    """A reply was bounded only by max_tokens x the 1 MiB line cap: 32 MB took 301 s to take
    in. Now the text of a reply is capped at reply_cap(max_tokens) characters."""
    fake.replies = [["x" * 500_000] * 8]  # 4 MB in 8 "tokens", each line under the line cap
    text, done = _reply(fake_remote, max_tokens=8)
    assert len(text) <= reply_cap(8) and done.stats.finish_reason == "length"


@pytest.mark.unit
def test_slots_of_odd_shapes_are_not_figures() -> None:
    """``/slots`` of ``[{"next_token": [1]}]`` raised AttributeError out of kv_usage()."""
    assert kv_from_slots([{"next_token": [1]}]) is None
    assert kv_from_slots([{"next_token": [None], "n_prompt_tokens": 7}]) == 7
    assert kv_from_slots([{"next_token": [{"n_decoded": 3}], "n_prompt_tokens": 7}]) == 10


class _Trickle(BaseHTTPRequestHandler):
    """Answers /v1/models a byte every 0.2 s: each read is within any timeout, the whole is not."""

    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "slow", "object": "model"}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            for byte in (body + " " * 200).encode():
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass  # the client hung up

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def trickle() -> Iterator[str]:
    yield from _serving(_Trickle)


@pytest.mark.unit
def test_connecting_to_a_trickling_server_ends_at_its_deadline_or_a_cancel(
    trickle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server sending a byte every 5 s kept connect() running past 45 s despite the 10 s
    probe timeout, with no cancel. Now connecting has a wall-clock deadline, and a cancel
    ends it at the next byte."""
    monkeypatch.setattr(remote_module, "CONNECT_DEADLINE_S", 1.0)
    engine = RemoteEngine(Connection(trickle, retries=0))
    t0 = time.monotonic()
    with pytest.raises(ServerError, match=r"took more than 1 s to answer GET /v1/models"):
        engine.connect()
    assert time.monotonic() - t0 < 10  # the 40 s the trickle would take, and more
    monkeypatch.setattr(remote_module, "CONNECT_DEADLINE_S", 60.0)
    threading.Timer(0.5, engine.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="was cancelled"):
        engine.connect()
    assert time.monotonic() - t0 < 10
    engine.close()
