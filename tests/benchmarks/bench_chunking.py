"""Chunking: ContextLens's ``chunk_document`` vs semchunk and LangChain, speed and clean cuts.

Run with ``python tests/benchmarks/bench_chunking.py`` (``--mb 1`` for a quick look). All three
chunkers get the same text, the same token counter (the exact SmolLM2 counter's ``count``) and the
same budget (``--max-tokens``); each returns character spans into the text:

- ContextLens: ``chunk_document(document_from_text(text), counter, max_tokens)``, timed including
  ``document_from_text`` (the structure pass it needs);
- semchunk: ``semchunk.chunk(text, max_tokens, count, offsets=True)``. Its default memoization of
  the counter is kept (an ``lru_cache``, as ``memoize=True`` builds), but a fresh cache per round,
  so that no round starts with the counts of an earlier one;
- LangChain: ``RecursiveCharacterTextSplitter(chunk_size=max_tokens, chunk_overlap=0,
  length_function=count, add_start_index=True).create_documents([text])``; spans are its
  ``start_index`` plus the chunk's length.

The corpus (deterministic) is English prose (the Jargon File), Python standard-library code and
Chinese (tests/core/token_corpus.py), concatenated in rotating order with a blank line between
pieces until ``--mb`` MB of UTF-8 is reached (small sizes take a third from each). Repeats are
varied by default (``--repeat vary``): English comes back with its paragraphs shuffled, code
continues into further standard-library files, Chinese is drawn with a new seed. Exact copies
(``--repeat copy``) would flatter semchunk: its memoized counter then answers most counts of a
repeated piece from the cache (measured: 81% of its counts on 20 MB of copies, 20% on 2 MB that
do not repeat), which no real document offers. The counter calls and cache hits are printed.

Measured per chunker: wall seconds (median of ``--rounds``; rounds rotate who goes first), MB/s,
chunks, fill (mean tokens per chunk / budget), chunks over budget (each chunk's text recounted
with the counter), and boundary integrity: the share of cut points (every chunk end but the
last) that are clean (the table also gives the number of unclean cuts, as chunkers that fill
their chunks less make more cuts). One neutral rule, written here and not ContextLens's own
classifier, judges every chunker. For a cut at ``p``, let ``gap`` be the maximal whitespace run
around ``p`` (empty when ``p`` is between two non-space characters) and ``q`` its start. The cut
is clean when

- ``gap`` holds a blank line (``\\n``, optional spaces/tabs, ``\\n``): a paragraph break; or
- ``text[:q]`` ends with a sentence mark, optionally followed by closing quotes or brackets:
  ``.!?…`` only when whitespace follows (``gap`` is not empty, or ``q`` is the end of the text),
  so ``3.|14`` and ``os.|path`` are not sentence ends; ``。！？；`` anywhere; or
- ``p`` lies in a code piece and ``gap`` holds a line feed: the cut is at a line end.

Goal (issue: chunking): ContextLens faster than both, and its integrity at least theirs.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.default_model import default_model_path  # noqa: E402
from app.core.documents import document_from_text  # noqa: E402
from app.core.planning.chunking import chunk_document  # noqa: E402
from app.core.tokens import TiktokenCounter, gguf_encoding  # noqa: E402
from tests.benchmarks.report import Row, parse_args, row, write_rows  # noqa: E402
from tests.core.token_corpus import chinese, code, english  # noqa: E402

MB = 1_000_000
KINDS = ("english", "code", "chinese")
Spans = list[tuple[int, int]]

# The neutral judge (see the module docstring).
_SENTENCE_END = re.compile(r"""(?:([.!?…])|[。！？；])[)"'\]»”’」』）]*\Z""")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")


@dataclass(frozen=True)
class Corpus:
    text: str
    sections: list[tuple[int, int, str]]  # (start, end, kind), character offsets, in order

    def kind_at(self, pos: int) -> str:
        """The kind of the piece holding ``pos`` (a separator counts with the piece before it)."""
        i = bisect.bisect_right(self.sections, (pos, float("inf"), "")) - 1
        return self.sections[max(i, 0)][2]


def _head(text: str, nbytes: int) -> str:
    """Up to ``nbytes`` of UTF-8 from the start of ``text``, ending at a line end if one is near."""
    piece = text.encode("utf-8")[:nbytes].decode("utf-8", "ignore")
    if len(piece) < len(text):
        nl = piece.rfind("\n")
        if nl > len(piece) // 2:
            piece = piece[: nl + 1]
    return piece.rstrip()


_PARAGRAPHS = re.compile(r"\n(?:[^\S\n]*\n)+")  # blank lines; indentation stays
CODE_PIECE = 2_000_000  # characters of standard-library code per piece, as token_corpus.code()


class Sources:
    """The k-th variant of each kind of text: k = 0 is token_corpus's own, later ones differ."""

    def __init__(self, vary: bool) -> None:
        self.vary = vary
        self._english = english()
        self._code = code(40_000_000) if vary else code()

    def get(self, kind: str, k: int) -> str:
        k = k if self.vary else 0
        if kind == "english":
            if k == 0:
                return self._english
            paragraphs = _PARAGRAPHS.split(self._english)
            random.Random(k).shuffle(paragraphs)
            return "\n\n".join(paragraphs)
        if kind == "code":
            if not self.vary:
                return self._code
            start = (k * CODE_PIECE) % max(1, len(self._code) - CODE_PIECE)
            start = self._code.find("\n", start) + 1 if start else 0  # whole lines
            piece = self._code[start : start + CODE_PIECE]
            return piece[: piece.rfind("\n") + 1]
        return chinese(random.Random(k))


def build_corpus(mb: float, vary: bool = True) -> Corpus:
    sources = Sources(vary)
    used = dict.fromkeys(KINDS, 0)
    target = int(mb * MB)
    cap = max(1, target // len(KINDS))  # bytes per piece: a small corpus still holds all three
    parts: list[str] = []
    sections: list[tuple[int, int, str]] = []
    pos = size = 0
    rotation = 0
    while size < target:
        order = KINDS[rotation % len(KINDS) :] + KINDS[: rotation % len(KINDS)]
        rotation += 1
        for kind in order:
            piece = ""
            if size < target:
                piece = _head(sources.get(kind, used[kind]), min(cap, target - size))
                used[kind] += 1
            if not piece:
                size = max(size, target)  # nothing more fits: stop
                break
            if parts:
                parts.append("\n\n")
                pos += 2
                size += 2
            parts.append(piece)
            sections.append((pos, pos + len(piece), kind))
            pos += len(piece)
            size += len(piece.encode("utf-8"))
    return Corpus("".join(parts), sections)


def clean_cut(text: str, p: int, in_code: bool) -> bool:
    """The neutral judge of one cut point (see the module docstring)."""
    q = p
    while q > 0 and text[q - 1].isspace():
        q -= 1
    r = p
    while r < len(text) and text[r].isspace():
        r += 1
    gap = text[q:r]
    if "\n" in gap and (_BLANK_LINE.search(gap) or in_code):
        return True
    m = _SENTENCE_END.search(text, max(0, q - 8), q)
    if m is None:
        return False
    return m.group(1) is None or r > q or q == len(text)


# ---------------------------------------------------------------------------------------------
# the chunkers, each returning character spans


def run_contextlens(text: str, counter: TiktokenCounter, max_tokens: int, info: dict) -> Spans:
    t0 = time.perf_counter()
    doc = document_from_text(text)
    info.setdefault("document_from_text", []).append(time.perf_counter() - t0)
    chunks = chunk_document(doc, counter, max_tokens)
    if doc.text != text:
        raise SystemExit("document_from_text changed the text: offsets would not compare")
    return [(c.start, c.end) for c in chunks]


def run_semchunk(text: str, counter: TiktokenCounter, max_tokens: int, info: dict) -> Spans:
    import semchunk  # noqa: PLC0415 (the optional `bench` extra)

    count = functools.lru_cache(maxsize=None)(counter.count)  # what memoize=True does, fresh
    _chunks, offsets = semchunk.chunk(text, max_tokens, count, memoize=False, offsets=True)
    cache = count.cache_info()
    info["semchunk cache"] = [cache.hits, cache.misses]
    return list(offsets)


def run_langchain(text: str, counter: TiktokenCounter, max_tokens: int, info: dict) -> Spans:
    from langchain_text_splitters import (  # noqa: PLC0415 (the optional `bench` extra)
        RecursiveCharacterTextSplitter,
    )

    splitter = RecursiveCharacterTextSplitter(
        chunk_size=max_tokens,
        chunk_overlap=0,
        length_function=counter.count,
        add_start_index=True,
    )
    docs = splitter.create_documents([text])
    spans = [
        (d.metadata["start_index"], d.metadata["start_index"] + len(d.page_content)) for d in docs
    ]
    if any(s < 0 for s, _ in spans):
        raise SystemExit("LangChain's start_index could not locate a chunk in the text")
    return spans


CHUNKERS: dict[str, Callable[[str, TiktokenCounter, int, dict], Spans]] = {
    "ContextLens": run_contextlens,
    "semchunk": run_semchunk,
    "LangChain": run_langchain,
}


# ---------------------------------------------------------------------------------------------
# metrics


@dataclass
class Result:
    seconds: float
    chunks: int
    fill: float
    over: int
    max_tokens_seen: int
    cuts: dict[str, tuple[int, int]]  # kind -> (clean cuts, cuts); "all" for the total
    lost: int  # non-whitespace characters in no chunk
    overlaps: int


def measure(corpus: Corpus, spans: Spans, counter: TiktokenCounter, budget: int) -> Result:
    text = corpus.text
    tokens = [counter.count(text[s:e]) for s, e in spans]
    over = sum(t > budget for t in tokens)
    cuts = {k: [0, 0] for k in (*KINDS, "all")}
    for _s, e in spans[:-1]:
        kind = corpus.kind_at(e)
        ok = clean_cut(text, e, kind == "code")
        for k in (kind, "all"):
            cuts[k][0] += ok
            cuts[k][1] += 1
    lost = overlaps = 0
    prev = 0
    for s, e in [*spans, (len(text), len(text))]:
        if s < prev:
            overlaps += 1
        elif s > prev:
            lost += len("".join(text[prev:s].split()))
        prev = max(prev, e)
    return Result(
        seconds=0.0,
        chunks=len(spans),
        fill=statistics.fmean(tokens) / budget if tokens else 0.0,
        over=over,
        max_tokens_seen=max(tokens, default=0),
        cuts={k: (v[0], v[1]) for k, v in cuts.items()},
        lost=lost,
        overlaps=overlaps,
    )


def share(clean_total: tuple[int, int]) -> float:
    clean, total = clean_total
    return clean / total if total else 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20.0, help="corpus size in MB (10^6 bytes)")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--repeat",
        choices=("vary", "copy"),
        default="vary",
        help="how the corpus repeats its sources past their size (see the docstring)",
    )
    parser.add_argument(
        "--only", choices=list(CHUNKERS), action="append", help="run only these (repeatable)"
    )
    args = parse_args(parser, {"mb": 0.5})

    model = default_model_path()
    counter = gguf_encoding(model)
    corpus = build_corpus(args.mb, vary=args.repeat == "vary")
    text = corpus.text
    size = len(text.encode("utf-8"))
    mix = {k: 0 for k in KINDS}
    pieces = {k: 0 for k in KINDS}
    for s, e, kind in corpus.sections:
        mix[kind] += len(text[s:e].encode("utf-8"))
        pieces[kind] += 1
    print(
        f"model {model.name}, budget {args.max_tokens} tokens, rounds {args.rounds}, "
        f"corpus {size / MB:.2f} MB ({len(text):,} characters, repeats: {args.repeat})"
    )
    print(
        "mix: "
        + ", ".join(
            f"{k} {mix[k] / MB:.2f} MB ({mix[k] / size:.0%}, {pieces[k]} pieces)" for k in KINDS
        )
    )

    names = args.only or list(CHUNKERS)
    times: dict[str, list[float]] = {n: [] for n in names}
    spans: dict[str, Spans] = {}
    info: dict[str, list[float]] = {}
    for name in names:  # warm up: first-call costs (imports, regex compiles) are not chunking
        CHUNKERS[name](text[:20_000], counter, args.max_tokens, {})
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
        for name in order:
            t0 = time.perf_counter()
            spans[name] = CHUNKERS[name](text, counter, args.max_tokens, info)
            times[name].append(time.perf_counter() - t0)
            print(f"round {r + 1}: {name:12s} {times[name][-1]:8.2f} s", flush=True)

    results: dict[str, Result] = {}
    for name in names:
        res = measure(corpus, spans[name], counter, args.max_tokens)
        res.seconds = statistics.median(times[name])
        results[name] = res

    print()
    print(
        f"{'chunker':12s} {'seconds':>8s} {'MB/s':>7s} {'chunks':>8s} {'fill':>6s} "
        f"{'over budget':>14s} {'integrity':>10s} {'unclean':>8s}"
    )
    for name, res in results.items():
        over = f"{res.over} ({res.over / max(res.chunks, 1):.1%})"
        print(
            f"{name:12s} {res.seconds:8.2f} {size / MB / res.seconds:7.2f} {res.chunks:8,d} "
            f"{res.fill:6.1%} {over:>14s} {share(res.cuts['all']):10.2%} "
            f"{res.cuts['all'][1] - res.cuts['all'][0]:8,d}"
        )
    print()
    print("integrity by piece kind (clean cuts / cuts):")
    for name, res in results.items():
        print(
            f"  {name:12s} "
            + "  ".join(
                f"{k} {share(res.cuts[k]):6.1%} ({res.cuts[k][0]:,}/{res.cuts[k][1]:,})"
                for k in KINDS
            )
        )
    for name, res in results.items():
        if res.over:
            print(
                f"note: {name} has {res.over} chunks over budget, the largest {res.max_tokens_seen}"
            )
        if res.lost or res.overlaps:
            print(
                f"note: {name} leaves {res.lost} non-space characters out, {res.overlaps} overlaps"
            )
    if "document_from_text" in info:
        doc_s = statistics.median(info["document_from_text"])
        print(f"ContextLens time in document_from_text: {doc_s:.2f} s (included above)")
    if "semchunk cache" in info:
        hits, misses = info["semchunk cache"]
        print(
            f"semchunk counts: {hits + misses:,} asked, {hits:,} answered by its memo cache "
            f"({hits / max(hits + misses, 1):.0%}; last round)"
        )

    if "ContextLens" not in results or len(results) < 2:
        write_rows(args.json, "bench_chunking", [])
        return 0
    mine = results["ContextLens"]
    others = {n: r for n, r in results.items() if n != "ContextLens"}
    print()
    print(
        "ContextLens speed "
        + ", ".join(f"vs {n} = {r.seconds / mine.seconds:.2f}x" for n, r in others.items())
    )
    print(
        f"ContextLens integrity {share(mine.cuts['all']):.2%} "
        + ", ".join(
            f"vs {n} {share(r.cuts['all']):.2%} "
            f"({(share(mine.cuts['all']) - share(r.cuts['all'])) * 100:+.2f} points)"
            for n, r in others.items()
        )
    )
    faster = all(r.seconds > mine.seconds for r in others.values())
    cleaner = all(share(mine.cuts["all"]) >= share(r.cuts["all"]) for r in others.values())
    verdict = "PASS" if faster and cleaner else "FAIL"
    print(
        f"goal: faster than both, integrity at least theirs: {verdict} "
        f"(speed {'PASS' if faster else 'FAIL'}, integrity {'PASS' if cleaner else 'FAIL'})"
    )
    write_rows(args.json, "bench_chunking", goal_rows(mine, others, size, args.rounds))
    return 0


def goal_rows(mine: Result, others: dict[str, Result], size: int, rounds: int) -> list[Row]:
    """Speed (their seconds / ours: > 1 is faster) and integrity (ours / theirs) per rival."""
    note = f"{size / MB:.2f} MB, {rounds} rounds"
    rows = []
    for name, res in others.items():
        rows.append(row(f"chunking speed vs {name}", f"{name} on the same text",
                        size / MB / mine.seconds, res.seconds / mine.seconds, "> 1",
                        unit="MB/s", note=note))  # fmt: skip
    for name, res in others.items():
        theirs = share(res.cuts["all"])
        rows.append(row(f"clean cuts vs {name}", f"{name}'s clean cuts ({theirs:.2%})",
                        share(mine.cuts["all"]) * 100,
                        share(mine.cuts["all"]) / theirs if theirs else 1.0, ">= 1",
                        unit="%", note=note))  # fmt: skip
    return rows


if __name__ == "__main__":
    sys.exit(main())
