"""Overflow strategies: for a document and a token budget, the plan of what reaches the model.

Every strategy is a pure function of (chunks, budget, options) and returns a :class:`Plan`: kept
and dropped spans with their token counts and a reason each, and for multi-pass strategies the
sequence of windows. Spans are made of chunks, and each chunk is evaluated as its own segment, so
a span's tokens are the sum of its chunks' exact counts and a plan's totals are exact.

Single-pass strategies (refuse, head, tail, middle, entropy) keep at most ``budget`` tokens.
Multi-pass strategies (rolling, semantic, map-reduce) let every chunk reach the model, each
window at most ``budget`` tokens. `retrieve` (single pass) keeps the chunks that best match a
question (retrieve.py); without one its plan is refused with the sentence that says so.
"""

from __future__ import annotations

import re
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from app.core.documents import Document
from app.core.engine.types import ContextOverflowError
from app.core.planning.cache import CacheStats, PlanCache, doc_id, text_id
from app.core.planning.chunking import Boundary, Chunk, chunk_document, sliding_windows
from app.core.planning.frame import Budget, FrameSource, document_budget
from app.core.planning.plan import Plan, PlanWindow, Span
from app.core.planning.retrieve import NEEDS_QUESTION, Index, select
from app.core.planning.sentences import Piece
from app.core.planning.terms import ANALYZER
from app.core.tokens import TokenCounter, counter_fingerprint


@dataclass(frozen=True)
class PlanOptions:
    overlap: float = 0.15  # semantic windows share about this share of their tokens
    chunk_tokens: int | None = None  # unit size; None: chosen from the budget
    # what `retrieve` ranks the document against (an ask's question, an extract's instruction);
    # the other strategies plan the same whatever it is, and their plans are cached without it
    question: str = ""
    # `retrieve`: fill the budget with further matches and their neighbours (the earlier rule)
    # instead of keeping what scores close to the best match and its paragraph
    fill: bool = False


StrategyFn = Callable[..., "_Draft"]  # (chunks, text, budget, options) -> what it decides


@dataclass(frozen=True)
class _Note:
    """A scored chunk's figures, carried into its span (see :class:`Span`)."""

    score: float
    rank: int | None
    terms: tuple[str, ...]
    next_to: int | None


@dataclass
class _Draft:
    """What a strategy decides: per chunk kept or a drop reason; windows for multi-pass."""

    keep_reason: str
    drop: dict[int, str] = field(default_factory=dict)  # chunk index -> reason
    windows: list[tuple[int, int]] = field(default_factory=list)  # (first, last) chunk index
    refused: str | None = None
    window_ends_are_cuts: bool = True  # False for rolling: the next chunk follows at once
    keep_reasons: dict[int, str] = field(default_factory=dict)  # a kept chunk's own reason
    notes: dict[int, _Note] = field(default_factory=dict)  # scored chunks' figures
    # chunks kept in part (`retrieve`'s sentences): their pieces, each a span of its own
    pieces: dict[int, list[Piece]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# the strategies


def _refuse(chunks: Sequence[Chunk], text: str, budget: int, opts: PlanOptions) -> _Draft:
    total = sum(c.tokens for c in chunks)
    if total <= budget:
        return _Draft("fits the budget")
    # the chunks' sum (what the model would evaluate) can be a token or two above the whole
    # text's count shown as the document's total: said as the chunks', not the document's
    message = f"the document's chunks need {total:,} tokens; the budget is {budget:,}"
    return _Draft("", dict.fromkeys(range(len(chunks)), message), refused=message)


def _head(chunks: Sequence[Chunk], text: str, budget: int, opts: PlanOptions) -> _Draft:
    n = _fit_prefix(chunks, budget)
    reason = f"after the first {budget:,} tokens (head)"
    return _Draft("the start of the document", dict.fromkeys(range(n, len(chunks)), reason))


def _tail(chunks: Sequence[Chunk], text: str, budget: int, opts: PlanOptions) -> _Draft:
    n = _fit_prefix(chunks[::-1], budget)
    reason = f"before the last {budget:,} tokens (tail)"
    return _Draft("the end of the document", dict.fromkeys(range(len(chunks) - n), reason))


def _middle(chunks: Sequence[Chunk], text: str, budget: int, opts: PlanOptions) -> _Draft:
    head = _fit_prefix(chunks, budget // 2)
    used = sum(c.tokens for c in chunks[:head])
    tail = _fit_prefix(chunks[head:][::-1], budget - used)
    reason = "the middle of the document, dropped to keep its start and end"
    return _Draft(
        "the start or end of the document",
        dict.fromkeys(range(head, len(chunks) - tail), reason),
    )


def _rolling(chunks: Sequence[Chunk], text: str, budget: int, opts: PlanOptions) -> _Draft:
    """The windows the model is called on, in order: runs of consecutive chunks that fill the
    budget, each chunk in one. The job streams them through the KV ring, each appended after
    the last one's reply (app.core.jobs.streaming), so the context goes on at a window's end."""
    windows = [(w.first, w.last) for w in sliding_windows(chunks, budget, 0.0)]
    return _Draft("passes through the rolling window", windows=windows, window_ends_are_cuts=False)


def _semantic(chunks: Sequence[Chunk], text: str, budget: int, opts: PlanOptions) -> _Draft:
    windows = [(w.first, w.last) for w in sliding_windows(chunks, budget, opts.overlap)]
    return _Draft("in a sliding window over semantic chunks", windows=windows)


def _map_reduce(chunks: Sequence[Chunk], text: str, budget: int, opts: PlanOptions) -> _Draft:
    windows = [(w.first, w.last) for w in sliding_windows(chunks, budget, 0.0)]
    return _Draft("mapped in its own pass, then reduced", windows=windows)


def _entropy(chunks: Sequence[Chunk], text: str, budget: int, opts: PlanOptions) -> _Draft:
    scores = information_scores(chunks, text)
    total = sum(c.tokens for c in chunks)
    drop: dict[int, str] = {}
    for i in sorted(range(len(chunks)), key=lambda i: (scores[i][0], -i)):
        if total <= budget:
            break
        drop[i] = scores[i][1]
        total -= chunks[i].tokens
    return _Draft("more informative than what was dropped", drop)


def _retrieve(
    chunks: Sequence[Chunk], text: str, budget: int, opts: PlanOptions, *,
    index: Index | None = None, counter: TokenCounter | None = None,
) -> _Draft:  # fmt: skip
    """The chunks that best match ``opts.question`` (see retrieve.py); ``index``: the chunks'
    BM25 index, as the planner caches it (built here when not given); ``counter``: counts the
    sentences kept of a match (without it, matches are kept whole)."""
    question = opts.question.strip()
    if not question:
        return _Draft("", dict.fromkeys(range(len(chunks)), NEEDS_QUESTION),
                      refused=NEEDS_QUESTION)  # fmt: skip
    if index is None:
        index = Index.build([text[c.start : c.end] for c in chunks])
    draft = _Draft("")
    chosen = select(chunks, index, question, budget, fill=opts.fill, text=text, counter=counter)
    draft.pieces = chosen.pieces
    for c, v in zip(chunks, chosen.verdicts, strict=True):
        if v.kept:
            draft.keep_reasons[c.index] = v.reason
        else:
            draft.drop[c.index] = v.reason
        draft.notes[c.index] = _Note(v.score, v.rank, v.terms, v.next_to)
    return draft


STRATEGIES: dict[str, StrategyFn] = {
    "refuse": _refuse,
    "head": _head,
    "tail": _tail,
    "middle": _middle,
    "rolling": _rolling,
    "semantic": _semantic,
    "entropy": _entropy,
    "map-reduce": _map_reduce,
    "retrieve": _retrieve,
}
MULTI_PASS = frozenset({"rolling", "semantic", "map-reduce"})
# Strategies whose plan depends on the question: planned once per question, and refused
# without one (a summary has none).
QUESTION_STRATEGIES = frozenset({"retrieve"})


def question_for(strategy: str, question: str) -> str:
    """The question a plan of ``strategy`` is made for: "" where the strategy ignores it, so
    that its plans (and their cache entries) are the same whatever was asked."""
    return question.strip() if strategy in QUESTION_STRATEGIES else ""


def _fit_prefix(chunks: Sequence[Chunk], budget: int) -> int:
    """How many leading chunks fit in ``budget``."""
    used = 0
    for n, c in enumerate(chunks):
        if used + c.tokens > budget:
            return n
        used += c.tokens
    return len(chunks)


# ---------------------------------------------------------------------------------------------
# information scores for `entropy`

_SPACE_RUN = re.compile(r"\s+")
_DIGITS = re.compile(r"\d+")


def information_scores(chunks: Sequence[Chunk], text: str) -> list[tuple[float, str]]:
    """(score, reason) per chunk; low scores are dropped first.

    Whitespace scores 0; a repeat of earlier text (ignoring case and spacing) 0.05, the first
    occurrence being kept; boilerplate, text that recurs three or more times differing only in
    its numbers (page headers and footers), 0.1 everywhere; anything else the share of its bytes
    that zlib cannot predict from the 32 KB before it.
    """
    norm = [_SPACE_RUN.sub(" ", text[c.start : c.end]).strip().lower() for c in chunks]
    shapes: dict[str, set[str]] = {}
    shape_count: Counter[str] = Counter()
    for s in norm:
        if s:
            shape = _DIGITS.sub("#", s)
            shapes.setdefault(shape, set()).add(s)
            shape_count[shape] += 1
    seen: dict[str, int] = {}
    out: list[tuple[float, str]] = []
    for c, s in zip(chunks, norm, strict=True):
        raw = text[c.start : c.end]
        if not s:
            out.append((0.0, "whitespace only"))
            continue
        shape = _DIGITS.sub("#", s)
        if shape_count[shape] >= 3 and len(shapes[shape]) >= 2:
            out.append((0.1, f"boilerplate: the same line recurs {shape_count[shape]} times"))
            continue
        if s in seen:
            first = chunks[seen[s]]
            out.append((0.05, f"repeats the text at characters {first.start:,}–{first.end:,}"))
            continue
        seen[s] = c.index
        novelty = _novelty(text, c.start, raw)
        space = sum(ch.isspace() for ch in raw) / len(raw)
        if space > 0.6:
            out.append((min(novelty, 0.15), f"mostly whitespace ({space:.0%})"))
        else:
            out.append((novelty, f"low information: {novelty:.0%} new after compression"))
    return out


def _novelty(text: str, start: int, raw: str) -> float:
    """Compressed size of ``raw`` given the preceding 32 KB, relative to its plain size."""
    data = raw.encode("utf-8", "replace")
    context = text[max(0, start - 32_768) : start].encode("utf-8", "replace")[-32_768:]
    comp = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, context or b"\0")
    size = len(comp.compress(data)) + len(comp.flush())
    return min(1.0, size / max(1, len(data)))


# ---------------------------------------------------------------------------------------------
# planning


# `retrieve`'s parts: paragraphs, a longer one cut into pieces of at most this many tokens
QUESTION_UNIT = 128


def unit_tokens(strategy: str, budget: int, opts: PlanOptions) -> int:
    """The chunk size a strategy plans with: fine for single pass, larger for windows."""
    if opts.chunk_tokens:
        return max(1, min(opts.chunk_tokens, budget))
    if strategy == "map-reduce":
        return max(1, budget)
    if strategy in MULTI_PASS:
        return max(1, min(budget, max(budget // 4, 32)))
    if strategy in QUESTION_STRATEGIES:
        # one chunking whatever the budget: each question's room differs by its length, and
        # follow-ups keep resident only the chunks their plans share (and reuse one index)
        return max(1, min(budget, QUESTION_UNIT))
    return max(1, min(budget, max(budget // 8, 32), 256))


def paragraph_units(strategy: str) -> Boundary | None:
    """PARAGRAPH where no chunk of ``strategy``'s plans may hold the end of one paragraph and
    the start of the next: entropy judges paragraphs one by one, and `retrieve` keeps the
    passage that matches without the text of the next one around it. None: chunks fill up."""
    return Boundary.PARAGRAPH if strategy in ("entropy", "retrieve") else None


def needle_spans(text: str, needles: Sequence[str]) -> list[tuple[int, int]]:
    """Character ranges of every occurrence of each needle text (for needle retention)."""
    found: list[tuple[int, int]] = []
    for needle in needles:
        at = text.find(needle)
        while needle and at >= 0:
            found.append((at, at + len(needle)))
            at = text.find(needle, at + 1)
    return found


REMEMBERED_PLANS = 16  # plans a planner of its own keeps: a 50 MB entropy plan holds ~90k spans


class Planner:
    """Plans for one document and counter; chunkings are shared between strategies.

    Chunkings, plans and the whole-document count are kept in a :class:`PlanCache`: this
    planner's own, in memory, unless a shared one is given. A shared cache names the document
    by its sha256 and the counter by its fingerprint, so another planner of the same bytes
    (reopened, at any path; in another process, through the disk) answers without counting
    again. ``doc`` may be a function that loads the document: it is called only when work is
    not found done, and then ``doc_id`` (see :func:`app.core.planning.cache.doc_id`) names it.

    Plans made elsewhere (another process, with the same document and counter) can be handed
    in with :meth:`remember`: asking for the same strategy and budget then returns them as they
    are, without chunking the document again.
    """

    def __init__(
        self,
        doc: Document | str | Callable[[], Document],
        counter: TokenCounter,
        *,
        cache: PlanCache | None = None,
        doc_id: str | None = None,
    ) -> None:
        self._doc = None if callable(doc) else doc
        self._load = doc if callable(doc) else None
        self.counter = counter
        fingerprint = counter_fingerprint(counter)
        if cache is None or fingerprint is None:  # nothing names this counter elsewhere
            self.cache, self._ids = PlanCache(max_plans=REMEMBERED_PLANS), ("", "")
        else:
            if doc_id is None and self._doc is None:
                raise ValueError("a document loaded on demand needs its doc_id")
            self.cache, self._ids = cache, (doc_id or "", fingerprint)
        self._named = doc_id is not None or cache is None or fingerprint is None

    @property
    def doc(self) -> Document | str:
        if self._doc is None:
            assert self._load is not None
            self._doc = self._load()
        return self._doc

    @property
    def text(self) -> str:
        doc = self.doc
        return doc if isinstance(doc, str) else doc.text

    @property
    def stats(self) -> CacheStats:
        """What was counted and planned, and what was found done (shared with the cache)."""
        return self.cache.stats

    def _key(self, *parts: object) -> tuple[object, ...]:
        if not self._named:  # a shared cache and a document not yet named: name it now
            doc = self.doc
            name = text_id(doc) if isinstance(doc, str) else doc_id(doc.sha256, doc.format)
            self._ids, self._named = (name, self._ids[1]), True
        return (*self._ids, *parts)

    def remember(self, plan: Plan, opts: PlanOptions | None = None) -> None:
        """Answer ``plan(plan.strategy, plan.budget, opts)`` with ``plan``, and share its chunks.

        The caller vouches that ``plan`` was made for this document and counter.
        """
        opts = opts or PlanOptions(question=plan.question)
        self.cache.remember_plan(self._plan_key(plan.strategy, plan.budget, opts), plan)
        if plan.budget >= 1 and plan.strategy in STRATEGIES:
            split_at = paragraph_units(plan.strategy)
            unit = unit_tokens(plan.strategy, plan.budget, opts)
            self.cache.remember_chunks(self._chunks_key(unit, split_at), list(plan.chunks))

    def chunks(self, max_tokens: int, split_at: Boundary | None = None) -> list[Chunk]:
        return self.cache.chunks(
            self._chunks_key(max_tokens, split_at),
            lambda: chunk_document(self.doc, self.counter, max_tokens, split_at=split_at),
        )

    def count(self) -> int:
        """The tokens of the whole document."""
        return self.cache.count(self._key("count"), lambda: self.counter.count(self.text))

    def index(self, max_tokens: int, split_at: Boundary | None = None) -> Index:
        """The BM25 index of a chunking (`retrieve`): the same for every question, so it is
        built once and kept in the cache (in memory, and on disk with a disk cache)."""
        key = self._key("index", max_tokens, -1 if split_at is None else int(split_at), ANALYZER)

        def build() -> Index:
            text = self.text
            return Index.build([text[c.start : c.end] for c in self.chunks(max_tokens, split_at)])

        return self.cache.index(key, build)

    def plan(self, strategy: str, budget: int, opts: PlanOptions | None = None) -> Plan:
        if strategy not in STRATEGIES:
            names = ", ".join(STRATEGIES)
            raise ValueError(f"unknown strategy {strategy!r} (choose one of {names})")
        opts = opts or PlanOptions()
        return self.cache.plan(
            self._plan_key(strategy, budget, opts), lambda: self._make(strategy, budget, opts)
        )

    def _chunks_key(self, max_tokens: int, split_at: Boundary | None) -> tuple[object, ...]:
        return self._key("chunks", max_tokens, -1 if split_at is None else int(split_at))

    def _plan_key(self, strategy: str, budget: int, opts: PlanOptions) -> tuple[object, ...]:
        question = question_for(strategy, opts.question)
        fill = opts.fill and strategy in QUESTION_STRATEGIES
        return self._key("plan", strategy, budget, opts.overlap, opts.chunk_tokens, question,
                         *(("fill",) if fill else ()))  # fmt: skip

    def _make(self, strategy: str, budget: int, opts: PlanOptions) -> Plan:
        t0 = time.perf_counter()
        question = question_for(strategy, opts.question)
        if budget < 1:
            total = self.count()
            text = self.text
            message = f"nothing of the document fits: the budget is {budget:,} tokens"
            dropped = (Span(0, len(text), total, message),) if text else ()
            return Plan(strategy, budget, total, (), dropped, refused=message,
                        boundary_integrity=1.0, seconds=time.perf_counter() - t0,
                        question=question, document_tokens=total)  # fmt: skip
        split_at = paragraph_units(strategy)
        unit = unit_tokens(strategy, budget, opts)
        chunks = self.chunks(unit, split_at)
        extra: dict[str, Index | TokenCounter] = {}
        if strategy in QUESTION_STRATEGIES and question:
            extra["index"] = self.index(unit, split_at)
            extra["counter"] = self.counter
        draft = STRATEGIES[strategy](chunks, self.text, budget, opts, **extra)
        draft = _drop_oversize(draft, chunks, budget)
        plan = _assemble(strategy, budget, chunks, draft, time.perf_counter() - t0)
        # the whole text's count beside the chunks' sum: the one total a face says (plan.py)
        return replace(plan, question=question, document_tokens=self.count())


def plan_for(
    planner: Planner,
    strategy: str,
    model: FrameSource,
    *,
    instruction: str,
    n_ctx: int,
    reserve: int,
    question: str = "",
) -> Plan:
    """The plan of ``strategy`` within the budget the model's prompt and the reply leave
    (for ``question``, where the strategy ranks the document against one: `retrieve`).

    When they leave nothing, every strategy's plan is refused with the preflight's sentence
    (``prompt needs N tokens, context is M (reply reserve R)``), as the job will refuse: a
    plan of one token there would show a document reaching the model that never does.
    """
    budget = document_budget(model, n_ctx=n_ctx, reserve=reserve, counter=planner.counter,
                             task=instruction)  # fmt: skip
    return plan_within(planner, strategy, budget, question=question)


def plan_within(
    planner: Planner, strategy: str, budget: Budget, *, question: str = "", overlap: float = 0.15
) -> Plan:
    """The plan of ``strategy`` in what ``budget`` leaves for the document; refused with the
    preflight's sentence when it leaves nothing (see :func:`plan_for`)."""
    opts = PlanOptions(question=question, overlap=overlap)
    if budget.available >= 1:
        return planner.plan(strategy, budget.available, opts)
    message = str(ContextOverflowError(budget.template_tokens + 1, budget.n_ctx, budget.reserve))
    nothing = planner.plan(strategy, 0, opts)
    return replace(nothing, refused=message,
                   dropped=tuple(replace(s, reason=message) for s in nothing.dropped))  # fmt: skip


def plan(
    doc: Document | str,
    counter: TokenCounter,
    budget: int,
    strategy: str,
    opts: PlanOptions | None = None,
) -> Plan:
    return Planner(doc, counter).plan(strategy, budget, opts)


def _drop_oversize(draft: _Draft, chunks: Sequence[Chunk], budget: int) -> _Draft:
    """Chunks that alone exceed the budget (one character of many tokens) never reach the model."""
    over = [c.index for c in chunks if c.tokens > budget]
    if not over:
        return draft
    for i in over:
        draft.drop[i] = f"a single character here needs {chunks[i].tokens} tokens, over the budget"
    windows: list[tuple[int, int]] = []
    for a, b in draft.windows:
        inner = [i for i in over if a <= i <= b]
        for lo, hi in zip([a] + [i + 1 for i in inner], [i - 1 for i in inner] + [b], strict=True):
            if lo <= hi:
                windows.append((lo, hi))
    draft.windows = windows
    return draft


_APART = _Note(float("nan"), None, (), None)  # equal to no note (NaN): nothing merges with a piece


def _assemble(
    strategy: str, budget: int, chunks: Sequence[Chunk], draft: _Draft, seconds: float
) -> Plan:
    kept: list[Span] = []
    dropped: list[Span] = []
    notes: dict[int, _Note] = draft.notes
    last_note: list[_Note | None] = [None, None]  # of the last kept and the last dropped span
    for c in chunks:  # merge runs of chunks with the same fate, reason and figures into one span
        if c.index in draft.pieces:  # kept in part: each piece a span, merged with none
            for p in draft.pieces[c.index]:
                (kept if p.kept else dropped).append(Span(
                    p.start, p.end, p.tokens, p.reason, p.score, p.rank, p.terms, p.next_to))
            last_note = [_APART, _APART]
            continue
        reason = draft.drop.get(c.index)
        side = 0 if reason is None else 1
        target = kept if reason is None else dropped
        if reason is None:
            reason = draft.keep_reasons.get(c.index, draft.keep_reason)
        note = notes.get(c.index)
        last = target[-1] if target else None
        if (last is not None and last.end == c.start and last.reason == reason
                and last_note[side] == note):  # fmt: skip
            target[-1] = (Span(last.start, c.end, last.tokens + c.tokens, reason) if note is None
                          else replace(last, end=c.end, tokens=last.tokens + c.tokens))
        elif note is None:
            target.append(Span(c.start, c.end, c.tokens, reason))
        else:
            target.append(Span(c.start, c.end, c.tokens, reason, note.score, note.rank,
                               note.terms, note.next_to))  # fmt: skip
        last_note[side] = note
    windows = tuple(
        PlanWindow(chunks[a].start, chunks[b].end, sum(c.tokens for c in chunks[a : b + 1]), a, b)
        for a, b in draft.windows
    )
    return Plan(
        strategy=strategy,
        budget=budget,
        total_tokens=sum(c.tokens for c in chunks),
        kept=tuple(kept),
        dropped=tuple(dropped),
        windows=windows,
        refused=draft.refused,
        boundary_integrity=_integrity(chunks, draft),
        seconds=seconds,
        chunks=tuple(chunks),
    )


def _integrity(chunks: Sequence[Chunk], draft: _Draft) -> float:
    """Share of the plan's cut points that fall on a sentence or stronger boundary."""
    cuts: set[int] = set()  # chunk index whose end is a cut
    for i in range(len(chunks) - 1):
        if (i in draft.drop) != (i + 1 in draft.drop):
            cuts.add(i)
    for a, b in draft.windows:
        if a > 0:
            cuts.add(a - 1)
        if b < len(chunks) - 1 and draft.window_ends_are_cuts:
            cuts.add(b)
    if not cuts:
        return 1.0
    return sum(chunks[i].boundary >= Boundary.SENTENCE for i in cuts) / len(cuts)
