"""One streamed completion from an inference server, as (text, tokens) pieces and its figures.

Apart from the engine (``remote.py``) because reading a stream is where a server misbehaves:
llama-cpp-python's server ends a reply without a finish reason when another request arrives, so
a reply cut short is asked for again and goes on past the text already handed on
(:class:`ReplyStream`); a server may ignore ``max_tokens`` or send far more text than that many
tokens hold (:func:`reply_cap`); a stream that ends before its first event is asked once more,
unstreamed, for the refusal in words. :func:`reply_stats` turns what arrived into the engine's
figures.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.core.engine.remote_http import Client, InFlightGate, ServerError, StreamBrokenError
from app.core.engine.remote_info import overflow_error
from app.core.engine.types import FinishReason, GenerationStats

CUT_SHORT_RETRIES = 2  # a reply the server ended without a finish reason is asked for again
MAX_TOKEN_CHARS = 64  # characters a token may bring, at most (see reply_cap)
MIN_REPLY_CHARS = 64 * 1024  # however few tokens were asked for
MAX_FINISH_CHARS = 32  # "stop", "length": a finish reason is a word
CUT_SHORT = (
    "llama-cpp-python's server cuts a reply short when another request arrives, unless it runs "
    "with --interrupt_requests False"
)


@dataclass
class Reply:
    """One streamed completion, as its events arrive."""

    started: float
    first: float | None = None
    finish: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0
    chars: int = 0  # of the text received, every try of it


def reply_cap(asked: int) -> int:
    """The most characters of text a reply of ``asked`` tokens may bring: a token is a few
    characters (64 is far more than any vocabulary's longest); the server decides what it
    sends, and 32 MB once took 301 s to take in."""
    return max(MIN_REPLY_CHARS, asked * MAX_TOKEN_CHARS)


@dataclass(frozen=True)
class ReplyStream:
    """How an engine streams its replies: its client, the gate of the server's slots (None:
    replies need no free slot), its cancel, and the pause before a reply is asked for again
    (``backoff_s``, doubled each time, slept with ``sleep``)."""

    client: Client
    gate: InFlightGate | None
    cancel: threading.Event
    sleep: Callable[[float], None]
    backoff_s: float

    def pieces(self, body: dict[str, Any], reply: Reply) -> Generator[tuple[str, int], None, None]:
        """(text, tokens) of each streamed piece; fills ``reply`` as the events arrive.

        A reply the server ended without a finish reason (llama-cpp-python's server does that
        when another request arrives) is asked for again, up to :data:`CUT_SHORT_RETRIES`
        times: the same request gives the same reply (greedy, or sampled with the same seed),
        so the text already handed on is skipped and the reply goes on from there. A reply
        asked for again that begins otherwise cannot go on: the cut is then the error."""
        said = ""  # the text of this reply handed on so far, over every try
        for attempt in range(CUT_SHORT_RETRIES + 1):
            heard = ""  # this try's text
            with contextlib.closing(self._attempt(body, reply)) as pieces:
                for piece, n in pieces:
                    start, heard = len(heard), heard + piece
                    if len(heard) <= len(said):  # said before this reply was cut: skip it
                        if not said.startswith(heard):
                            raise self._cut_short(reply, attempt, diverged=True)
                        continue
                    if start < len(said):  # a piece that runs past what was said
                        if not heard.startswith(said):
                            raise self._cut_short(reply, attempt, diverged=True)
                        yield heard[len(said) :], 0  # its token came with the first try
                    else:
                        yield piece, n
                    said = heard
            if reply.finish is not None:
                if len(heard) < len(said) and reply.finish != "cancelled":
                    raise self._cut_short(reply, attempt, diverged=True)
                return
            if attempt < CUT_SHORT_RETRIES:
                self.sleep(self.backoff_s * 2**attempt)
                reply.first, reply.tokens, reply.usage, reply.timings = None, 0, {}, {}
        raise self._cut_short(reply, CUT_SHORT_RETRIES, diverged=False)

    def _cut_short(self, reply: Reply, attempt: int, *, diverged: bool) -> StreamBrokenError:
        """The one sentence for a reply cut short ``attempt + 1`` times."""
        tries = ""
        if attempt:
            again = ", the last one beginning another reply" if diverged else ""
            tries = f" (asked {attempt + 1} times{again})"
        return StreamBrokenError(
            f"{self.client.host} ended the reply without saying why, after "
            f"{reply.tokens:,} tokens{tries} ({CUT_SHORT})"
        )

    def _attempt(
        self, body: dict[str, Any], reply: Reply
    ) -> Generator[tuple[str, int], None, None]:
        """One request's (text, tokens) pieces; ``reply.finish`` stays None when the server
        ended the stream without a finish reason (and nothing was cancelled)."""
        what = "a completion request"
        gate = self.gate.held() if self.gate is not None else contextlib.nullcontext()
        with gate:
            if self.cancel.is_set():  # cancelled while waiting for a slot
                reply.finish = "cancelled"
                return
            yield from self._events(body, reply, what)
        if reply.finish is None and reply.first is None and not self.cancel.is_set():
            self._why_empty(body)

    def _events(self, body: dict[str, Any], reply: Reply, what: str
                ) -> Iterator[tuple[str, int]]:  # fmt: skip
        asked = int(body.get("max_tokens") or 0)
        try:
            with contextlib.closing(self.client.stream("/v1/completions", body, what)) as events:
                for event in events:
                    if reply.first is None:
                        reply.first = time.perf_counter()
                    if not isinstance(event, dict):
                        raise StreamBrokenError(f"{self.client.host} sent a reply event that "
                                                "is not a JSON object")  # fmt: skip
                    if event.get("error"):  # llama-server reports a failure mid-stream this way
                        error = event["error"]
                        message = error.get("message") if isinstance(error, dict) else error
                        raise StreamBrokenError(
                            f"{self.client.host} stopped the reply after {reply.tokens:,} "
                            f"tokens: {str(message)[:300]}"
                        )
                    usage, timings = event.get("usage"), event.get("timings")
                    if isinstance(usage, dict):
                        reply.usage = usage
                    if isinstance(timings, dict):
                        reply.timings = timings
                    choices = event.get("choices") or ()
                    choice = (choices[0] if isinstance(choices, list) and choices
                              and isinstance(choices[0], dict) else {})  # fmt: skip
                    text = choice.get("text") or ""
                    if not isinstance(text, str):
                        raise StreamBrokenError(f"{self.client.host} sent a piece of the "
                                                "reply that is not text")  # fmt: skip
                    if choice.get("finish_reason"):
                        reply.finish = str(choice["finish_reason"])[:MAX_FINISH_CHARS]
                    if text:
                        reply.chars += len(text)
                        if asked and (reply.tokens >= asked or reply.chars > reply_cap(asked)):
                            reply.finish = "length"  # a server that ignores max_tokens, or
                            break  # sends far more text than that many tokens hold
                        reply.tokens += 1
                        yield text, 1
                    if reply.finish and reply.usage:
                        break
        except ServerError as exc:
            if self.cancel.is_set():
                reply.finish = "cancelled"
                return
            overflow = overflow_error(exc, body)
            if overflow is not None:
                raise overflow from None
            if isinstance(exc, StreamBrokenError) and reply.first is None:
                self._why_empty(body)
            raise
        if reply.finish is None and self.cancel.is_set():
            reply.finish = "cancelled"

    def _why_empty(self, body: dict[str, Any]) -> None:
        """A stream that ended before its first event: llama-cpp-python's server does that
        when the prompt is longer than its context (the error is raised after the stream has
        begun). The same request unstreamed, for one token, gets the refusal in words."""
        probe = {**body, "stream": False, "max_tokens": 1}
        probe.pop("stream_options", None)
        try:
            response = self.client.post("/v1/completions", probe)
        except ServerError:
            return
        if not response.is_success:
            overflow = overflow_error(self.client.error(response, "a completion request"), body)
            if overflow is not None:
                raise overflow


def reply_stats(reply: Reply, prompt_len: int) -> GenerationStats:
    """The figures of a finished reply: the server's own counts and timings where it sent them,
    else what was counted and timed here."""
    usage, timings = reply.usage, reply.timings
    prompt_tokens = int(usage.get("prompt_tokens") or prompt_len)
    completion = int(usage.get("completion_tokens") or reply.tokens)
    evaluated = int(timings.get("prompt_n") or prompt_tokens)
    end = time.perf_counter()
    first = reply.first or end
    prompt_s = float(timings.get("prompt_ms") or 0) / 1000 or (first - reply.started)
    gen_s = float(timings.get("predicted_ms") or 0) / 1000 or (end - first)
    finish: FinishReason = "length"
    if reply.finish in ("stop", "cancelled", "repetition"):
        finish = reply.finish  # type: ignore[assignment]
    # positions the request held, as llama.cpp counts them: a reply cut at its length ends
    # with a sampled token that was never evaluated
    n_past = prompt_tokens + completion - (1 if finish == "length" and completion else 0)
    return GenerationStats(prompt_tokens, evaluated, prompt_s, completion, gen_s, finish,
                           n_past)  # fmt: skip
