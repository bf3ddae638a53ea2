"""Judge-free quality figures of a summary, the same functions for every pipeline of
bench_peers.py (no model, no LangChain: tests/core/test_peers_metrics.py runs them in CI).

- Terms: words (Unicode letters and digits) lowercased, English stop words (NLTK's list, as
  app.core.planning.retrieve has it) and the words the pipelines' own instructions use
  ("summary", "document", "part", ...) dropped, numbers and words under 3 letters dropped, the
  rest stemmed with Snowball's English stemmer (PyStemmer).
- Headings (:func:`headings`): Markdown ATX and setext headings; definition-list headwords
  (``:angry fruit salad: n.``, the Jargon File's entries); and a short line standing alone as a
  paragraph — at most 80 characters and 10 words, starting with a capital or a digit once its
  numbering is off, not with a quotation mark, bracket, bullet, table rule or ``#``, no sentence
  punctuation at its end unless it is numbered (``Chapter 4.``, ``2.1``), no e-mail address or
  URL — that is followed by a body paragraph (several lines, or one of 100 characters or more),
  or that stands out left of the document's usual body indentation with the next paragraph
  indented (a plain-text chapter over its table of contents). So a run of short lines (a table
  of contents, an index of headwords) gives no headings but, at most, its last line. Numbering
  (``Chapter 1.``, ``IV.``, ``2.3``) is taken off; headings are kept once each.
- Heading coverage (:func:`heading_coverage`): the share of the headings that have key terms (a
  heading's terms) with at least one of them among the summary's terms.
- Part coverage (:func:`part_coverage`), the figure the goal compares: the document cut into
  ``K`` parts of equal length (each cut moved to the nearest paragraph end); each part's key terms
  are its ``T`` highest tf-idf terms (count in the part x log(K / parts holding the term)); a
  part is covered when at least one of its key terms is among the summary's terms. A short
  summary of hundreds of headings covers few of them whatever it says; K parts ask instead
  whether the summary says something specific to each stretch of the document.
- Needles (:func:`plant`): short invented facts, each a paragraph of its own at a paragraph end
  picked with a seeded generator, each with key words (its invented names) the document does
  not hold.
  :func:`reached` says which needles reached the model whole in one of the prompt texts given;
  :func:`in_summary` which needles have one of their key words in the summary.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

import Stemmer

from app.core.planning.terms import STOP_WORDS

# Words the pipelines' instructions and templates use (ContextLens: "Summarize this part of a
# longer document"; LangChain: "Write a concise summary of the following"; LlamaIndex: "Context
# information from multiple sources"), and words that name a document's structure: a summary
# that echoes them covers nothing.
_META_WORDS = """
    summary summaries summarize summarized summarizes summarise document documents part parts
    text texts concise following context information sources source query answer refine refined
    original existing longer section sections chapter chapters appendix glossary contents table
"""
META_WORDS = frozenset(_META_WORDS.split())
MIN_TERM = 3  # letters: shorter words ("ai", "tv") are too often other things
PARTS = 10  # K: the parts of part coverage
PART_TERMS = 10  # T: key terms per part

_WORD = re.compile(r"[^\W_]+")
_ATX = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(={3,}|-{3,})[ \t]*$")
_HEADWORD = re.compile(r"^[ \t]*:([^:\n]{1,80}):(?=\s|$)")
_NUMBERING = re.compile(
    r"^(?:(?:chapter|section|part|appendix)\s+)?(?:[0-9]+(?:\.[0-9]+)*|[ivxlc]+|[a-z])[.)]\s+",
    re.IGNORECASE,
)
# table rules, bullets, quotations, brackets, markup: a line starting so is not a heading
_NOT_HEADING_START = re.compile(r"[\u2500-\u257f|+*•·>#\-\"'“‘«(\[{<]")
_NOT_HEADING_END = re.compile(r"[\"'”’»)\]}>]$")
HEADING_CHARS = 80
HEADING_WORDS = 10
BODY_CHARS = 100  # a one-line paragraph this long reads as body text


@cache
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def terms(text: str) -> list[str]:
    """The terms of ``text`` in order, repeats kept (see the module's docstring)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    words = [w for w in _WORD.findall(text)
             if len(w) >= MIN_TERM and not w.isdigit() and w not in STOP_WORDS
             and w not in META_WORDS]  # fmt: skip
    stems = _stemmer().stemWords(words)
    meta = _meta_stems()
    return [s for s in stems if s not in meta]


@cache
def _meta_stems() -> frozenset[str]:
    return frozenset(_stemmer().stemWords(sorted(META_WORDS)))


# ----- headings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heading:
    start: int  # character offset of its line
    title: str  # numbering taken off

    @property
    def key_terms(self) -> frozenset[str]:
        return frozenset(terms(self.title))


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(offset, text) of each paragraph: a run of non-blank lines (its first line's indentation
    kept, the newline after its last line not)."""
    out: list[tuple[int, str]] = []
    start = None
    pos = 0
    for line in text.splitlines(keepends=True):
        if line.strip():
            if start is None:
                start = pos
        elif start is not None:
            out.append((start, text[start:pos].rstrip("\r\n")))
            start = None
        pos += len(line)
    if start is not None:
        out.append((start, text[start:].rstrip("\r\n")))
    return out


def _indent(paragraph: str) -> int:
    return len(paragraph) - len(paragraph.lstrip(" \t"))


def _title(line: str) -> str:
    title = line.strip()
    while (stripped := _NUMBERING.sub("", title, count=1)) != title and stripped:
        title = stripped
    return title.strip()


def _short_line(paragraph: str) -> str | None:
    """The paragraph's text when it is one short line that could be a heading, else None."""
    line = paragraph.strip()
    if "\n" in line or not line or len(line) > HEADING_CHARS:
        return None
    if len(line.split()) > HEADING_WORDS or _NOT_HEADING_START.match(line) \
            or _NOT_HEADING_END.search(line) or "@" in line or "://" in line:  # fmt: skip
        return None
    if line[-1] in ".,;:!?" and _title(line) == line:  # a sentence, not "Chapter 4." or "2.1"
        return None
    title = _title(line)
    if not title or not (title[0].isupper() or title[0].isdigit()):  # a phrase, not a title
        return None
    return line


def _is_body(paragraph: str) -> bool:
    line = paragraph.strip()
    return "\n" in line or len(line) >= BODY_CHARS


def headings(text: str) -> list[Heading]:
    """The document's headings in order, each once (see the module's docstring)."""
    found: list[Heading] = []
    paras = paragraphs(text)
    # the indentation most body paragraphs have: a heading standing out left of it counts
    # before an indented paragraph of any kind (a table of contents, a sub-heading)
    body_indents = Counter(_indent(p) for _, p in paras if _is_body(p))
    body_indent = body_indents.most_common(1)[0][0] if body_indents else 0
    for i, (off, para) in enumerate(paras):
        lines = para.split("\n")
        marked = False
        for j, line in enumerate(lines):  # Markdown: a heading line may sit inside a paragraph
            at = off + sum(len(x) + 1 for x in lines[:j])
            if m := _ATX.match(line):
                found.append(Heading(at, _title(m.group(1))))
                marked = True
            elif j + 1 < len(lines) and line.strip() and _SETEXT.match(lines[j + 1]) \
                    and not _SETEXT.match(line):  # fmt: skip
                found.append(Heading(at, _title(line)))
                marked = True
        if marked:
            continue
        if m := _HEADWORD.match(para):
            found.append(Heading(off + m.start(1) - 1, _title(m.group(1))))
            continue
        line = _short_line(para)
        if line is None or i + 1 >= len(paras):
            continue
        following = paras[i + 1][1]
        # body text next, or a paragraph indented deeper (a plain-text heading stands out left)
        if _is_body(following) or _indent(para) < body_indent < _indent(following) + 1:
            found.append(Heading(off + _indent(para), _title(line)))
    seen: set[str] = set()
    out = []
    for h in found:
        key = " ".join(h.title.casefold().split())
        if key and key not in seen:
            seen.add(key)
            out.append(h)
    return out


def heading_coverage(heads: Sequence[Heading], summary: str) -> tuple[int, int]:
    """(covered, counted): of the headings that have key terms, those with one of them among
    the summary's terms."""
    said = set(terms(summary))
    keyed = [h.key_terms for h in heads if h.key_terms]
    return sum(1 for k in keyed if k & said), len(keyed)


# ----- parts -----------------------------------------------------------------------------------


def split_parts(text: str, k: int = PARTS) -> list[str]:
    """``text`` in ``k`` parts of about equal length, each cut at the paragraph end nearest its
    share (fewer parts where a paragraph is longer than a part)."""
    ends = [m.start() for m in _PARAGRAPH_END.finditer(text)]
    cuts = [0]
    for i in range(1, k):
        share = len(text) * i // k
        j = bisect.bisect_left(ends, share)
        near = [e for e in ends[max(0, j - 1) : j + 1] if e > cuts[-1]]
        if near:
            cuts.append(min(near, key=lambda e: (abs(e - share), e)))
    cuts.append(len(text))
    return [text[a:b] for a, b in itertools.pairwise(cuts) if text[a:b].strip()]


def part_key_terms(text: str, k: int = PARTS, top: int = PART_TERMS) -> list[list[str]]:
    """Per part, its ``top`` terms by tf-idf over the parts (ties by the term, so the same text
    always gives the same terms); a term every part holds scores 0 and is never key."""
    counts = [Counter(terms(p)) for p in split_parts(text, k)]
    df = Counter(t for c in counts for t in c)
    n = len(counts)
    out = []
    for c in counts:
        scored = [(tf * math.log(n / df[t]), t) for t, tf in c.items()]
        scored = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))
        out.append([t for _, t in scored[:top]])
    return out


def part_coverage(keys: Sequence[Sequence[str]], summary: str) -> tuple[int, int]:
    """(covered, parts): the parts with one of their key terms among the summary's terms."""
    said = set(terms(summary))
    return sum(1 for k in keys if said.intersection(k)), len(keys)


# ----- needles ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Needle:
    fact: str
    keys: tuple[str, ...]  # its invented names: one in a summary says the fact was kept


NEEDLES: tuple[Needle, ...] = (
    Needle("The Tessaly weaving guild dyes its banners with a beetle called the ombrine.",
           ("Tessaly", "ombrine")),
    Needle("Sailors call the flashing pattern of the Osterlund lighthouse the Dunmarra wink.",
           ("Osterlund", "Dunmarra")),
    Needle("The Kestrine monks flavour their winter ale with a root named yarrowmint.",
           ("Kestrine", "yarrowmint")),
    Needle("The Sorrel Street bakery sells a black rye loaf known as the brannock.",
           ("brannock",)),
    Needle("Paulina Ostrova named the comet she found in 1893 after her cat, Pimbleton.",
           ("Ostrova", "Pimbleton")),
    Needle("The Dovecote Library lends its rarest atlas only to readers who say lanternfish.",
           ("Dovecote", "lanternfish")),
)  # fmt: skip

_PARAGRAPH_END = re.compile(r"(?<=\S)\n[ \t]*\n")


@dataclass(frozen=True)
class Planted:
    text: str
    needles: tuple[Needle, ...]
    spans: tuple[tuple[int, int], ...]  # each fact's character range in ``text``


def plant(text: str, needles: Sequence[Needle], seed: int, *, lo: float = 0.05,
          hi: float = 0.95) -> Planted:  # fmt: skip
    """Each needle as a paragraph of its own at a distinct paragraph end, at seeded depths
    between ``lo`` and ``hi`` of the text. ValueError when the text holds a key word already
    or has fewer paragraph ends than needles."""
    low = text.casefold()
    if held := [k for n in needles for k in n.keys if k.casefold() in low]:
        raise ValueError(f"the document holds these needles' key words already: {held}")
    ends = [m.start() for m in _PARAGRAPH_END.finditer(text)]
    if len(ends) < len(needles):
        raise ValueError(f"{len(needles)} needles, {len(ends)} paragraph ends")
    rng = random.Random(seed)
    used: set[int] = set()
    where: list[int] = []
    for _ in needles:
        at = int(len(text) * rng.uniform(lo, hi))
        order = sorted(range(len(ends)), key=lambda k: (abs(ends[k] - at), k))
        j = next(k for k in order if k not in used)
        used.add(j)
        where.append(ends[j])
    pieces: list[str] = []
    spans: list[tuple[int, int]] = [(0, 0)] * len(needles)
    prev = pos = 0
    for at, i in sorted(zip(where, range(len(needles)), strict=True)):
        pieces.append(text[prev:at])
        pos += at - prev
        insert = "\n\n" + needles[i].fact
        spans[i] = (pos + 2, pos + len(insert))
        pieces.append(insert)
        pos += len(insert)
        prev = at
    pieces.append(text[prev:])
    return Planted("".join(pieces), tuple(needles), tuple(spans))


def _flat(text: str) -> str:
    return " ".join(text.split())


def reached(needles: Sequence[Needle], prompts: Iterable[str]) -> list[bool]:
    """Per needle: whether its whole fact is in one of ``prompts`` (whitespace runs read as one
    space, as splitters may rewrap)."""
    flat = [_flat(p) for p in prompts]
    return [any(_flat(n.fact) in p for p in flat) for n in needles]


def texts_of_ranges(text: str, ranges: Iterable[tuple[str, int, int]]) -> list[str]:
    """The texts one model call at a time read, from (step, start, end) character ranges of
    ``text`` (a step's ranges joined where only whitespace lies between them)."""
    by_step: dict[str, list[tuple[int, int]]] = {}
    for step, a, b in ranges:
        by_step.setdefault(step, []).append((a, b))
    out = []
    for spans in by_step.values():
        merged: list[list[int]] = []
        for a, b in sorted(spans):
            if merged and not text[merged[-1][1] : a].strip():
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        out += [text[a:b] for a, b in merged]
    return out


def in_summary(needles: Sequence[Needle], summary: str) -> list[bool]:
    """Per needle: whether one of its key words is a word of the summary (case ignored)."""
    words = set(_WORD.findall(unicodedata.normalize("NFKC", summary).casefold()))
    return [any(k.casefold() in words for k in n.keys) for n in needles]


def cut(text: str, size: int) -> str:
    """The start of ``text`` up to the last paragraph end within ``size`` UTF-8 bytes (the whole
    text when it is that small)."""
    if len(text.encode("utf-8")) <= size:
        return text
    head = text.encode("utf-8")[:size].decode("utf-8", errors="ignore")
    ends = [m.start() for m in _PARAGRAPH_END.finditer(head)]
    if not ends:
        raise ValueError(f"no paragraph ends within {size:,} bytes")
    return head[: ends[-1]]
