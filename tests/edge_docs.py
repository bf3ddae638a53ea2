"""Documents for the context edge suites, made from the real texts in tests/data.

``text_of_tokens`` repeats real prose and cuts it to an exact token count (the model's exact
counter); ``one_line`` makes the 5 MB documents of a single line: words without punctuation,
letters without a single space, and Chinese with its punctuation but no line end.
"""

from __future__ import annotations

import bisect
import functools
import re
from pathlib import Path

from app.core.documents import load_document
from app.core.tokens import TokenCounter

DATA = Path(__file__).resolve().parent / "data"
FIVE_MB = 5_000_000
ONE_LINE_KINDS = ("words", "no-spaces", "chinese")
# One sentence of Moby-Dick's first paragraph, far longer than the budgets it is planned under.
LONG_SENTENCE = (
    "It is a way I have of driving off the spleen and regulating the circulation, and whenever "
    "I find myself growing grim about the mouth, whenever it is a damp, drizzly November in my "
    "soul, then I account it high time to get to sea as soon as I can."
)


@functools.cache
def prose() -> str:
    """The opening of Moby-Dick and three founding texts of the United States (tests/data)."""
    parts = [load_document(DATA / name).text.strip() for name in ("sample.docx", "sample.pdf")]
    return "\n\n".join(parts)


def text_of_tokens(counter: TokenCounter, tokens: int, source: str | None = None) -> str:
    """Real text of exactly ``tokens`` tokens: ``source`` (default :func:`prose`) repeated, cut
    at the last word end that fits, then topped up one " the" (one token) at a time."""
    if tokens < 1:
        raise ValueError("a document of at least one token")
    source = source or prose()
    per = max(1, counter.count(source))
    long = "\n\n".join([source] * (tokens // per + 2))
    ends = [m.start() for m in re.finditer(r"(?<=\S)\s", long)]
    i = bisect.bisect_right(ends, tokens, key=lambda e: counter.count(long[:e])) - 1
    text = long[: ends[i]] if i >= 0 else ""
    n = counter.count(text)
    while n < tokens:
        text += " the"
        n = counter.count(text)
    if n != tokens:
        raise AssertionError(f"made a text of {n} tokens, not {tokens}")
    return text


@functools.cache
def one_line(kind: str) -> str:
    """A document of one line of about 5 MB (UTF-8), no newline anywhere."""
    if kind == "chinese":
        source = re.sub(r"\s+", "", (DATA / "src" / "chinese-simplified.txt").read_text("utf-8"))
        reps = FIVE_MB // len(source.encode("utf-8")) + 1
        return (source * reps).encode("utf-8")[:FIVE_MB].decode("utf-8", "ignore")
    words = re.findall(r"[^\W\d_]+", prose())
    if kind == "words":
        line = " ".join(words) + " "
    elif kind == "no-spaces":
        line = "".join(words)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return (line * (FIVE_MB // len(line) + 1))[:FIVE_MB]
