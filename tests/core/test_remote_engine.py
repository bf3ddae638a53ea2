"""The remote engine against a real OpenAI-compatible server on loopback (llama-cpp-python's own
server on the default model): probing, exact counts, streaming, jobs, cancel, a server killed
mid-reply, retries, API keys; and the readers of what llama-server and vLLM report."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.default_model import default_model_path
from app.core.documents import document_from_text
from app.core.engine.host import EngineHost
from app.core.engine.remote import NO_KV_STATE, RemoteEngine, UnsupportedRemotelyError
from app.core.engine.remote_http import (
    Connection,
    ServerError,
    ServerUnreachableError,
    StreamBrokenError,
    key_in_clear,
    normalize_url,
    same_server,
)
from app.core.engine.remote_info import identify, kv_from_metrics, kv_from_slots
from app.core.engine.repetition import ends_in_loop
from app.core.engine.types import (
    ContextOverflowError,
    Finished,
    LaneDelta,
    LaneFinished,
    LanesFinished,
    LaneStarted,
    SamplingSettings,
    TextDelta,
)
from app.core.jobs.tasks import JobFinished, TokenBatch, ask, summarize
from app.core.paths import sample_document
from app.core.planning.strategies import Planner
from app.core.tokens import _unicode_to_byte, gguf_encoding
from tests.core.gguf_cases import ARRAY, INT32, STRING, UINT32, build_gguf, kv, tiny_tensors
from tests.loops import LOOP_LINE, LOOP_TEXT
from tests.remote_server import ALIAS, SERVER_N_CTX, Server, free_port, running_server, start_server

N_CTX = SERVER_N_CTX  # the shared server's (tests/conftest.py: server)
DATA = Path(__file__).parents[1] / "data"
QUESTION = "Name three colours."
LONG = SamplingSettings(stop_on_repetition=False)  # a reply that loops goes on


@pytest.fixture
def remote(server: Server) -> Iterator[RemoteEngine]:
    engine = RemoteEngine(Connection(server.url), n_ctx=N_CTX)
    engine.connect()
    yield engine
    engine.close()


def _chat(engine: RemoteEngine | EngineHost, text: str) -> list[int]:
    prompt = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    return engine.tokenize(prompt, parse_special=True)


def _reply(events: Iterator[object]) -> tuple[str, Finished]:
    parts, done = [], None
    for ev in events:
        if isinstance(ev, TextDelta):
            parts.append(ev.text)
        elif isinstance(ev, Finished):
            done = ev
    assert done is not None
    return "".join(parts), done


def test_connect_says_what_the_server_reports_and_what_it_does_not(remote: RemoteEngine) -> None:
    info = remote.info
    assert info.kind == "llama-cpp-python" and info.model == ALIAS
    assert info.n_ctx == N_CTX and info.n_ctx_source.startswith("given")
    assert info.tokenizer == "the server (/extras/tokenize)" and info.exact_counts
    assert info.slots == 1 and not info.accepts_token_ids
    assert info.kv_source == "" and info.kv_figures() == "not reported by this server"
    assert info.chat_template == ""  # no local GGUF given: plain prompts, said in a warning
    assert any("chat template" in w for w in info.warnings)
    assert set(info.unsupported) == {"kv_state", "kv_shift", "audit"}


def test_a_server_that_does_not_report_its_context_needs_it_given(server: Server) -> None:
    with RemoteEngine(Connection(server.url)) as engine, pytest.raises(ValueError) as exc:
        engine.connect()
    assert str(exc.value) == (
        f"{server.url.removeprefix('http://')} does not report its context size; give the size "
        "the server was started with (--n-ctx, or n_ctx in the window)"
    )


def test_an_unknown_model_name_is_refused_with_what_is_served(server: Server) -> None:
    engine = RemoteEngine(Connection(server.url), model="llama-70b", n_ctx=N_CTX)
    with engine, pytest.raises(ValueError, match=f"serves {ALIAS}"):
        engine.connect()


def test_counts_and_tokens_are_the_models_own(remote: RemoteEngine, model_path: Path) -> None:
    local = gguf_encoding(model_path)
    text = (DATA / "src" / "chinese-simplified.txt").read_text(encoding="utf-8")[:3000] + " 123."
    assert remote.tokenize(text) == local.encode(text)
    counter = remote.counter()
    assert counter.exact and counter.name == f"{ALIAS} (server)"
    pieces = [text[:500], text[500:1200], "", "one more"]
    assert counter.count_many(pieces) == [local.count(p) for p in pieces]
    ids = remote.tokenize("<|im_start|>user\n长城<|im_end|>", parse_special=True)
    assert remote.detokenize(ids) == "<|im_start|>user\n长城<|im_end|>"


def test_a_local_gguf_gives_its_template_and_fast_counts_checked_against_the_server(
    server: Server, model_path: Path
) -> None:
    with RemoteEngine(Connection(server.url), model_path=model_path, n_ctx=N_CTX) as engine:
        info = engine.connect()
        assert info.tokenizer.startswith("local GGUF SmolLM2") and "checked" in info.tokenizer
        assert info.chat_template.startswith("local GGUF")
        prompt = engine.apply_chat_template([{"role": "user", "content": "hi"}])
        assert prompt.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nhi" in prompt
        assert engine.counter() is not None and engine.counter().exact


def _other_vocabulary_gguf(path: Path) -> Path:
    """A small, valid GGUF whose byte-level vocabulary numbers the bytes another way."""
    chars = sorted(_unicode_to_byte(), reverse=True)
    kvs = [
        kv("general.architecture", STRING, "llama"),
        kv("llama.block_count", UINT32, 2),
        kv("llama.context_length", UINT32, 256),
        kv("llama.embedding_length", UINT32, 64),
        kv("llama.attention.head_count", UINT32, 4),
        kv("tokenizer.ggml.model", STRING, "gpt2"),
        kv("tokenizer.ggml.pre", STRING, "gpt2"),
        kv("tokenizer.ggml.tokens", ARRAY, chars, STRING),
        kv("tokenizer.ggml.token_type", ARRAY, [1] * len(chars), INT32),
        kv("tokenizer.ggml.merges", ARRAY, ["a b"], STRING),
    ]
    chars.append("ab")
    kvs[7] = kv("tokenizer.ggml.tokens", ARRAY, chars, STRING)
    kvs[8] = kv("tokenizer.ggml.token_type", ARRAY, [1] * len(chars), INT32)
    path.write_bytes(build_gguf(kvs, tiny_tensors(2, len(chars))))
    return path


def test_a_different_local_model_is_noticed(server: Server, tmp_path: Path) -> None:
    other = _other_vocabulary_gguf(tmp_path / "other.gguf")
    ours = gguf_encoding(default_model_path())
    assert gguf_encoding(other).encode("ab c") != ours.encode("ab c")
    engine = RemoteEngine(Connection(server.url), model_path=other, n_ctx=N_CTX)
    with engine, pytest.raises(ValueError) as exc:
        engine.connect()
    message = str(exc.value)
    assert "other.gguf" in message and "the server" in message


def test_greedy_replies_match_the_local_engine(remote: RemoteEngine, engine: EngineHost) -> None:
    """The same tokens, sampled alike, give the same reply on the server and in the engine, for
    a reply each token of which leads the next best by several logits (tests/loops.py). The
    server evaluates a prompt in one batch and the engine its last token alone (schedule.py):
    their logits differ in the last bits on some builds, which could part two replies at a near
    tie; not this one's."""
    prompt = remote.tokenize(LOOP_TEXT)
    assert prompt == engine.tokenize(LOOP_TEXT)
    theirs, fin = _reply(remote.generate(prompt, max_tokens=32, sampling=LONG))
    ours = "".join(
        ev.text for ev in engine.generate(prompt, max_tokens=32, sampling=LONG)
        if isinstance(ev, TextDelta)
    )  # fmt: skip
    assert theirs == ours and LOOP_LINE in theirs
    stats = fin.stats
    assert stats.finish_reason == "length" and stats.completion_tokens == 32
    assert stats.prompt_tokens == len(prompt)
    usage = remote.kv_usage()
    assert usage.reported_by == "" and usage.cells_used == stats.n_past


def test_a_prompt_longer_than_the_context_is_refused_before_it_is_sent(
    remote: RemoteEngine,
) -> None:
    with pytest.raises(ContextOverflowError) as exc:
        list(remote.generate([1] * N_CTX, max_tokens=8))
    assert (
        str(exc.value) == f"prompt needs {N_CTX:,} tokens, context is {N_CTX:,} (reply reserve 8)"
    )


def test_the_servers_own_refusal_becomes_the_context_error(server: Server) -> None:
    """Told a larger context than the server has, the engine sends a prompt the server refuses:
    the refusal carries the server's own numbers."""
    with RemoteEngine(Connection(server.url), n_ctx=N_CTX * 4) as engine:
        engine.connect()
        prompt = engine.tokenize("word " * (N_CTX + 100))
        with pytest.raises(ContextOverflowError) as exc:
            list(engine.generate(prompt, max_tokens=4))
    assert exc.value.n_ctx == N_CTX and exc.value.prompt_tokens > N_CTX


def test_cancel_closes_the_stream_and_the_server_goes_on(remote: RemoteEngine) -> None:
    prompt = remote.tokenize(LOOP_TEXT)  # a reply as long as it is let run (tests/loops.py)
    texts, finished = [], None
    for ev in remote.generate(prompt, max_tokens=400, sampling=LONG):
        if isinstance(ev, TextDelta):
            texts.append(ev.text)
            if len(texts) == 3:
                threading.Thread(target=remote.cancel).start()
        else:
            finished = ev
    assert finished is not None and finished.stats.finish_reason == "cancelled"
    assert 3 <= finished.stats.completion_tokens < 400
    again, fin = _reply(remote.generate(_chat(remote, QUESTION), max_tokens=8))
    assert again.strip() and fin.stats.finish_reason in ("stop", "length")


def test_lanes_run_one_at_a_time_on_a_server_with_one_slot(remote: RemoteEngine) -> None:
    prefix = remote.tokenize("<|im_start|>user\n", parse_special=True)
    suffixes = [remote.tokenize(f"Say the number {i}.<|im_end|>\n<|im_start|>assistant\n",
                                parse_special=True) for i in range(3)]  # fmt: skip
    events = list(remote.generate_lanes(prefix, suffixes, lanes=4, max_tokens=12))
    started = [e for e in events if isinstance(e, LaneStarted)]
    finished = [e for e in events if isinstance(e, LaneFinished)]
    assert sorted(e.index for e in started) == [0, 1, 2] and {e.lane for e in started} == {0}
    assert sorted(e.index for e in finished) == [0, 1, 2]
    for e in finished:
        text = "".join(d.text for d in events if isinstance(d, LaneDelta) and d.index == e.index)
        assert text.strip() and e.stats.completion_tokens >= 1
    last = events[-1]
    assert isinstance(last, LanesFinished) and last.lanes == 1 and last.finish_reason == "stop"


def test_summarize_and_ask_run_through_the_server(remote: RemoteEngine) -> None:
    text = sample_document().read_text(encoding="utf-8")[:3_000]  # some 700 tokens
    doc = document_from_text(text, name="jargon.txt")
    counter = remote.counter()
    for job, options in ((summarize, {}), (ask, {"questions": ["What is the Jargon File?"]})):
        events = list(job(remote, doc.text, counter, strategy="map-reduce", n_ctx=512,
                          max_tokens=16, planner=Planner(doc, counter), **options))  # fmt: skip
        result = next(e.result for e in events if isinstance(e, JobFinished))
        assert result.error is None and result.refused is None
        assert result.outputs and all(o.text for o in result.outputs)
        assert result.plan is not None and len(result.plan["windows"]) >= 2  # it overflowed
        assert result.kv_peak_cells <= 512


def test_kv_state_cannot_be_kept_remotely_and_says_why(remote: RemoteEngine) -> None:
    with pytest.raises(UnsupportedRemotelyError) as exc:
        remote.save_state()
    assert NO_KV_STATE in str(exc.value)


def test_a_server_killed_mid_reply_is_a_clear_error_after_the_text_so_far(
    model_path: Path, tmp_path: Path
) -> None:
    srv = start_server(model_path, tmp_path / "doomed.log", n_ctx=N_CTX)
    try:
        engine = RemoteEngine(Connection(srv.url, retries=0), n_ctx=N_CTX)
        engine.connect()
        prompt = engine.tokenize(LOOP_TEXT)  # a reply as long as it is let run
        texts = []
        with pytest.raises(StreamBrokenError) as exc:
            for ev in engine.generate(prompt, max_tokens=400, sampling=LONG):
                if isinstance(ev, TextDelta):
                    texts.append(ev.text)
                    if len(texts) == 5:
                        srv.kill()
        assert len(texts) >= 5
        assert "in the middle of a completion request" in str(exc.value)
        with pytest.raises(ServerUnreachableError, match="connection was refused"):
            list(engine.generate(prompt, max_tokens=4))
        engine.close()
    finally:
        srv.stop()


def test_a_job_keeps_the_partial_output_when_the_server_dies(
    model_path: Path, tmp_path: Path
) -> None:
    srv = start_server(model_path, tmp_path / "doomed.log", n_ctx=N_CTX)
    try:
        engine = RemoteEngine(Connection(srv.url, retries=0), n_ctx=N_CTX)
        engine.connect()
        text = sample_document().read_text(encoding="utf-8")[:3000]
        killed = False
        events, streamed = [], []
        for ev in summarize(engine, text, engine.counter(), strategy="head", n_ctx=N_CTX,
                            max_tokens=200):  # fmt: skip
            events.append(ev)
            if isinstance(ev, TokenBatch):
                streamed.append(ev.text)
                if not killed and len("".join(streamed).split()) >= 3:
                    killed = True
                    srv.kill()
        result = next(e.result for e in events if isinstance(e, JobFinished))
        assert killed and result.finish_reason == "error"
        assert result.error and "broke in the middle" in result.error
        first = result.outputs[0]
        assert first.finish_reason == "error" and first.text == "".join(streamed).strip()
        engine.close()
    finally:
        srv.stop()


@pytest.mark.unit
def test_connection_errors_are_retried_with_backoff_then_said_once() -> None:
    port = free_port()  # nothing listens there
    pauses: list[float] = []
    connection = Connection(f"127.0.0.1:{port}", retries=3, backoff_s=0.01)
    engine = RemoteEngine(connection, n_ctx=N_CTX)
    engine._client._sleep = pauses.append  # record the pauses, do not sleep
    with pytest.raises(ServerUnreachableError) as exc:
        engine.connect()
    assert pauses == [0.01, 0.02, 0.04]
    assert str(exc.value) == (
        f"cannot reach the server at http://127.0.0.1:{port}: the connection was refused "
        "(is the server running?) (tried 4 times)"
    )


class _Counting(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": {"message": "out of memory"}}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.unit
def test_an_answer_with_an_error_status_is_never_retried() -> None:
    """A server that answered got the request: sending it again could run it twice."""
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        engine = RemoteEngine(Connection(url, retries=3), n_ctx=N_CTX)
        with engine, pytest.raises(ServerError, match="lists no models"):
            engine.connect()
        assert _Counting.hits == 1
    finally:
        httpd.shutdown()


def test_an_api_key_is_sent_and_a_missing_one_is_said(model_path: Path, tmp_path: Path) -> None:
    with running_server(model_path, tmp_path / "keyed.log", n_ctx=N_CTX,
                        api_key="s3cret-key") as srv:  # fmt: skip
        host = srv.url.removeprefix("http://")
        keyless = RemoteEngine(Connection(srv.url), n_ctx=N_CTX)
        with keyless, pytest.raises(ServerError) as exc:
            keyless.connect()
        assert str(exc.value).startswith(f"{host} refused GET /v1/models: it needs an API key")
        wrong = RemoteEngine(Connection(srv.url, api_key="wrong"), n_ctx=N_CTX)
        with wrong, pytest.raises(ServerError, match="the API key was refused"):
            wrong.connect()
        with RemoteEngine(Connection(srv.url, api_key="s3cret-key"), n_ctx=N_CTX) as engine:
            assert engine.connect().model == ALIAS
            assert "s3cret" not in repr(engine.connection)


@pytest.mark.unit
@pytest.mark.parametrize(("text", "url"), [
    ("127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("localhost:8080/v1", "http://localhost:8080"),
    ("[::1]:8080", "http://[::1]:8080"),
    ("api.example.com:443", "https://api.example.com:443"),  # never in clear without asking
    ("gpu-box:8000", "https://gpu-box:8000"),
    ("http://gpu-box:8000/v1/", "http://gpu-box:8000"),
    ("https://api.example.org/llm/v1", "https://api.example.org/llm"),
])  # fmt: skip
def test_addresses_are_normalized(text: str, url: str) -> None:
    assert normalize_url(text) == url


@pytest.mark.unit
def test_a_key_over_plain_http_to_another_machine_is_one_sentence() -> None:
    assert key_in_clear("http://gpu-box:8000", "sk-1") == (
        "the API key goes to gpu-box:8000 over plain HTTP, unencrypted, where anyone on the "
        "network in between can read it (use https:// if the server offers it)"
    )
    assert key_in_clear("http://10.0.0.5:8080/v1", "sk-1") is not None
    assert key_in_clear("gpu-box:8000", "sk-1") is None  # https:// by default
    assert key_in_clear("https://gpu-box:8000", "sk-1") is None
    assert key_in_clear("http://127.0.0.1:8080", "sk-1") is None  # this machine
    assert key_in_clear("http://localhost:8080", "sk-1") is None
    assert key_in_clear("http://gpu-box:8000", None) is None  # no key, nothing to read


@pytest.mark.unit
def test_the_same_server_is_the_same_scheme_host_port_and_path() -> None:
    assert same_server("api.example.com", "https://API.example.com:443/v1")
    assert same_server("127.0.0.1:8080", "http://127.0.0.1:8080/")
    assert not same_server("api.example.com", "http://api.example.com")  # not in clear
    assert not same_server("api.example.com", "https://api.example.com:8443")
    assert not same_server("https://api.example.com/a", "https://api.example.com/b")
    assert not same_server("", "https://api.example.com")


def test_a_server_that_speaks_http_at_an_https_address_is_said(
    server: Server,
) -> None:
    """An address without a scheme is https:// unless it is this machine: a plain-HTTP server
    reached that way says how to write its address."""
    port = server.url.rsplit(":", 1)[1]
    engine = RemoteEngine(Connection(f"https://127.0.0.1:{port}", retries=0), n_ctx=N_CTX)
    with engine, pytest.raises(ServerError) as exc:
        engine.connect()
    assert "does not speak HTTPS (for a plain-HTTP server, write http:// in front" in str(exc.value)


@pytest.mark.unit
@pytest.mark.parametrize(("text", "message"), [
    ("", "the server address is empty"),
    ("ftp://host", "'ftp://host' is not an http:// or https:// address"),
    ("http://user:pw@host:8080", "the address holds a user name or password; give the API key "
     "separately (it is kept in the system keyring, never in the address)"),
    ("http://host:99999", "'http://host:99999' has an invalid port"),
])  # fmt: skip
def test_bad_addresses_are_one_sentence(text: str, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        normalize_url(text)
    assert str(exc.value) == message


# ----- what llama-server and vLLM report (their documented shapes) -----------------------------


@pytest.mark.unit
def test_llama_server_props_give_context_slots_and_template() -> None:
    props = {"default_generation_settings": {"n_ctx": 8192, "params": {}}, "total_slots": 4,
             "chat_template": "{{ messages }}", "bos_token": "<s>",
             "eos_token": "</s>"}  # fmt: skip
    assert identify(props, {}) == ("llama-server", 8192, "/props", 4, "{{ messages }}")


@pytest.mark.unit
def test_vllm_models_give_the_context() -> None:
    entry = {"id": "Qwen/Qwen2.5-7B", "object": "model", "max_model_len": 32768}
    assert identify(None, entry) == ("vllm", 32768, "/v1/models max_model_len", None, None)
    assert identify(None, {"id": "gpt"}) == ("openai-compatible", None, "", None, None)


@pytest.mark.unit
def test_llama_server_slots_add_up_prompt_and_decoded_tokens() -> None:
    slots = [
        {"id": 0, "n_ctx": 4096, "is_processing": True, "n_prompt_tokens": 1200,
         "next_token": [{"has_next_token": True, "n_remain": 10, "n_decoded": 54}]},
        {"id": 1, "n_ctx": 4096, "is_processing": False, "n_prompt_tokens": 300,
         "next_token": {"n_decoded": 20}},
        {"id": 2, "n_ctx": 4096, "is_processing": False},
    ]  # fmt: skip
    assert kv_from_slots(slots) == 1574
    assert kv_from_slots([{"id": 0, "n_ctx": 4096}]) is None
    assert kv_from_slots({"error": "not supported"}) is None


@pytest.mark.unit
def test_metrics_give_kv_tokens_or_the_share_in_use() -> None:
    llama = ("# HELP llamacpp:kv_cache_usage_ratio KV-cache usage.\n"
             "llamacpp:kv_cache_usage_ratio 0.25\nllamacpp:kv_cache_tokens 1024\n")  # fmt: skip
    assert kv_from_metrics(llama) == (1024, 0.25)
    vllm = ('vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.4\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.1\n'
            'vllm:num_requests_running{model_name="m"} 2\n')  # fmt: skip
    assert kv_from_metrics(vllm) == (None, 0.4)
    assert kv_from_metrics("llamacpp:prompt_tokens_total 10\n") is None
    assert kv_from_metrics("vllm:kv_cache_usage_perc NaN\n") is None


def test_stream_pieces_arrive_at_least_every_few_tokens(remote: RemoteEngine) -> None:
    """Text reaches the caller as the server sends it, not at the end (a reply of 40 tokens by
    construction: tests/loops.py)."""
    t0 = time.perf_counter()
    arrivals = [
        time.perf_counter() - t0
        for ev in remote.generate(remote.tokenize(LOOP_TEXT), max_tokens=40, sampling=LONG)
        if isinstance(ev, TextDelta)
    ]  # fmt: skip
    assert len(arrivals) >= 5 and arrivals[0] < arrivals[-1]


@pytest.mark.unit
def test_bad_connection_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="timeouts must be positive"):
        Connection("127.0.0.1:1", timeout_s=0)
    with pytest.raises(ValueError, match="retries cannot be negative"):
        Connection("127.0.0.1:1", retries=-1)


def test_a_looping_reply_from_the_server_ends_with_repetition(remote: RemoteEngine) -> None:
    """The loop stop works on a server's stream too: the stream is closed, the server stops. The
    reply loops by construction (tests/loops.py)."""
    text, done = _reply(remote.generate(remote.tokenize(LOOP_TEXT), max_tokens=100))
    assert done.stats.finish_reason == "repetition", text
    assert ends_in_loop(text) and done.stats.completion_tokens < 100
