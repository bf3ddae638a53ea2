"""The output buffer's loop detector: a reply that repeats one span over and over is stopped.

Greedy decoding of a small model falls into loops ("I'm a nerd." eight times, "a warrior of the
internet," until the reply's length runs out) and then spends every remaining token on them. The
detector watches the reply's text as it streams and says when its *end* is one unit repeated:
the last ``r`` characters have period ``p`` (each character equals the one ``p`` before it),
with at least ``min_repeats`` copies of the unit and ``r`` long enough to be no accident.

False positives cost more than a few wasted tokens, so the thresholds are deliberately wide:

- lists, tables and code repeat their *shape* with different content, which breaks the period;
- a unit with fewer than two distinct letters ("0, ", "10, ", "| --- ", "─", "哈", spaces) is
  text a reply may legitimately repeat for a while (a row of numbers, a table rule, laughter),
  so it must run much longer (``plain_min_chars``) than a unit with words in it (``min_chars``);
- a word repeated a few times ("very, very, very") stays under ``min_chars``;
- code repeats a line two or three times (``None,`` arguments), so a unit shorter than
  ``min_chars`` that spans lines needs ``line_min_repeats`` copies (a repeated paragraph, three).

A second view of the text has every enumerator (a run of digits, a lone letter) replaced by one
placeholder, so a numbered loop ("7. A.I.A.", "8. A.I.A.", …; "Appendix D. A Guide to…",
"Appendix E. A Guide to…") has a period too. There exactly one enumerator may change from
copy to copy (a counter: a table row or a line of code changes several figures), the unit
needs letters, and the run must be longer (``numbered_min_chars``, ``numbered_min_repeats``),
as "Chapter 1, Chapter 2" lists and code such as Duff's device (seven "case N:" lines) are
legitimately regular.

The check is incremental: for every period up to ``max_period`` it keeps how many of the last
characters matched the character that period before them (one vectorised step per character),
so a long reply costs the same per token as a short one. Plain Python and numpy, no llama.cpp:
the engine child, the remote engine and the tests all use it on text.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass

import numpy as np

_NUMBER = "\x00"  # an enumerator (a number, a lone letter), in the numbered view
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Limits:
    """When the end of a reply counts as a loop (in characters)."""

    max_period: int = 320  # the longest unit looked for: a sentence or two
    min_repeats: int = 3  # copies of the unit at the end of the reply
    min_chars: int = 80  # the repeated run, for a unit with words in it
    line_min_repeats: int = 4  # copies of a short unit that spans lines (a line of code)
    plain_min_chars: int = 400  # the run, for a unit of punctuation, spaces or one character
    numbered_min_repeats: int = 8  # the same, numbers aside ("7. foo", "8. foo", …)
    numbered_min_chars: int = 160
    rich_letters: int = 2  # distinct letters that make a unit "have words in it"


def _distinct_letters(unit: str) -> int:
    """Distinct letters in ``unit`` (any script: CJK characters are letters). Digits do not
    count: "10, 10, 10" is a row of numbers as a table or a count may hold."""
    return len({c for c in unit if c.isalpha()})


class _Periods:
    """For every period p ≤ ``max_period``: how long the end of a text has period p."""

    def __init__(self, max_period: int) -> None:
        self.max_period = max_period
        # _recent[j]: the code point j+1 characters back (-1: before the text began)
        self._recent = np.full(max_period, -1, dtype=np.int64)
        # _match[j]: how many of the last characters equal the one j+1 characters before them
        self._match = np.zeros(max_period, dtype=np.int64)
        self.periods = np.arange(1, max_period + 1, dtype=np.int64)
        self.tail = ""  # the last characters, enough to read a unit back

    def add(self, chars: str) -> None:
        recent, match = self._recent, self._match
        for ch in chars:
            code = ord(ch)
            np.copyto(match, np.where(recent == code, match + 1, 0))
            recent[1:] = recent[:-1].copy()
            recent[0] = code
        self.tail = (self.tail + chars)[-(2 * self.max_period + 1) :]

    def loops(self, min_repeats: int, min_chars: int) -> list[tuple[int, int]]:
        """(period, run length) of every period whose run is long enough, shortest first."""
        run = self._match + self.periods
        hits = np.nonzero((run >= min_chars) & (run >= min_repeats * self.periods))[0]
        return [(int(j) + 1, int(run[j])) for j in hits]


class RepetitionDetector:
    """Feed it the reply's text as it streams; :meth:`feed` returns True once the reply ends in
    a loop (and stays True). One detector per reply."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        if self.limits.max_period < 1 or self.limits.min_repeats < 2:
            raise ValueError("max_period must be at least 1 and min_repeats at least 2")
        self._exact = _Periods(self.limits.max_period)
        self._numbered = _Periods(self.limits.max_period)
        self._word: list[str] = []  # the word being written, for the numbered view
        self._folded = 0  # characters in the numbered view so far
        # (position in the numbered view, the enumerator as written), for the recent ones
        self._enumerators: collections.deque[tuple[int, str]] = collections.deque()
        # (period, repeated characters, "exact" or "numbered") once a loop is found
        self.tripped: tuple[int, int, str] | None = None

    @property
    def looping(self) -> bool:
        return self.tripped is not None

    def feed(self, text: str) -> bool:
        """Add the next piece of the reply; True when the reply now ends in a loop."""
        if self.tripped is not None or not text:
            return self.tripped is not None
        lim = self.limits
        self._exact.add(text)
        self._numbered.add(self._numbers_folded(text))
        for p, r in self._exact.loops(lim.min_repeats, lim.min_chars):
            unit = self._exact.tail[-p:]
            if "\n" in unit and p < lim.min_chars and r < lim.line_min_repeats * p:
                continue
            if _distinct_letters(unit) >= lim.rich_letters or r >= lim.plain_min_chars:
                self.tripped = (p, r, "exact")
                return True
        for p, r in self._numbered.loops(lim.numbered_min_repeats, lim.numbered_min_chars):
            # letters as written (the view folded "A.I.A." away): about two units of the text
            letters = {c for c in self._exact.tail[-2 * p :] if c.isalpha()}
            if len(letters) >= lim.rich_letters and self._one_counter(p):
                self.tripped = (p, r, "numbered")
                return True
        return False

    def _one_counter(self, p: int) -> bool:
        """Whether, over the last copies of a unit of period ``p`` in the numbered view, exactly
        one of its enumerators changes: a loop counts ("7. foo", "8. foo"), while a table row or
        a line of code also changes its other figures ("| file7 | 12 KB |")."""
        start = self._folded - self.limits.numbered_min_repeats * p
        seen: dict[int, set[str]] = {}
        for pos, word in reversed(self._enumerators):
            if pos < start:
                break
            seen.setdefault((pos - start) % p, set()).add(word)
        return sum(len(words) > 1 for words in seen.values()) == 1

    def _numbers_folded(self, text: str) -> str:
        """``text`` with each enumerator — a run of digits, a lone letter ("Appendix D.",
        "(b)") — as one placeholder. A word is only known complete at the character after it,
        so the view lags the text by the word being written."""
        out: list[str] = []
        for ch in text:
            if ch.isalnum():
                self._word.append(ch)
                continue
            out.append(self._fold_word())
            out.append(ch)
            self._folded += len(out[-2]) + 1
        keep = 2 * self.limits.numbered_min_repeats * self.limits.max_period
        while self._enumerators and self._enumerators[0][0] < self._folded - keep:
            self._enumerators.popleft()
        return "".join(out)

    def _fold_word(self) -> str:
        word = "".join(self._word)
        self._word.clear()
        if len(word) == 1 and word.isalpha():
            self._enumerators.append((self._folded, word))
            return _NUMBER
        parts, at = [], 0
        for m in _DIGITS.finditer(word):
            parts.append(word[at : m.start()])
            self._enumerators.append((self._folded + sum(map(len, parts)), m.group()))
            parts.append(_NUMBER)
            at = m.end()
        parts.append(word[at:])
        return "".join(parts)


def ends_in_loop(text: str, limits: Limits | None = None) -> bool:
    """Whether ``text``, as a whole reply, ends in a loop (the detector fed in one piece)."""
    return RepetitionDetector(limits).feed(text)
