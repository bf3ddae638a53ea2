"""Each sentence of a finished reply tied to the sentence of the kept text that supports it best.

The spans an output names (:attr:`OutputSpan.source_spans`) say what was in the context while it
was written, often thousands of tokens; a person checking an answer wants the one sentence it
rests on. :func:`align` finds it after the reply, from the kept spans alone: each reply sentence
is scored against each sentence of the kept text by the share of its content terms (the
`retrieve` strategy's words: stemmed, stop words dropped, CJK characters and pairs) that the
candidate holds, each term weighted by its idf over the kept sentences, so that the rare words
of a sentence (a name, a coined term) decide rather than "people" or "time". A reply sentence
whose best candidate holds too little of it has no support in the kept text: ``source`` None.

Pure Python on plain strings (no engine, no Qt), bounded: a reply of thousands of sentences or
kept spans of a whole book cost a fraction of a second (see the caps below).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.planning.terms import analyze

Span = tuple[int, int]

# Below this share of its (idf-weighted) terms found in the best candidate, a reply sentence has
# no support in the kept text. Measured on the test documents (tests/data/sample.pdf, an 8,000
# character stretch of the Jargon File): sentences copied or closely paraphrased from the text
# score 0.6-1.0; a paraphrase that keeps the rare word or the name and says the rest in its own
# words 0.44-0.6; sentences the text does not hold 0-0.28, and up to 0.37 when made on purpose
# of the text's own words ("The people of the world wrote a long letter" against the
# Gettysburg Address). Only sentences built of three or more of one passage's rarer words reach
# 0.43-0.46 unsupported: a score, not a proof, which is why the window shows it.
THRESHOLD = 0.4

# The bounds. A reply sentence past MAX_SENTENCES gets no alignment (a summary is never this
# long: the reply reserve caps it), a candidate past MAX_CANDIDATE_CHARS of kept text is not
# read (kept spans beyond it are ranked first by the reply's words they hold, so the cap drops
# the parts least like the reply, not the end of the document), and a sentence is cut into
# pieces of at most MAX_SENTENCE_CHARS (a table or a code block has no sentence marks).
MAX_SENTENCES = 400
MAX_CANDIDATE_CHARS = 120_000
MAX_SENTENCE_CHARS = 600

# Sentence ends: Latin marks (then closing quotes or brackets) before whitespace or the end; CJK
# full-width marks anywhere (Chinese puts no space after them); a blank line; a line end before
# a list item or a heading (a reply's list has no full stops).
_END = re.compile(
    r"""[.!?…]+[)"'\]»”’]*(?=\s|$)"""
    r"|[。！？]+[」』”’）)]*"
    r"|\n[ \t]*\n"
    r"|\n(?=[ \t]*(?:[-*•+]\s|\d+[.)]\s|#))"
)
# Words that end in a full stop without ending a sentence (lower case, without the stop).
_ABBREVIATED = """
    mr mrs ms dr prof sr jr st mt vs etc e.g i.e eg ie cf al fig figs no nos vol vols pp p ch
    sec art approx ca inc ltd co corp dept univ jan feb mar apr jun jul aug sep sept oct nov dec
    u.s u.k a.m p.m
"""
_ABBREVIATIONS = frozenset(_ABBREVIATED.split())
_WORD_BEFORE = re.compile(r"([\w.]+)\.$")
_NUMBER = re.compile(r"\d+")
_NAME = re.compile(r"(?<![\w'’])[A-Z][\w'’-]*")


@dataclass(frozen=True)
class SentenceSource:
    """Sentence ``[start, end)`` of an output's text and the document span of the kept sentence
    that supports it best (None: nothing in the kept text does), with its score in [0, 1]."""

    start: int
    end: int
    source: Span | None
    score: float

    def as_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end,
                "source": None if self.source is None else list(self.source),
                "score": round(self.score, 4)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Any) -> SentenceSource | None:
        """One as :meth:`as_dict` wrote it; None for anything else (a record it cannot read)."""
        try:
            source = data.get("source")
            span = None if source is None else (int(source[0]), int(source[1]))
            return cls(int(data["start"]), int(data["end"]), span, float(data["score"]))
        except (AttributeError, KeyError, IndexError, TypeError, ValueError):
            return None


def alignment_from(records: Any) -> tuple[SentenceSource, ...]:
    """A recorded output's ``alignment`` back as sentences; () for a record without one (runs
    recorded before alignments were) or one it cannot read."""
    if not isinstance(records, list):
        return ()
    out = [SentenceSource.from_dict(r) for r in records]
    return tuple(s for s in out if s is not None)


def sentences(text: str, start: int = 0, end: int | None = None) -> list[Span]:
    """The sentences of ``text[start:end]`` as spans of ``text``, whitespace trimmed.

    A full stop after an abbreviation ("Dr.", "e.g.") or an initial ("J. Smith"), after the
    number of a numbered list, or before a word in lower case, ends nothing; a piece longer
    than :data:`MAX_SENTENCE_CHARS` is cut at its last space before that length."""
    end = len(text) if end is None else end
    out: list[Span] = []
    at = start
    for m in _END.finditer(text, start, end):
        if m.group().startswith(".") and not _ends_sentence(text, m.start(), m.end(), end):
            continue
        _add(text, at, m.end(), out)
        at = m.end()
    _add(text, at, end, out)
    return out


def _ends_sentence(text: str, dot: int, after: int, end: int) -> bool:
    before = _WORD_BEFORE.search(text, max(0, dot - 12), dot + 1)
    if before is not None:
        word = before.group(1)
        if word.lower() in _ABBREVIATIONS or (len(word) == 1 and word.isupper()):
            return False
        line = text.rfind("\n", 0, before.start()) + 1
        if word.isdigit() and not text[line : before.start()].strip():
            return False  # a numbered list's "1." at the start of a line
    nxt = after
    while nxt < end and text[nxt].isspace():
        nxt += 1
    return nxt >= end or not text[nxt].islower()


def _add(text: str, a: int, b: int, out: list[Span]) -> None:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    while b - a > MAX_SENTENCE_CHARS:
        cut = text.rfind(" ", a + 1, a + MAX_SENTENCE_CHARS)
        cut = cut if cut > a else a + MAX_SENTENCE_CHARS
        out.append((a, cut))
        a = cut
        while a < b and text[a].isspace():
            a += 1
    if b > a:
        out.append((a, b))


def _key_terms(sentence: str) -> set[str]:
    """The terms of the numbers and names in ``sentence`` (capitalised words but the first,
    unless it is an acronym or holds a digit): they name what the sentence is about, and
    weigh twice the rarest word however common they are in the kept text."""
    words = [m.group() for m in _NUMBER.finditer(sentence)]
    for m in _NAME.finditer(sentence):
        word = m.group()
        if m.start() > 0 or word.isupper() or any(c.isdigit() for c in word):
            words.append(word)
    return {t for w in words for t, _ in analyze(w) if t}


class Aligner:
    """The kept text of one document read once into sentences and their terms, for every
    output of a job (their kept spans overlap: each span is split and analysed once)."""

    def __init__(self, document: str) -> None:
        self.document = document
        self._read: dict[Span, list[tuple[Span, frozenset[str]]]] = {}

    def _candidates(self, kept: Sequence[Span], answer: str) -> list[tuple[Span, frozenset[str]]]:
        doc = self.document
        spans = sorted({(max(0, a), min(len(doc), b)) for a, b in kept if b > a and a < len(doc)})
        if sum(b - a for a, b in spans) > MAX_CANDIDATE_CHARS:
            spans = _likeliest(doc, _pieces(doc, spans), answer)
        out: list[tuple[Span, frozenset[str]]] = []
        seen: set[Span] = set()
        for span in spans:
            if span not in self._read:
                self._read[span] = [(s, frozenset(t for t, _ in analyze(doc[s[0] : s[1]]) if t))
                                    for s in sentences(doc, *span)]  # fmt: skip
            for s, terms in self._read[span]:
                if s not in seen and terms:  # overlapping spans (stride) give a sentence once
                    seen.add(s)
                    out.append((s, terms))
        out.sort(key=lambda c: c[0])
        return out

    def align(self, answer: str, kept: Sequence[Span]) -> tuple[SentenceSource, ...]:
        """Each sentence of ``answer`` and its best supporting sentence in the ``kept`` spans of
        the document (see :func:`align`)."""
        spans = sentences(answer)[:MAX_SENTENCES]
        if not spans:
            return ()
        candidates = self._candidates(kept, answer)
        postings: dict[str, list[int]] = {}
        for i, (_, terms) in enumerate(candidates):
            for t in terms:
                postings.setdefault(t, []).append(i)
        n = len(candidates)
        # idf over the kept sentences; a term the kept text lacks weighs as one it holds once
        # (a paraphrase's own words: they lower the share without outweighing the rare word)
        rarest = _idf(n, 1)
        out = []
        for a, b in spans:
            sentence = answer[a:b]
            sentence_terms = {t for t, _ in analyze(sentence) if t}
            keys = _key_terms(sentence) & sentence_terms
            weights = {t: 2 * rarest if t in keys else _idf(n, len(postings.get(t, ())))
                       for t in sentence_terms}  # fmt: skip
            total = sum(weights.values())
            found: dict[int, float] = {}
            for t, w in weights.items():
                for i in postings.get(t, ()):
                    found[i] = found.get(i, 0.0) + w
            best, score = None, 0.0
            for i in sorted(found):  # ties: the earlier sentence
                if found[i] > score:
                    best, score = i, found[i]
            score = min(1.0, score / total) if total > 0 else 0.0
            source = candidates[best][0] if best is not None and score >= THRESHOLD else None
            out.append(SentenceSource(a, b, source, score))
        return tuple(out)


def _idf(n: int, df: int) -> float:
    return math.log(1 + n / max(1, df)) ** 2


def align(answer: str, document: str, kept: Sequence[Span]) -> tuple[SentenceSource, ...]:
    """Each sentence of ``answer`` with the document span of the sentence in the ``kept`` spans
    that supports it best and its score (the idf-weighted share of its terms found there);
    ``source`` None below :data:`THRESHOLD`. () for an empty answer."""
    return Aligner(document).align(answer, kept)


def _pieces(doc: str, spans: Iterable[Span]) -> list[Span]:
    """``spans`` cut at spaces into pieces of about a sixteenth of the cap, for ranking."""
    size = MAX_CANDIDATE_CHARS // 16
    out = []
    for first, b in spans:
        a = first
        while b - a > size:
            cut = doc.rfind(" ", a + size // 2, a + size)
            cut = cut if cut > a else a + size
            out.append((a, cut))
            a = cut
        out.append((a, b))
    return out


def _likeliest(doc: str, spans: Sequence[Span], answer: str) -> list[Span]:
    """The spans that hold most of the reply's words (plain substring tests, fast on megabytes)
    within :data:`MAX_CANDIDATE_CHARS`, in document order."""
    words = {w for w in re.findall(r"\w{3,}", answer.casefold())}
    words = set(sorted(words, key=len, reverse=True)[:64])

    def held(span: Span) -> int:
        text = doc[span[0] : span[1]].casefold()
        return sum(w in text for w in words)

    ranked = sorted(spans, key=lambda s: -held(s))
    out, used = [], 0
    for a, b in ranked:
        if used + (b - a) > MAX_CANDIDATE_CHARS:
            continue
        out.append((a, b))
        used += b - a
    return sorted(out)
