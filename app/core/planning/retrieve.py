"""The `retrieve` strategy: the parts of a document that best match a question, in their order.

Every local chat app that answers questions on a document too long for the context (LM Studio,
GPT4All's LocalDocs, Open WebUI, AnythingLLM) picks the parts relevant to the question; the
other strategies keep the same spans whatever is asked, so a fact on page 300 of a long document
reaches the model only if `map-reduce` reads all of it. Here the chunks of the plan are scored
against the question with BM25 (``bm25s``: sparse scores precomputed per term, so a question
costs one sum over a few posting lists) and the best of them are kept, in document order.

How much is kept follows the evidence, not the budget: the parts that score close to the best
(a clear winner stands alone, a flat ranking keeps several), each with the rest of its
paragraph where a part ends mid-paragraph (planned without a counter; with one, the sentences
below instead). A small model loses a fact among 1,900 tokens of
matching text; given its paragraph it answers (the needle benchmark: 15% -> 75% of questions
with the 135M model, every fact still kept). The budget is a ceiling. The earlier rule, which
fills the budget with further matches and their neighbours, stays as ``fill`` (the benchmark
compares them).

Of each match only the sentences that carry the evidence reach the model (sentence-precise
context, sentences.py). Where the question names its subject ("Quist", "the Mallory Wren": a
rare word it writes with a capital; terms.py), every part that names it is a match whatever its
score: a question that asks three things about one subject gets its three sentences, wherever
they lie, and nothing that matches only its common words ("funded", "device"). On the needle
benchmark (SmolLM2, 400k tokens, 2,048 context) this answers 85% of single-fact questions at 51
prompt tokens each (75% at 110 with whole parts and their paragraphs), and on the multi-fact
questions names as many facts as the facts alone. A plan's chunks stay the document's chunking
(shared with the cache, the index and the other plans); a match kept in part is a run of spans
inside its chunk, each counted exactly and saying why, and each kept sentence is a segment of
its own (:meth:`~app.core.planning.plan.Plan.kept_chunks`).

Terms come from a plain word analyzer (terms.py) rather than the model's tokens.

The index depends on the document's chunking and the analyzer, never on the question: it is
built once and cached with the plans (:class:`~app.core.planning.cache.PlanCache`, in memory and
on disk), so a second question on the same document only sums posting lists and sorts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from app.core.planning.chunking import Boundary, Chunk
from app.core.planning.sentences import Piece, Sentences, Titles, pieces, takes, weak_reason
from app.core.planning.terms import Subject, question_terms, subject, terms
from app.core.token_counter import TokenCounter

if TYPE_CHECKING:
    import bm25s


# The sentence a plan without a question is refused with (and a summary under `retrieve`).
NEEDS_QUESTION = (
    "retrieve needs a question to rank the document against: ask a question, or extract "
    "with an instruction"
)
NO_MATCH = "matches no term of the question"
FITS = "fits the budget"  # a document that fits is kept whole (as `refuse` words it)

# ``fill``: the best matches first, up to this share of the budget; then their neighbours, for
# the sentence before and after a fact cut at a chunk's edge; then further matches as they fit;
# then wider context around them.
FIRST_SHARE = 2 / 3

# Precise (the default): a match is kept while its score is at least this share of the best.
# On the needle benchmark 0.9, 0.8 and 0.7 answered alike (15 of 20) and kept every fact; the
# lowest keeps most of a flat ranking, where the part that answers may rank second or third.
CLOSE = 0.7
# At most this many matches are kept for their own score (a question of common words only
# scores a thousand parts alike: it gets the best few, not the budget's worth)
MOST_MATCHES = 12
# Matches looked at for the parts of a question the close ones do not answer (see _covering)
COVER_CANDIDATES = 50
# Parts of the paragraph a kept match is cut from, kept on each side at most
PASSAGE_PARTS = 2

# A run of at least this many title-like parts in a row (a table of contents, an index, a word
# list) names subjects whose text is elsewhere. BM25 favours a short part, and a one-word line
# of an index ("kluge") outscored the entry that defines the word: on the sample's "What is a
# kluge?" every part kept was a line of its two indexes, and the reply was invented. Such lines
# score this share of what they would.
LIST_RUN = 3
LIST_WEIGHT = 0.2


def _demote_lists(scores: np.ndarray, title: Titles) -> np.ndarray:
    """``scores`` with the matching parts that are lines of a list (see :data:`LIST_RUN`)
    weighted down; only matches and their neighbours are read, so a question stays fast."""
    out = scores.copy()
    for i in np.flatnonzero(scores > 0).tolist():
        if not title(i):
            continue
        run = 1
        for step in (-1, 1):
            j = i + step
            while run < LIST_RUN and title(j):
                run += 1
                j += step
        if run >= LIST_RUN:
            out[i] *= LIST_WEIGHT
    return out


@dataclass(eq=False)
class Index:
    """BM25 (Lucene's variant, ``bm25s``) over the chunks of one chunking of a document."""

    bm25: bm25s.BM25
    chunks: int
    seconds: float = 0.0  # how long it took to build

    @classmethod
    def build(cls, texts: Iterable[str]) -> Index:
        """The index of ``texts`` (a chunking's chunks, in order).

        Each chunk's terms become ids as it is read, kept as 4 bytes each: a 50 MB document is
        never held as millions of term strings at once (CJK text gives two terms a character).
        """
        t0 = time.perf_counter()
        vocab: dict[str, int] = {"": 0}  # the empty term: a vocabulary even of no words
        ids = [np.array([vocab.setdefault(t, len(vocab)) for t in terms(text)], dtype=np.int32)
               for text in texts]  # fmt: skip
        rows = ids
        if not any(len(a) for a in ids):  # no word anywhere (or no chunk): the empty term once
            rows = [np.zeros(1, dtype=np.int32)] * max(1, len(ids))  # a mean length, not 0 / 0
        model = _bm25()
        # bm25s's own build from ids (what BM25.index does after mapping tokens to ids)
        model.scores = model.build_index_from_ids(list(vocab.values()), _Ids(rows),
                                                  show_progress=False)  # fmt: skip
        model.vocab_dict = vocab
        model.unique_token_ids_set = set(vocab.values())
        return cls(model, len(ids), time.perf_counter() - t0)

    def scores(self, question: Iterable[str]) -> np.ndarray:
        """Each chunk's score for the (distinct) terms ``question``; 0 where none occurs.

        BM25 with each question term weighted by its own idf, as a TF-IDF query vector weighs
        it: a question names what it is about with its rarest words (a place, a person, a
        coined term) and says the rest in common ones ("who", "signal", "work"). Plain BM25
        adds those up, and a chunk holding four common words outranks the one chunk that holds
        the name; with the weight the name decides. On the needle benchmark's 400k-token
        document this kept 20 of 20 paraphrased facts at n_ctx 2,048 where plain BM25 kept
        16–19 (three seeds)."""
        ids = self.bm25.get_tokens_ids([t for t in dict.fromkeys(question) if t])
        out = np.zeros(self.chunks, dtype=np.float32)
        s = self.bm25.scores
        n_docs = max(1, self.chunks)
        for tid in ids:
            lo, hi = int(s["indptr"][tid]), int(s["indptr"][tid + 1])
            if lo == hi:
                continue
            df = hi - lo  # the chunks that hold the term (each once in its posting list)
            idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
            rows = s["indices"][lo:hi]
            keep = rows < self.chunks
            out[rows[keep]] += s["data"][lo:hi][keep] * np.float32(idf)
        return out

    def matched(self, term: str) -> np.ndarray:
        """The chunks that hold ``term``."""
        tid = self.bm25.vocab_dict.get(term)
        if tid is None or not term:
            return np.zeros(0, dtype=np.int64)
        indptr = self.bm25.scores["indptr"]
        rows: np.ndarray = self.bm25.scores["indices"][indptr[tid] : indptr[tid + 1]]
        return rows

    @property
    def rows(self) -> int:
        """Its weight in the plan cache's rows (~150 bytes each)."""
        s = self.bm25.scores
        size: int = s["data"].nbytes + s["indices"].nbytes + s["indptr"].nbytes
        return 1 + (size + 60 * len(self.bm25.vocab_dict)) // 150

    # ----- as arrays, for the disk cache (no pickle on the way back) -----

    def to_arrays(self) -> dict[str, np.ndarray]:
        s = self.bm25.scores
        vocab = json.dumps(self.bm25.vocab_dict, ensure_ascii=False).encode()
        return {"data": np.asarray(s["data"]), "indices": np.asarray(s["indices"]),
                "indptr": np.asarray(s["indptr"]),
                "shape": np.array([self.chunks, s["num_docs"]], dtype=np.int64),
                "vocab": np.frombuffer(vocab, dtype=np.uint8)}  # fmt: skip

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Index:
        chunks, num_docs = (int(n) for n in arrays["shape"])
        vocab = json.loads(arrays["vocab"].tobytes())
        if not isinstance(vocab, dict) or len(arrays["indptr"]) != len(vocab) + 1:
            raise ValueError("an index whose vocabulary and postings differ")  # made again
        model = _bm25()
        model.vocab_dict = vocab
        model.unique_token_ids_set = set(vocab.values())
        model.nonoccurrence_array = None  # Lucene's BM25 scores only the terms that occur
        model.scores = {"data": arrays["data"], "indices": arrays["indices"],
                        "indptr": arrays["indptr"], "num_docs": num_docs}  # fmt: skip
        return cls(model, chunks)


def _bm25() -> bm25s.BM25:
    """An empty BM25 model (Lucene's variant). bm25s loads here, not with the planner: every
    command imports the planner to list its strategies, and only a question needs BM25."""
    import bm25s  # noqa: PLC0415 (~25 ms with tqdm, for `contextlens-cli --help` too)

    return bm25s.BM25(method="lucene")


class _Ids:
    """Each chunk's term ids as bm25s reads them (lists, one chunk at a time), from arrays."""

    def __init__(self, arrays: Sequence[np.ndarray]) -> None:
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays)

    def __iter__(self) -> Iterator[list[int]]:
        return (a.tolist() for a in self.arrays)


@dataclass(frozen=True)
class Verdict:
    """What the plan does with one chunk, and why."""

    kept: bool
    reason: str
    score: float
    rank: int | None = None  # among the chunks that match the question, from 1
    terms: tuple[str, ...] = ()  # the question's words it holds
    next_to: int | None = None  # kept as context next to the chunk of this rank



@dataclass
class Selection:
    verdicts: list[Verdict] = field(default_factory=list)  # one per chunk, in order
    # chunks kept in part: their pieces, in order, covering the chunk exactly
    pieces: dict[int, list[Piece]] = field(default_factory=dict)


def kept_reason(rank: int, matching: int, score: float, words: Sequence[str]) -> str:
    return (f"rank {rank:,} of {matching:,} matching parts (score {score:.2f}; terms: "
            f"{', '.join(words)})")  # fmt: skip


def neighbour_reason(rank: int) -> str:
    return f"next to the part ranked {rank:,} (context)"


def passage_reason(rank: int) -> str:
    return f"the paragraph of the part ranked {rank:,} goes on here"


def far_reason(rank: int, matching: int, score: float, best: float) -> str:
    return (f"rank {rank:,} of {matching:,} matching parts (score {score:.2f}), under "
            f"{CLOSE:.0%} of the best ({best:.2f})")  # fmt: skip


def beyond_reason(rank: int, matching: int, score: float) -> str:
    return (f"rank {rank:,} of {matching:,} matching parts (score {score:.2f}), after the "
            f"{MOST_MATCHES} best kept")  # fmt: skip


def past_budget_reason(rank: int, matching: int, score: float) -> str:
    return f"rank {rank:,} of {matching:,} matching parts (score {score:.2f}), past the budget"


def select(
    chunks: Sequence[Chunk], index: Index, question: str, budget: int, *, fill: bool = False,
    text: str = "", counter: TokenCounter | None = None,
) -> Selection:
    """Which chunks a plan for ``question`` keeps within ``budget`` tokens, each with why.

    A document that fits the budget is kept whole. Otherwise the chunks that match the question
    are ranked by score (ties: the earlier first). By default (precise) the matches scoring at
    least :data:`CLOSE` of the best are kept, best first while they fit (at most
    :data:`MOST_MATCHES`), then the rest of each one's paragraph where it was cut mid-paragraph
    (:data:`PASSAGE_PARTS` parts a side at most), or the text after it where it is a heading
    (:func:`is_title`; ``text`` is the document). With ``fill`` the best are kept while they
    fill up to
    :data:`FIRST_SHARE` of the budget; then each one's next and previous chunk, best match
    first (a fact cut at a chunk's edge, the sentence that introduces it); then further matches
    by rank, as they fit; then the context around every kept match widens, a chunk on each side
    at a time, best match first, until nothing more fits. The plan lays them out in document
    order, as any other plan.

    With ``counter`` (and ``text``), precise context is sentence-precise: every part that holds
    the question's subject (:func:`~app.core.planning.terms.subject`) is a match too, and of
    each match only the sentences that carry the evidence are kept
    (:func:`~app.core.planning.sentences.takes`), with those they lean on; no paragraph around
    them. The chunks kept in part are in :attr:`Selection.pieces`.
    """
    wanted = question_terms(question)
    scores = index.scores(wanted)
    title = Titles(chunks, text)
    if text:
        scores = _demote_lists(scores, title)
    n = len(chunks)
    ranked = sorted((i for i in range(n) if scores[i] > 0), key=lambda i: (-scores[i], i))
    rank = {i: r + 1 for r, i in enumerate(ranked)}
    words: dict[int, list[str]] = {}
    holds: dict[int, set[str]] = {}  # chunk -> the question's terms it holds
    rarity: dict[str, int] = {}  # term -> how many chunks hold it
    for term, word in wanted.items():
        found = index.matched(term).tolist()
        rarity[term] = len(found)
        for i in found:
            if i < n:
                holds.setdefault(i, set()).add(term)
                if word not in words.setdefault(i, []):
                    words[i].append(word)
    about = Subject(rarity=rarity)
    if sum(c.tokens for c in chunks) <= budget:
        kept: dict[int, int | None] = dict.fromkeys(range(n))
    elif fill:
        kept = _within(chunks, ranked, rank, budget)
    else:
        precise = counter is not None and bool(text)
        if precise:
            about = subject(question, ranked, holds, rarity)
        named = [i for i in ranked if about.terms & holds.get(i, set())]
        kept = _precise(chunks, ranked, rank, scores, budget, title=title,
                        covers=_covering(ranked, holds, rarity), first=named,
                        passages=not precise)  # fmt: skip

    matching = len(ranked)
    best = float(scores[ranked[0]]) if ranked else 0.0
    full = sum(1 for v in kept.values() if v is None) >= MOST_MATCHES  # as many as it keeps
    around = neighbour_reason if fill else passage_reason
    out = Selection()
    for i in range(n):
        score = float(scores[i]) if i < len(scores) else 0.0
        r, found = rank.get(i), tuple(words.get(i, ()))
        held = kept.get(i)
        if held is not None:
            out.verdicts.append(Verdict(True, around(held), score, r, found, held))
        elif i in kept:
            reason = FITS if r is None else kept_reason(r, matching, score, found)
            out.verdicts.append(Verdict(True, reason, score, r, found))
        elif r is not None:
            if fill:
                reason = past_budget_reason(r, matching, score)
            elif score < CLOSE * best:
                reason = far_reason(r, matching, score, best)
            elif full:
                reason = beyond_reason(r, matching, score)
            else:
                reason = past_budget_reason(r, matching, score)
            out.verdicts.append(Verdict(False, reason, score, r, found))
        else:
            out.verdicts.append(Verdict(False, NO_MATCH, 0.0))
    if counter is not None and text and not fill and len(kept) < n:
        split = Sentences(chunks, text)
        idf = {t: float(np.log1p((n - df + 0.5) / (df + 0.5))) for t, df in rarity.items()}
        matches = sorted(kept, key=rank.__getitem__)
        floor = CLOSE * max((float(scores[h]) for h in matches), default=0.0)
        taken = takes(matches, rank, scores, split, wanted=wanted, idf=idf, title=title,
                      subject=about, floor=floor)  # fmt: skip
        out.pieces = pieces(taken, split, budget, counter, verdicts=out.verdicts, rank=rank)
        chosen = {t.at[0] for t in taken if t.next_to is None}
        for h in matches:  # a match none of whose sentences scored or fit
            if h not in out.pieces:
                v = out.verdicts[h]
                why = (past_budget_reason(rank[h], matching, v.score) if h in chosen else
                       weak_reason(rank[h], matching, v.score,
                                   [wanted[t] for t in about.terms], name=about.name))
                out.verdicts[h] = replace(v, kept=False, reason=why)
    return out


def _precise(
    chunks: Sequence[Chunk], ranked: Sequence[int], rank: dict[int, int], scores: np.ndarray,
    budget: int, *, title: Titles, covers: Sequence[int] = (), first: Sequence[int] = (),
    passages: bool = True,
) -> dict[int, int | None]:  # fmt: skip
    """The chunks kept of a document over the budget by the evidence (see :func:`select`):
    chunk -> the rank of the match whose paragraph it continues, None for a match.
    ``passages``: False keeps the matches alone (sentence-precise context picks within them).
    ``covers``: further matches that hold what the question asks and the close ones do not;
    ``first``: matches kept before any other, whatever their score (those that name the
    question's subject)."""
    n = len(chunks)
    kept: dict[int, int | None] = {}
    used = 0
    if not ranked:
        return kept
    floor = CLOSE * float(scores[ranked[0]])
    close = [i for i in ranked[:MOST_MATCHES] if float(scores[i]) >= floor]
    others = sorted(dict.fromkeys([*close, *covers]), key=rank.__getitem__)
    for i in dict.fromkeys([*first, *others]):
        if len(kept) >= MOST_MATCHES:
            break
        if used + chunks[i].tokens <= budget:
            kept[i] = None
            used += chunks[i].tokens
    if not passages:
        return kept
    for h in sorted(kept, key=rank.__getitem__):  # the matches kept, best first
        # the paragraph goes on past a chunk that ends on a weaker boundary than its end; a
        # heading's section goes on after it, up to the next heading
        for step in (1, -1):
            j = h
            section = step == 1 and title(h)
            for _ in range(PASSAGE_PARTS):
                edge = chunks[j].boundary if step == 1 else (
                    chunks[j - 1].boundary if j > 0 else Boundary.END)  # fmt: skip
                goes_on = edge < Boundary.PARAGRAPH or section
                j += step
                if not goes_on or not 0 <= j < n or (section and title(j)):
                    break
                if j in kept:
                    continue
                if used + chunks[j].tokens > budget:
                    break
                kept[j] = rank[h]
                used += chunks[j].tokens
    return kept


def _covering(ranked: Sequence[int], holds: dict[int, set[str]],
              rarity: dict[str, int]) -> list[int]:  # fmt: skip
    """Matches that answer another part of the question: a question that needs several
    passages ("who made the first lantern, where was the second made …") scores the passage of
    one part highest, and the others fall under :data:`CLOSE`. Among the best
    :data:`COVER_CANDIDATES` matches that hold the rarest term the best match holds (what the
    question is about), each one that holds a question term neither the best match nor a match
    taken here before it holds, best first."""
    if not ranked:
        return []
    best = holds.get(ranked[0], set())
    if not best:
        return []
    anchor = min(best, key=lambda t: (rarity.get(t, 0), t))
    covered = set(best)
    out = []
    for i in ranked[1:COVER_CANDIDATES]:
        terms_here = holds.get(i, set())
        if anchor in terms_here and terms_here - covered:
            out.append(i)
            covered |= terms_here
    return out


def _within(
    chunks: Sequence[Chunk], ranked: Sequence[int], rank: dict[int, int], budget: int
) -> dict[int, int | None]:
    """The chunks kept of a document over the budget: chunk -> the rank of the match it is
    kept next to, None for a match kept for its own rank (see :func:`select`)."""
    n = len(chunks)
    kept: dict[int, int | None] = {}
    used = 0

    def take(i: int, next_to: int | None, limit: float = budget) -> bool:
        nonlocal used
        if i in kept or used + chunks[i].tokens > limit:
            return False
        kept[i] = next_to
        used += chunks[i].tokens
        return True

    # the next chunk not kept on each side of a match (None: that side cannot grow: the edge of
    # the document, or a chunk that does not fit, which never will as the budget only fills)
    sides: dict[int, list[int | None]] = {}

    def widen(hits: Sequence[int]) -> bool:
        """One chunk more on each side of each of ``hits`` where it fits; whether any did."""
        grew = False
        for h in hits:
            ends = sides.setdefault(h, [h + 1, h - 1])
            for k, step in ((0, 1), (1, -1)):  # after a match first: its text goes on there
                j = ends[k]
                while j is not None and 0 <= j < n and j in kept:
                    j += step  # past what is kept already, around this match or another
                if j is None or not 0 <= j < n or not take(j, rank[h]):
                    ends[k] = None
                    continue
                ends[k], grew = j + step, True
        return grew

    for i in ranked:
        if chunks[i].tokens > budget:
            continue  # never fits (the plan says so: one character of too many tokens)
        if not take(i, None, budget * FIRST_SHARE if kept else budget):
            break
    widen([i for i in ranked if i in kept])
    for i in ranked:
        take(i, None)
    hits = [i for i in ranked if kept.get(i, 0) is None]
    while widen(hits):
        pass
    return kept
