"""An OpenAI-compatible inference server behind the engine interface the jobs use.

llama.cpp's ``llama-server``, llama-cpp-python's own server (``python -m llama_cpp.server``) and
vLLM all generate through ``/v1/completions``; each adds endpoints of its own for what ContextLens
needs beyond text: token counts (``/tokenize``, ``/extras/tokenize``), the context size (``/props``,
``max_model_len`` in ``/v1/models``), the KV cache (``/slots``, ``/metrics``). :meth:`RemoteEngine.
connect` probes for them once and :class:`ServerInfo` says, for every figure, where it comes from,
or that this server does not report it. What needs llama.cpp's own KV cache in this process (saving
and restoring its state, shifting positions, reading it back for the faithfulness audit) cannot
work over HTTP and is refused with the reason.

Token counts are exact when the server tokenizes, or when the same GGUF is given locally (its fast
encoding is then checked against the server's tokenizer, so a different model is noticed);
otherwise they are cl100k estimates, marked as such. Prompts are sent as token ids to servers that
take them, else as the text those ids decode to. What servers report is read in ``remote_info.py``,
their tokenizers in ``remote_tokens.py``; the request is built in ``remote_request.py``, its reply
streamed in ``remote_stream.py``, several at once in ``remote_lanes.py``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

from app.core.engine.chat_template import ChatTemplateError, render_chat_template
from app.core.engine.gguf import GGUFError, inspect_model
from app.core.engine.remote_http import Client, Connection, InFlightGate, ServerError
from app.core.engine.remote_info import (
    NO_AUDIT,
    NO_KV_SHIFT,
    NO_KV_STATE,
    ServerInfo,
    hidden_paths_note,
    identify,
    kv_from_metrics,
    kv_from_slots,
    n_ctx_train,
)
from app.core.engine.remote_lanes import stream_lanes
from app.core.engine.remote_request import UnsupportedRemotelyError, completion_body
from app.core.engine.remote_stream import (
    CUT_SHORT,
    CUT_SHORT_RETRIES,
    MAX_FINISH_CHARS,
    MAX_TOKEN_CHARS,
    MIN_REPLY_CHARS,
    Reply,
    ReplyStream,
    reply_cap,
    reply_stats,
)
from app.core.engine.remote_tokens import RemoteCounter, ServerTokenizer, TextMemo, same_tokens
from app.core.engine.repetition import RepetitionDetector
from app.core.engine.types import (
    EngineError,
    Finished,
    FinishReason,
    GenerationStats,
    KVEdit,
    KVState,
    KVUsage,
    LaneDelta,
    LaneFinished,
    LanesFinished,
    LaneStarted,
    SamplingSettings,
    TextDelta,
)
from app.core.planning.frame import ServerTemplate
from app.core.tokens import (
    TiktokenCounter,
    TokenCounter,
    TokenizerUnsupported,
    cl100k,
    gguf_encoding,
    scrub,
)

__all__ = [
    "CONNECT_DEADLINE_S",
    "CUT_SHORT",  # CUT_SHORT ... MIN_REPLY_CHARS and reply_cap: remote_stream's
    "CUT_SHORT_RETRIES",
    "MAX_FINISH_CHARS",
    "MAX_TOKEN_CHARS",
    "MIN_REPLY_CHARS",
    "NO_AUDIT",  # NO_AUDIT, NO_KV_STATE and ServerInfo: remote_info's, named here for the callers
    "NO_KV_STATE",
    "PROBE_TIMEOUT_S",
    "STREAM_INTERVAL_S",
    "RemoteEngine",
    "ServerInfo",
    "UnsupportedRemotelyError",  # remote_request's
    "reply_cap",
]

STREAM_INTERVAL_S = 0.02  # one text delta per 20 ms at most, as the local engine sends them
PROBE_TIMEOUT_S = 10.0
# Connecting asks several questions (models, props, the tokenizer, the KV figures): all of them
# within this, whatever pace the server answers at.
CONNECT_DEADLINE_S = 30.0


# ----- the engine -------------------------------------------------------------------------------


class RemoteEngine:
    """The jobs' engine on an OpenAI-compatible server (see the module's docstring).

    Thread-safe for generation: several requests may stream at once (a batch, or the lanes of
    a map phase); :meth:`cancel` stops every one of them.
    """

    def __init__(
        self,
        connection: Connection,
        *,
        model: str | None = None,
        model_path: str | Path | None = None,
        n_ctx: int | None = None,
    ) -> None:
        self.connection = connection
        self._client = Client(connection)
        self._want_model = model
        self._model_path = Path(model_path) if model_path else None
        self._given_n_ctx = n_ctx
        self._info: ServerInfo | None = None
        self._server_tokenizer: ServerTokenizer | None = None
        self._local: TiktokenCounter | None = None  # the same GGUF's fast encoding
        self._estimate: TiktokenCounter | None = None
        self._template: tuple[str, str, str] | None = None  # template, bos text, eos text
        self._memo = TextMemo()
        self._cancel = threading.Event()
        self._last = threading.local()  # each thread's last request (a batch runs several)
        self._replies: InFlightGate | None = None  # replies in flight: the server's slots
        self._sleep = time.sleep

    # ----- connecting ----------------------------------------------------------------------

    @property
    def info(self) -> ServerInfo:
        if self._info is None:
            raise EngineError("not connected to a server yet")
        return self._info

    def __enter__(self) -> RemoteEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def connect(self, cancelled: Callable[[], bool] | None = None) -> ServerInfo:
        """Ask the server what it runs and offers; ServerError or ValueError (one sentence)
        when it cannot be used, or when it takes longer than :data:`CONNECT_DEADLINE_S` in all
        or ``cancelled()`` turns true (checked as each answer arrives)."""
        self._cancel.clear()
        stop = cancelled or (lambda: False)
        with self._client.within(CONNECT_DEADLINE_S, lambda: self._cancel.is_set() or stop()):
            return self._connect()

    def _connect(self) -> ServerInfo:
        client = self._client
        listing = client.get_json("/v1/models", timeout=PROBE_TIMEOUT_S)
        models = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(models, list) or not models:
            raise ServerError(
                f"{client.host} lists no models at /v1/models: is it an OpenAI-compatible "
                "server (llama-server, python -m llama_cpp.server, vLLM)?"
            )
        entries = {str(m.get("id")): m for m in models if isinstance(m, dict) and m.get("id")}
        model = self._want_model or next(iter(entries), "")
        if self._want_model and self._want_model not in entries:
            raise ValueError(
                f"{client.host} does not serve a model named {self._want_model!r} "
                f"(it serves {', '.join(entries) or 'none'})"
            )
        entry = entries.get(model, {})
        props = client.get_json("/props", timeout=PROBE_TIMEOUT_S)
        kind, n_ctx, source, slots, template = identify(props, entry)
        # the tokenizer's endpoint, probed once; only llama-cpp-python's server has
        # /extras/tokenize, so answering there also says which server this is
        probed = ServerTokenizer(
            client, "llama-cpp-python" if kind == "openai-compatible" else kind, model
        )
        self._server_tokenizer = probed if probed.probe() else None
        if kind == "openai-compatible" and self._server_tokenizer is not None:
            kind = "llama-cpp-python"
            slots = 1  # one model, one request at a time
        self._hold_to(kind, slots)
        warnings: list[str] = []
        n_ctx, source = self._context_size(n_ctx, source, warnings)
        train = n_ctx_train(entry)
        has_tokenizer = self._server_tokenizer is not None
        tokenizer, exact = self._choose_tokenizer(has_tokenizer, warnings)
        template_source = self._choose_template(template, props, warnings)
        kv_source = self._kv_source(kind)
        if kind == "openai-compatible":
            warnings.insert(0, hidden_paths_note(client.host, n_ctx, tokenizer if exact else None,
                                                  kv_source))  # fmt: skip
        frame: str | ServerTemplate | None = None
        if template_source.startswith("local GGUF") and self._model_path is not None:
            frame = str(self._model_path)
        elif self._template is not None:
            text, bos, eos = self._template
            frame = ServerTemplate(text, bos, eos, add_bos=bool(self._bos()))
        self._info = ServerInfo(
            url=self.connection.url, kind=kind, model=model, n_ctx=n_ctx, n_ctx_source=source,
            n_ctx_train=train, tokenizer=tokenizer, exact_counts=exact,
            chat_template=template_source, slots=slots, kv_source=kv_source,
            accepts_token_ids=kind in ("llama-server", "vllm") and self._same_ids(),
            warnings=tuple(warnings), frame=frame,
        )  # fmt: skip
        return self._info

    def _hold_to(self, kind: str, slots: int | None) -> None:
        """Never more requests in flight than the server serves. llama-cpp-python's server
        serves one request at a time, every endpoint behind one lock, and (by default) cuts the
        reply it is streaming short as soon as another request waits for that lock, a token
        count as much as a completion: every request to it takes its turn. llama-server answers
        other requests beside its slots: its replies alone wait for a free slot."""
        if kind == "llama-cpp-python":
            self._client.limit_in_flight(1)
            self._replies = None
        else:
            self._client.limit_in_flight(None)
            self._replies = InFlightGate(slots) if slots else None

    def _context_size(self, reported: int | None, source: str, warnings: list[str]
                      ) -> tuple[int, str]:  # fmt: skip
        given = self._given_n_ctx
        if reported is None:
            if given is None:
                raise ValueError(
                    f"{self._client.host} does not report its context size; give the size the "
                    "server was started with (--n-ctx, or n_ctx in the window)"
                )
            return given, "given (this server does not report it)"
        if given is not None and given < reported:
            return given, f"given (the server's is {reported:,}, from {source})"
        if given is not None and given > reported:
            warnings.append(f"the server's context is {reported:,} tokens ({source}), less than "
                            f"the {given:,} asked for: {reported:,} is used")  # fmt: skip
        return reported, source

    def _choose_tokenizer(self, has_server: bool, warnings: list[str]) -> tuple[str, bool]:
        if self._model_path is not None:
            try:
                local = gguf_encoding(self._model_path)
            except (TokenizerUnsupported, OSError, ValueError) as exc:
                if not has_server:
                    raise ValueError(
                        f"cannot count tokens for {self._model_path.name}: {exc}"
                    ) from None
                warnings.append(f"the local model's tokenizer cannot be used ({exc}); the "
                                "server counts instead")  # fmt: skip
            else:
                if has_server:
                    assert self._server_tokenizer is not None
                    mismatch = same_tokens(local, self._server_tokenizer)
                    if mismatch is not None:
                        raise ValueError(
                            f"{self._model_path.name} does not tokenize like the server's "
                            f"model ({mismatch}); give the GGUF the server runs, or none"
                        )
                self._local = local
                checked = ", checked against the server's" if has_server else ""
                return f"local GGUF {self._model_path.name}{checked}", True
        if has_server:
            assert self._server_tokenizer is not None
            return f"the server ({self._server_tokenizer.endpoint})", True
        self._estimate = cl100k()
        warnings.append("token counts are estimates (cl100k_base): this server does not "
                        "tokenize; give the model's GGUF (--model) for exact counts")  # fmt: skip
        return "estimate (cl100k_base)", False

    def _choose_template(self, server_template: str | None, props: Any,
                         warnings: list[str]) -> str:  # fmt: skip
        if self._model_path is not None and self._local is not None:
            try:
                card = inspect_model(self._model_path)
            except GGUFError as exc:
                raise ValueError(str(exc)) from None
            if card.chat_template:
                bos = self._local.decode([card.bos_token_id]) if card.bos_token_id else ""
                eos = self._local.decode([card.eos_token_id]) if card.eos_token_id else ""
                self._template = (card.chat_template, bos, eos)
                return f"local GGUF {self._model_path.name}"
        if server_template:
            bos = str(props.get("bos_token") or "") if isinstance(props, dict) else ""
            eos = str(props.get("eos_token") or "") if isinstance(props, dict) else ""
            self._template = (server_template, bos, eos)
            return "the server (/props)"
        warnings.append("this server does not say its chat template: prompts are plain text "
                        "(give the model's GGUF with --model for its own template)")  # fmt: skip
        return ""

    def _kv_source(self, kind: str) -> str:
        if kind == "llama-server" and isinstance(self._client.get_json("/slots"), list):
            return "/slots"
        metrics = self._metrics_text()
        if metrics is not None and kv_from_metrics(metrics) is not None:
            return "/metrics"
        return ""

    def _same_ids(self) -> bool:
        """Token ids can be sent as they are: they are the server's own (or checked equal)."""
        return self._server_tokenizer is not None and self._estimate is None

    # ----- tokens and templates ------------------------------------------------------------

    def counter(self) -> TokenCounter:
        """The counter to plan with: the local GGUF's, the server's or the estimate."""
        self.info  # noqa: B018 (connected first)
        if self._local is not None:
            return self._local
        if self._server_tokenizer is not None:
            return RemoteCounter(self._server_tokenizer, f"{self.info.model} (server)")
        assert self._estimate is not None
        return self._estimate

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False,
                 continuation: bool = False) -> list[int]:  # fmt: skip
        """Token ids of ``text``; with ``add_special``, the model's BOS first (as the server
        tokenizes a prompt), so a prompt sent as token ids starts as the model expects.
        ``continuation`` is accepted for the jobs' sake and changes nothing here: a server's
        ``/tokenize`` has no such option, so a SentencePiece model that adds a space prefix gets
        it before each chunk, as it does from every server-side tokenizer."""
        self.info  # noqa: B018
        bos = list(self._bos()) if add_special else []
        if self._local is not None or self._estimate is not None:
            counter = self._local or self._estimate
            assert counter is not None
            ids = counter.encode_special(text) if parse_special else counter.encode(text)
            return [*bos, *ids]
        assert self._server_tokenizer is not None
        text = scrub(text)
        ids = self._server_tokenizer.encode(text, parse_special)
        self._memo.remember(ids, text)
        return [*bos, *ids]

    def _bos(self) -> tuple[int, ...]:
        """The BOS the server's model adds (learned at connect; none without its tokenizer:
        a prompt then goes as text, and the server adds its own)."""
        return self._server_tokenizer.bos if self._server_tokenizer is not None else ()

    def detokenize(self, tokens: Sequence[int], *, special: bool = True) -> str:
        """The text of ``tokens``, special tokens included."""
        counter = self._local or self._estimate
        if counter is not None:
            return counter.decode(tokens)
        if self._server_tokenizer is None:
            raise EngineError("not connected to a server yet")
        return self._memo.text(tokens, self._server_tokenizer.decode)

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], *,
                            add_generation_prompt: bool = True) -> str:  # fmt: skip
        if self._template is None:
            raise ChatTemplateError(
                "this server does not say its chat template; send a plain prompt instead"
            )
        template, bos, eos = self._template
        return render_chat_template(template, messages, add_generation_prompt=add_generation_prompt,
                                    bos_token=bos, eos_token=eos)  # fmt: skip

    # ----- generation ----------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop every reply streaming now (from any thread); each ends as ``cancelled``."""
        self._cancel.set()
        self._client.abort_streams()

    def _payload(self, prompt: Sequence[int]) -> list[int] | str:
        if self.info.accepts_token_ids:
            return list(prompt)
        bos = self._bos()
        if bos and tuple(prompt[: len(bos)]) == bos:
            prompt = prompt[len(bos) :]  # a server that takes text adds the BOS itself
        return self.detokenize(prompt)

    def _body(self, prompt: Sequence[int], max_tokens: int, sampling: SamplingSettings,
              stop: Sequence[str]) -> dict[str, Any]:  # fmt: skip
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        return completion_body(self.info, prompt, max_tokens, sampling, stop,
                               url=self.connection.url, payload=self._payload)  # fmt: skip

    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int = 256,
        sampling: SamplingSettings | None = None,
        stop: Sequence[str] = (),
        on_full: str = "stop",
        keep: int = 0,
    ) -> Iterator[TextDelta | Finished]:
        """Stream the server's reply to ``prompt`` (token ids); the last event is Finished.

        Abandoning the iterator closes the stream, so the server stops. A server that fails
        or disappears mid-reply raises ServerError after the text so far has been yielded."""
        if on_full != "stop":
            raise UnsupportedRemotelyError(f"a full context cannot be shifted: {NO_KV_SHIFT}")
        sampling = sampling or SamplingSettings()
        body = self._body(prompt, max_tokens, sampling, stop)
        self._cancel.clear()
        reply = Reply(time.perf_counter())
        pending: list[str] = []
        pending_ids = 0
        last = 0.0
        looping = RepetitionDetector() if sampling.stop_on_repetition else None
        failure: ServerError | None = None
        with contextlib.closing(self._stream(body, reply)) as pieces:
            try:
                for text, n in pieces:
                    pending.append(text)
                    pending_ids += n
                    now = time.perf_counter()
                    if looping is not None and looping.feed(text):
                        reply.finish = "repetition"  # closing the stream stops the server
                        break
                    if now - last >= STREAM_INTERVAL_S:
                        yield TextDelta("".join(pending), (-1,) * pending_ids)
                        pending, pending_ids, last = [], 0, now
            except ServerError as exc:  # the text that came before it is handed on first
                failure = exc
        if failure is not None:
            if pending or pending_ids:
                yield TextDelta("".join(pending), (-1,) * pending_ids)
            raise failure
        if pending or pending_ids:
            yield TextDelta("".join(pending), (-1,) * pending_ids)
        yield Finished(self._stats(reply, len(prompt)))

    def _stream(self, body: dict[str, Any], reply: Reply) -> Generator[tuple[str, int], None, None]:
        """(text, tokens) of each streamed piece of the reply to ``body``, asked for again when
        the server cuts it short (see :class:`ReplyStream`); fills ``reply`` as they arrive."""
        streamer = ReplyStream(self._client, self._replies, self._cancel, self._sleep,
                               self.connection.backoff_s)  # fmt: skip
        return streamer.pieces(body, reply)

    def _stats(self, reply: Reply, prompt_len: int) -> GenerationStats:
        stats = reply_stats(reply, prompt_len)
        self._last.n_past = stats.n_past
        return stats

    def generate_lanes(
        self,
        prefix: Sequence[int],
        suffixes: Sequence[Sequence[int]],
        *,
        lanes: int,
        max_tokens: int = 256,
        sampling: SamplingSettings | None = None,
        stop: Sequence[str] = (),
    ) -> Iterator[LaneStarted | LaneDelta | LaneFinished | LanesFinished]:
        """Replies to ``prefix + suffix`` for every suffix, up to ``lanes`` requests in flight
        (never more than the server's parallel slots, when it says how many it has)."""
        if lanes < 1:
            raise ValueError("lanes must be at least 1")
        slots = self.info.slots
        width = max(1, min(lanes, len(suffixes), slots if slots else lanes))
        sampling = sampling or SamplingSettings()
        bodies = [self._body([*prefix, *s], max_tokens, sampling, stop) for s in suffixes]
        self._cancel.clear()
        t0 = time.perf_counter()
        cancelled = yield from stream_lanes(
            bodies, [len(prefix) + len(s) for s in suffixes], width, stream=self._stream,
            stats=self._stats, abort=self._client.abort_streams, cancel=self._cancel,
            stop_on_repetition=sampling.stop_on_repetition,
        )  # fmt: skip
        finish: FinishReason = "cancelled" if cancelled or self._cancel.is_set() else "stop"
        yield LanesFinished(width, width * self.info.n_ctx, time.perf_counter() - t0, 0.0, finish)

    # ----- figures -------------------------------------------------------------------------

    def _metrics_text(self) -> str | None:
        try:
            response = self._client.get("/metrics", timeout=PROBE_TIMEOUT_S)
        except ServerError:
            return None
        return response.text if response.is_success else None

    def kv_usage(self) -> KVUsage:
        """KV figures as the server reports them (``reported_by`` says where), or, when it
        does not, the positions the last request held by the server's own counts, with
        ``reported_by`` empty: "not reported by this server"."""
        info = self.info
        cells: int | None = None
        if info.kv_source == "/slots":
            cells = kv_from_slots(self._client.get_json("/slots"))
        elif info.kv_source == "/metrics":
            text = self._metrics_text()
            found = kv_from_metrics(text) if text is not None else None
            if found is not None:
                cells = found[0] if found[0] is not None else round(found[1] * info.n_ctx)
        if cells is None:
            held = getattr(self._last, "n_past", 0)
            return KVUsage(info.n_ctx, held, -1, -1, 0, False, reported_by="")
        return KVUsage(info.n_ctx, cells, -1, -1, 0, False, reported_by=info.kv_source)

    def reachable(self) -> bool:
        """Whether the server answers now (after the connection's retries): a batch stops
        when it is gone rather than failing every document left."""
        try:
            self._client.get("/v1/models", timeout=PROBE_TIMEOUT_S)
        except ServerError:
            return False
        return True

    # ----- what only the local engine can do -----------------------------------------------

    def save_state(self) -> KVState:
        raise UnsupportedRemotelyError(f"the KV state cannot be kept: {NO_KV_STATE}")

    def restore_state(self, state: KVState) -> int:
        raise UnsupportedRemotelyError(f"a rollback cannot resume instantly: {NO_KV_STATE}")

    def remove(self, start: int, end: int, *, compact: bool = True) -> KVEdit:
        raise UnsupportedRemotelyError(f"KV positions cannot be removed: {NO_KV_SHIFT}")

    def kv_tokens(self) -> list[int]:
        raise UnsupportedRemotelyError(f"the audit cannot run: {NO_AUDIT}")
