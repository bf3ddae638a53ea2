"""From sampled tokens to the text a reply streams, as a single reply (child.py) and each reply of
the lanes (lanes.py) both make it.

A token's bytes may be part of a character, so text goes out in whole characters only; text that
may be the start of a stop string is held back until it is known not to be one; a reply whose
text loops is ended (``repetition``); an end-of-generation token ends it with no text. Written
once, so a reply ends for the same reasons with the same text whichever way it was generated.
Lives only in the engine child: the callers hand it their ``llama_cpp`` module.
"""

from __future__ import annotations

import codecs
import ctypes
from collections.abc import Sequence
from typing import Any

from app.core.engine.repetition import RepetitionDetector

# Text goes to the parent at most this often: every wake-up of the parent takes CPU from
# llama.cpp's threads, and 50 deltas a second is as smooth as reading gets.
STREAM_INTERVAL_S = 0.02


def token_bytes(lc: Any, vocab: Any, tok: int, buf: Any, special: bool) -> bytes:
    """The bytes of token ``tok``, whole: llama.cpp answers a buffer too small for the piece
    with minus its length, and is asked again with one that fits."""
    n = lc.llama_token_to_piece(vocab, tok, buf, len(buf), 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = lc.llama_token_to_piece(vocab, tok, buf, len(buf), 0, special)
    piece: bytes = buf.raw[:n]
    return piece


class StopMatcher:
    """Hold back text that may be the start of a stop string; report a complete match."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Return (text safe to emit now, whether a stop string was found)."""
        self.pending += text
        if not self.stops:
            out, self.pending = self.pending, ""
            return out, False
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            out = self.pending[: min(hits)]
            self.pending = ""
            return out, True
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), hold, -1):
                if s.startswith(self.pending[-k:]):
                    hold = k
                    break
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class ReplyText:
    """One reply's sampled tokens as the text it streams, and whether the text ends the reply.

    ``stop``: the stop strings; ``stop_on_repetition``: end a reply that loops.
    """

    def __init__(
        self, lc: Any, vocab: Any, stop: Sequence[str], *, stop_on_repetition: bool
    ) -> None:
        self._lc, self._vocab = lc, vocab
        self._buf = ctypes.create_string_buffer(256)  # reused: most pieces fit
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = StopMatcher(stop)
        self._looping = RepetitionDetector() if stop_on_repetition else None

    def feed(self, tok: int) -> tuple[str, str] | None:
        """None for an end-of-generation token: the reply ends (``stop``) and the token is no
        part of it. Otherwise the text ``tok`` adds that can go out now, and why the reply ends
        with it: ``"stop"`` (a stop string, cut off), ``"repetition"``, or ``""`` (it goes on).
        """
        lc, vocab, buf = self._lc, self._vocab, self._buf
        if lc.llama_vocab_is_eog(vocab, tok):
            return None
        n = lc.llama_token_to_piece(vocab, tok, buf, len(buf), 0, False)
        piece = buf.raw[:n] if n >= 0 else token_bytes(lc, vocab, tok, buf, False)
        text, hit = self._stops.feed(self._decoder.decode(piece))
        if hit:
            return text, "stop"
        if self._looping is not None and self._looping.feed(text):
            return text, "repetition"
        return text, ""

    def tail(self, reason: str) -> str:
        """The text held back at the reply's end (finish ``reason``): what might have begun a
        stop string goes out after all, unless a stop string ended the reply. Bytes of a
        character the model never finished are dropped rather than shown as U+FFFD: the stream
        holds whole characters only."""
        return self._stops.flush() if reason != "stop" else ""
