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
context). Where the question names its subject ("Quist", "the Mallory Wren": a rare word it
writes with a capital), every part that names it is a match whatever its score, and the
sentences that name it are the evidence: a question that asks three things about one subject
gets its three sentences, wherever they lie, and nothing that matches only its common words
("funded", "device"). Otherwise the subject is the rarest word of the best match that holds a
rare one, and a sentence is evidence when it holds that word or two of the question's words.
Each keeps the sentence it leans on: the one before where it starts by pointing back ("It",
"But"), the one after where it ends in a colon or reads as a heading, and after a sentence that
names the subject, those that go on about it ("Its hull ..."); a heading keeps the first
sentence of its text. On the needle benchmark (SmolLM2, 400k tokens, 2,048 context) this
answers 85% of single-fact questions at 51 prompt tokens each (75% at 110 with whole parts and
their paragraphs), and on the multi-fact questions names as many facts as the facts alone.
A plan's chunks stay the document's chunking (shared with the cache,
the index and the other plans); a match kept in part is a run of spans inside its chunk, each
counted exactly and saying why, and each kept sentence is a segment of its own
(:meth:`~app.core.planning.plan.Plan.kept_chunks`).

Terms come from a plain word analyzer rather than the model's tokens: BM25 wants words whose
forms a question and the document share ("edited" and "editor" both reach "edit"), which
subword pieces are not. It treats Chinese, Japanese and Korean (no spaces between words) as
single characters and pairs of characters, and Latin and other spaced scripts as words.

The index depends on the document's chunking and the analyzer, never on the question: it is
built once and cached with the plans (:class:`~app.core.planning.cache.PlanCache`, in memory and
on disk), so a second question on the same document only sums posting lists and sorts.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
import Stemmer

from app.core.planning.chunking import Boundary, Chunk
from app.core.token_counter import TokenCounter

if TYPE_CHECKING:
    import bm25s

# The analyzer's name in cache keys: an index built by an older analyzer is never read.
ANALYZER = "words-1"

# The sentence a plan without a question is refused with (and a summary under `retrieve`).
NEEDS_QUESTION = (
    "retrieve needs a question to rank the document against: ask a question, or extract "
    "with an instruction"
)
NO_MATCH = "matches no term of the question"
FITS = "fits the budget"  # a document that fits is kept whole (as `refuse` words it)
BLANK = "blank space before the first excerpt"  # see _trimmed

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
# A title: a line of at most this many words without a sentence's end. A question's words often
# match a heading best ("3. Revision History"), and the heading alone answers nothing: its
# section's text continues it.
TITLE_WORDS = 12
_SENTENCE_END = re.compile(r"[.!?;:。！？；：…\"'”’)\]]\s*$")
# ...or one that ends on a word class, as a dictionary's headword does (":cracker: n.",
# ":grok: /grok/, vt."): after a colon, comma, slash or bracket, a word of at most three letters
# and its full stop ("It is a cat." stays a sentence).
_ABBREVIATION_END = re.compile(r"[:,/)\]]\s+[^\W\d_]{1,3}\.$")


def is_title(text: str) -> bool:
    """Whether ``text`` reads as a heading: one short line that does not end a sentence (or
    ends on an abbreviation)."""
    line = text.strip()
    return bool(line) and "\n" not in line and len(line.split()) <= TITLE_WORDS and (
        not _SENTENCE_END.search(line) or bool(_ABBREVIATION_END.search(line)))  # fmt: skip


# A run of at least this many title-like parts in a row (a table of contents, an index, a word
# list) names subjects whose text is elsewhere. BM25 favours a short part, and a one-word line
# of an index ("kluge") outscored the entry that defines the word: on the sample's "What is a
# kluge?" every part kept was a line of its two indexes, and the reply was invented. Such lines
# score this share of what they would.
LIST_RUN = 3
LIST_WEIGHT = 0.2


class _Titles:
    """Whether part ``j`` of ``chunks`` reads as a heading (:func:`is_title`), each part read
    once however many steps ask; a part outside the chunking, or any part of an unknown text,
    is none."""

    def __init__(self, chunks: Sequence[Chunk], text: str) -> None:
        self._chunks, self._text = chunks, text
        self._seen: dict[int, bool] = {}

    def __call__(self, j: int) -> bool:
        if j not in self._seen:
            chunks = self._chunks
            self._seen[j] = bool(self._text) and 0 <= j < len(chunks) and is_title(
                self._text[chunks[j].start : chunks[j].end])  # fmt: skip
        return self._seen[j]


def _demote_lists(scores: np.ndarray, title: _Titles) -> np.ndarray:
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

# Han, kana, Hangul syllables and their extensions: scripts written without spaces between words
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002ebef"
_TOKEN = re.compile(f"(?P<cjk>[{_CJK}]+)|(?P<word>[^\\W_{_CJK}]+)")

# English function words (NLTK's list): they match every part of a document and say nothing
# of what a question is about. Question words are among them.
_STOP_WORDS = """
    a about above after again against ain all am an and any are aren arent as at be because been
    before being below between both but by can couldn couldnt d did didn didnt do does doesn
    doesnt doing don dont down during each few for from further had hadn hadnt has hasn hasnt
    have haven havent having he her here hers herself him himself his how i if in into is isn
    isnt it its itself just ll m ma me mightn mightnt more most mustn mustnt my myself needn
    neednt no nor not now o of off on once only or other our ours ourselves out over own re s
    same shan shant she shes should shouldn shouldnt shouldve so some such t than that thatll
    the their theirs them themselves then there these they this those through to too under until
    up ve very was wasn wasnt we were weren werent what when where which while who whom why will
    with won wont wouldn wouldnt y you youd youll your youre yours yourself yourselves youve
"""
STOP_WORDS = frozenset(_STOP_WORDS.split())


@cache
def _stemmer() -> Stemmer.Stemmer:
    """Snowball's English stemmer (C, with its own cache of recent words)."""
    return Stemmer.Stemmer("english")


def analyze(text: str) -> list[tuple[str, str]]:
    """(term, the word it came from) for each term of ``text``, in order.

    Lowercased (NFKC first, so full-width letters and ligatures read as plain ones); words are
    Unicode letters and digits; a run of CJK characters gives each character and each pair of
    neighbours; other words lose English stop words and are stemmed with Snowball's English
    stemmer, so that a question's paraphrase meets the document's own forms.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    out: list[tuple[str, str]] = []
    words: list[str] = []
    at: list[int] = []  # where each word's term goes in out
    for m in _TOKEN.finditer(text):
        run = m.group("cjk")
        if run is not None:
            out.extend((ch, ch) for ch in run)
            out.extend((run[i : i + 2], run[i : i + 2]) for i in range(len(run) - 1))
            continue
        word = m.group("word")
        if word in STOP_WORDS:
            continue
        at.append(len(out))
        words.append(word)
        out.append(("", word))
    for i, stem in zip(at, _stemmer().stemWords(words), strict=True):
        out[i] = (stem, out[i][1])
    return out


def terms(text: str) -> list[str]:
    """The terms of ``text`` (see :func:`analyze`), repeats kept: what a chunk is indexed as."""
    return [t for t, _ in analyze(text)]


def question_terms(question: str) -> dict[str, str]:
    """Each distinct term of ``question`` and the first of its words that gave it."""
    found: dict[str, str] = {}
    for term, word in analyze(question):
        found.setdefault(term, word)
    return found


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


@dataclass(frozen=True)
class Piece:
    """A sentence-precise part of one chunk: kept or dropped, and why (see :func:`select`)."""

    start: int  # character offsets into the document, end exclusive
    end: int
    tokens: int  # the exact count of its own text
    kept: bool
    reason: str
    score: float = 0.0
    rank: int | None = None
    terms: tuple[str, ...] = ()
    next_to: int | None = None


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
    the question's subject (:func:`_anchor`) is a match too, and of each match only the
    sentences that carry the evidence are kept (:func:`_takes`), with those they lean on; no
    paragraph around them. The chunks kept in part are in :attr:`Selection.pieces`.
    """
    wanted = question_terms(question)
    scores = index.scores(wanted)
    title = _Titles(chunks, text)
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
    anchor: frozenset[str] = frozenset()
    named_subject = False
    if sum(c.tokens for c in chunks) <= budget:
        kept: dict[int, int | None] = dict.fromkeys(range(n))
    elif fill:
        kept = _within(chunks, ranked, rank, budget)
    else:
        precise = counter is not None and bool(text)
        anchor, named_subject = (_anchor(question, ranked, holds, rarity) if precise
                                 else (frozenset(), False))  # fmt: skip
        named = [i for i in ranked if anchor & holds.get(i, set())]
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
        split = _Sentences(chunks, text)
        idf = {t: float(np.log1p((n - df + 0.5) / (df + 0.5))) for t, df in rarity.items()}
        matches = sorted(kept, key=rank.__getitem__)
        takes = _takes(matches, rank, scores, split, wanted=wanted, idf=idf, title=title,
                       anchor=_Anchor(anchor, rarity, name=named_subject))  # fmt: skip
        out.pieces = _pieces(takes, split, budget, counter, verdicts=out.verdicts, rank=rank)
        chosen = {t.at[0] for t in takes if t.next_to is None}
        for h in matches:  # a match none of whose sentences scored or fit
            if h not in out.pieces:
                v = out.verdicts[h]
                why = (past_budget_reason(rank[h], matching, v.score) if h in chosen else
                       weak_reason(rank[h], matching, v.score, [wanted[t] for t in anchor],
                                   name=named_subject))  # fmt: skip
                out.verdicts[h] = replace(v, kept=False, reason=why)
    return out


def _precise(
    chunks: Sequence[Chunk], ranked: Sequence[int], rank: dict[int, int], scores: np.ndarray,
    budget: int, *, title: _Titles, covers: Sequence[int] = (), first: Sequence[int] = (),
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


# A question names what it is about with its rarest word (a place, a person, a coined name): a
# term in at most this many parts of the document is that word, and every sentence that holds
# it is evidence (a question that asks for several facts about one thing finds each fact by
# the thing's name, however few of the question's other words it shares).
RARE_PARTS = 6


def _parts(held: Iterable[str], anchor: _Anchor) -> int:
    """How many parts hold the rarest of ``held``."""
    return min((anchor.rarity.get(t, 0) for t in held), default=0)


def _rarest(held: set[str], rarity: dict[str, int]) -> frozenset[str]:
    """The rarest of ``held`` that are rare (in at most :data:`RARE_PARTS` parts), else none."""
    rare = [t for t in held if 0 < rarity.get(t, 0) <= RARE_PARTS]
    least = min((rarity[t] for t in rare), default=0)
    return frozenset(t for t in rare if rarity[t] == least)


def _anchor(question: str, ranked: Sequence[int], holds: dict[int, set[str]],
            rarity: dict[str, int]) -> tuple[frozenset[str], bool]:  # fmt: skip
    """What the question is about, as rare terms (each in at most :data:`RARE_PARTS` parts),
    and whether the question writes it as a name; none when every term is common.

    A name the question writes with a capital inside the sentence ("Quist", "the Mallory
    Wren") is its subject: the rarest such term. Without one, the rarest rare term of the
    best-ranked match that holds any: the evidence that answers best names the subject. A
    rarer word alone is often an aside ("the contraption he loved", "his reckoning device"),
    and a rare word beside the name a common one elsewhere ("smith" beside "Harrowgate")."""
    names = _rarest(_named(question) & set(rarity), rarity)
    if names:
        return names, True
    for i in ranked:
        here = _rarest(holds.get(i, set()), rarity)
        if here:
            return here, False
    return frozenset(), False


def _named(question: str) -> set[str]:
    """The terms of the words ``question`` writes with a capital inside a sentence (not its
    first word, nor one after a full stop): the names it asks about. German, which capitalises
    every noun, gets its nouns; scripts without case get none."""
    out: set[str] = set()
    for sentence in re.split(r"(?<=[.!?])\s+", question.strip()):
        words = list(re.finditer(r"[^\W\d_][\w'’-]*", sentence))
        for m in words[1:]:
            if m.group()[0].isupper():
                out.update(t for t, _ in analyze(m.group()))
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


# ----- sentence-precise context (the default) ---------------------------------------------------
#
# A 128-token part holds a fact in one of its sentences; the rest of the part, and its paragraph,
# are unrelated text a small model loses the fact in (three facts kept in 1,500 tokens, one
# named). Inside a match only the sentences that carry the evidence are kept (see _takes), with
# the sentences a kept one leans on (see _leaning, _following, _under).

# A sentence is kept when it scores at least this share of its part's best sentence: a sentence
# of the question's common words only ("build", "first") stays out beside one of its rare ones.
SENTENCE_SHARE = 0.5
# ...and at least this share of the best sentence of all the matches kept (0: off). At 0.7 a
# part that ranks close to the best for common words keeps none of its sentences; on the needle
# benchmark (seed 0) that answered 14 of 20 instead of 13, but the best-ranked part may then
# keep nothing: left to the rule for questions that ask for several things (issue 51, item 2).
SENTENCE_CLOSE = 0.0
# A piece of fewer words is no sentence of its own ("1.", "n.", "Dr."): it opens the next one.
SENTENCE_WORDS = 3
# How many sentences back a chain of pointing-back sentences is followed.
BACK_STEPS = 2
# First words that point back to the sentence before: pronouns, determiners and connectives.
_POINTS_BACK = """
    it its this that these those they them their he she his her him such both either neither
    which whose but however also so thus therefore then yet and or nor moreover furthermore
    besides instead still hence meanwhile otherwise likewise similarly consequently accordingly
    additionally
"""
POINTS_BACK = frozenset(_POINTS_BACK.split())
# A sentence ends at a mark and its closing quotes or brackets, before whitespace and a word
# that does not start in lower case ("e.g. the" goes on); a CJK full stop ends one anywhere.
_SENTENCE_CUT = re.compile(r"""[.!?…][)"'\]»”’]*(?=\s+[^\sa-z])|[。！？；][)」』”’）]*""")
# A whole sentence ends on its mark (and closing quotes or brackets)
_WHOLE = re.compile(r"""[.!?…。！？][)"'\]»”’」』）]*\s*$""")
# A line that ends on a symbol (a table's row, a box's edge) ends there, whatever follows
_ROW_END = re.compile(r"""[^\w\s,;:()'"‘’“”.!?…-](?=[ \t]*\n)""")
_FIRST_WORD = re.compile(r"[^\W\d_]+")
# A full stop after a title or an initial does not end a sentence ("sounded by Dr. Ilse Varga",
# "J. R. Hartley"): the name goes on.
_TITLES = "Mr|Mrs|Ms|Mx|Dr|Prof|St|Mt|Jr|Sr|Fr|Rev|Gen|Col|Capt|Lt|Sgt|Gov|Sen|Rep|Hon|No|Vol|Fig"
_TITLE_BEFORE = re.compile(rf"(?<![^\W\d_])(?:{_TITLES}|[A-Z])\.$")


def sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The sentences of ``text[start:end]``, covering it in order. Each is cut after its end
    mark (or a line that ends on a symbol: a table's row is a sentence of its own), before the
    whitespace that opens the next (as chunks are cut); a piece of fewer than
    :data:`SENTENCE_WORDS` words joins the next one, a last one the one before."""
    out: list[tuple[int, int]] = []
    a = start
    marks = [m.end() for m in _SENTENCE_CUT.finditer(text, start, end)
             if not _TITLE_BEFORE.search(text, max(start, m.start() - 6), m.start() + 1)]
    lines = [m.end() for m in _ROW_END.finditer(text, start, end)]
    for b in sorted({*marks, *lines}):
        if b < end and _words(text[a:b]) >= SENTENCE_WORDS:
            out.append((a, b))
            a = b
    if a < end:
        if out and _words(text[a:end]) < SENTENCE_WORDS:
            out[-1] = (out[-1][0], end)
        else:
            out.append((a, end))
    return out


def _words(text: str) -> int:
    """How many words ``text`` holds (a CJK character counts as one)."""
    n = 0
    for m in _TOKEN.finditer(text):
        n += len(m.group("cjk")) if m.group("cjk") else 1
    return n


def _points_back(sentence: str) -> str | None:
    """The first word of ``sentence`` where it points back to the sentence before, else None."""
    m = _FIRST_WORD.search(sentence)
    if m is None or sentence[: m.start()].strip(" \t\n\"'‘“(["):
        return None
    return m.group() if m.group().casefold() in POINTS_BACK else None


def _leads_on(sentence: str) -> str | None:
    """Why ``sentence`` needs the one after it, else None."""
    line = sentence.strip()
    if line.endswith((":", "：")):
        return "it ends in a colon (what it introduces follows)"
    if is_title(line):
        return "it reads as a heading"
    return None


@dataclass
class _Sentences:
    """The sentences of a document's chunks, split as a step asks for them."""

    chunks: Sequence[Chunk]
    text: str
    split: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    def of(self, j: int) -> list[tuple[int, int]]:
        if j not in self.split:
            c = self.chunks[j]
            self.split[j] = sentences(self.text, c.start, c.end)
        return self.split[j]

    def words(self, at: tuple[int, int]) -> str:
        a, b = self.of(at[0])[at[1]]
        return self.text[a:b]

    def before(self, at: tuple[int, int]) -> tuple[int, int] | None:
        """The sentence before ``(chunk, k)`` in its paragraph, else None."""
        j, k = at
        if k > 0:
            return j, k - 1
        if j > 0 and self.chunks[j - 1].boundary < Boundary.PARAGRAPH:
            return j - 1, len(self.of(j - 1)) - 1
        return None

    def after(self, at: tuple[int, int], *, across: bool = False) -> tuple[int, int] | None:
        """The sentence after ``(chunk, k)`` in its paragraph (``across``: or in the next
        chunk, as a heading's text follows it), else None."""
        j, k = at
        if k + 1 < len(self.of(j)):
            return j, k + 1
        if j + 1 < len(self.chunks) and (across or self.chunks[j].boundary < Boundary.PARAGRAPH):
            return j + 1, 0
        return None


@dataclass(frozen=True)
class _Take:
    """A sentence a plan keeps: where, and why in words and figures."""

    at: tuple[int, int]
    reason: str
    score: float = 0.0
    rank: int | None = None
    terms: tuple[str, ...] = ()
    next_to: int | None = None


def sentence_reason(k: int, rank: int, score: float, words: Sequence[str]) -> str:
    held = ", ".join(f"'{w}'" for w in words)
    return f"sentence {k:,} of the part ranked {rank:,} (score {score:.2f}): holds {held}"


def before_reason(rank: int, word: str) -> str:
    return f"the sentence before, for the part ranked {rank:,}: the next starts with '{word}'"


def after_reason(rank: int, why: str) -> str:
    return f"the sentence after, for the part ranked {rank:,}: the one before {why}"


def heading_reason(rank: int) -> str:
    return f"the text under the heading ranked {rank:,} starts here"


def weak_reason(rank: int, matching: int, score: float, rarest: Sequence[str] = (), *,
                name: bool = False) -> str:  # fmt: skip
    held = ", ".join(f"'{w}'" for w in rarest)
    if name:
        return (f"rank {rank:,} of {matching:,} matching parts (score {score:.2f}): no sentence "
                f"names {held} (what the question asks about)")  # fmt: skip
    if rarest:
        return (f"rank {rank:,} of {matching:,} matching parts (score {score:.2f}): no sentence "
                f"holds {held} (the question's rarest) or two of its words")  # fmt: skip
    return (f"rank {rank:,} of {matching:,} matching parts (score {score:.2f}): no sentence "
            f"holds the question's words")  # fmt: skip


def anchor_reason(k: int, rank: int, score: float, words: Sequence[str], *, rare: Sequence[str],
                  parts: int, name: bool = False) -> str:  # fmt: skip
    held = ", ".join(f"'{w}'" for w in words)
    named = ", ".join(f"'{w}'" for w in rare)
    what = "the question asks about" if name else "the question's rarest:"
    return (f"sentence {k:,} of the part ranked {rank:,} (score {score:.2f}): holds {held}; "
            f"{what} {named} (in {parts:,} of the parts)")  # fmt: skip


def follow_reason(rank: int, word: str) -> str:
    return f"the sentence after, for the part ranked {rank:,}: it starts with '{word}'"


@dataclass(frozen=True)
class _Anchor:
    """The question's subject as rare terms (see :func:`_anchor`), whether it is a name the
    question writes, and how many parts hold each of the question's terms."""

    terms: frozenset[str] = frozenset()
    rarity: dict[str, int] = field(default_factory=dict)
    name: bool = False


def rest_reason(rank: int) -> str:
    return (f"the rest of the part ranked {rank:,}: no sentence here scores "
            f"{SENTENCE_SHARE:.0%} of its best")  # fmt: skip


def _takes(
    matches: Sequence[int], rank: dict[int, int], scores: np.ndarray, split: _Sentences, *,
    wanted: dict[str, str], idf: dict[str, float], title: _Titles, anchor: _Anchor | None = None,
) -> list[_Take]:  # fmt: skip
    """The sentences kept for ``matches`` (best first): theirs first, then those they lean on.

    Where the question names its subject (``anchor.name``), a sentence is evidence when it holds
    the name, and the sentences after it that refer back to it ("It sails from ..."); nothing
    else: a sentence of the question's common words beside the facts gave the model a second,
    unrelated subject, and it answered from that (the needle benchmark). Where the subject is
    only a rare word, a sentence is evidence when it holds that word, the rarest word of a
    match close to the best where that is as rare, or two of the question's words. Otherwise a
    match keeps its sentences that score :data:`SENTENCE_SHARE` of its best; one whose best
    scores under :data:`SENTENCE_CLOSE` of the best of all keeps none."""
    anchor = anchor or _Anchor()
    found = {h: [{t for t in terms(split.words((h, k))) if t in wanted}
                 for k in range(1 if title(h) else len(split.of(h)))] for h in matches}
    values = {h: [sum(idf.get(t, 0.0) for t in held) for held in found[h]] for h in matches}
    top = max((max(v, default=0.0) for v in values.values()), default=0.0)
    floor = CLOSE * max((float(scores[h]) for h in matches), default=0.0)
    own: list[_Take] = []
    leaned: list[_Take] = []
    for h in matches:
        r, score = rank[h], float(scores[h])
        best = max(values[h], default=0.0)
        # a match close to the best is evidence by its own rarest word too where that is as
        # rare as the subject ("Mesk", in one part, ranked second behind a part that holds
        # "sewing", in two): the question may be about either
        mine = anchor.terms
        if anchor.terms and not anchor.name and score >= floor:
            own_rare = _rarest(set().union(*found[h]), anchor.rarity)
            if own_rare and _parts(own_rare, anchor) <= _parts(anchor.terms, anchor):
                mine = mine | own_rare
        for k, value in enumerate(values[h]):
            rare = mine & found[h][k]
            if anchor.name:
                keep = bool(rare)
            elif anchor.terms:
                keep = bool(rare) or (len(found[h][k]) >= 2 and value >= SENTENCE_SHARE * best)
            else:
                keep = value > 0 and value >= max(SENTENCE_SHARE * best, SENTENCE_CLOSE * top)
            if not keep:
                continue
            held = tuple(w for t, w in wanted.items() if t in found[h][k])
            named = [wanted[t] for t in wanted if t in rare]
            why = (anchor_reason(k + 1, r, score, held, rare=named, parts=_parts(rare, anchor),
                                 name=anchor.name and rare <= anchor.terms)
                   if rare else sentence_reason(k + 1, r, score, held))  # fmt: skip
            own.append(_Take((h, k), why, score, r, held))
            # a heading: the first sentence of its text; a sentence: those it leans on, and
            # after the subject's name, the sentences that go on about it
            leaned.extend(_under(h, r, split, title) if title(h) else
                          _leaning((h, k), r, split))  # fmt: skip
            if rare and not title(h):
                leaned.extend(_following((h, k), r, split))
    return own + leaned


def _under(h: int, rank: int, split: _Sentences, title: _Titles) -> list[_Take]:
    """The sentences that open the text under heading ``h``: up to the first whole sentence
    (a bracketed etymology or a subtitle is not one), :data:`BACK_STEPS` + 1 at most, never
    past the next heading."""
    out: list[_Take] = []
    at = split.after((h, len(split.of(h)) - 1), across=True)
    while at is not None and not title(at[0]) and len(out) <= BACK_STEPS:
        out.append(_Take(at, heading_reason(rank), next_to=rank))
        if _WHOLE.search(split.words(at)):
            out.extend(_forward(at, rank, split))  # a colon: what it introduces
            break
        at = split.after(at, across=True)
    return out


def _leaning(at: tuple[int, int], rank: int, split: _Sentences) -> list[_Take]:
    """The sentences the one at ``at`` leans on: those before it while each starts by pointing
    back (:data:`BACK_STEPS` at most), the one after where it introduces it."""
    out: list[_Take] = []
    here = at
    for _ in range(BACK_STEPS):
        word = _points_back(split.words(here))
        prev = split.before(here) if word else None
        if word is None or prev is None:
            break
        out.append(_Take(prev, before_reason(rank, word), next_to=rank))
        here = prev
    return out + _forward(at, rank, split)


def _following(at: tuple[int, int], rank: int, split: _Sentences) -> list[_Take]:
    """The sentences after the one at ``at`` in its paragraph while each starts by pointing
    back ("It", "Its", "He"): they go on about what it names (:data:`BACK_STEPS` at most)."""
    out: list[_Take] = []
    here = split.after(at)
    while here is not None and len(out) < BACK_STEPS:
        word = _points_back(split.words(here))
        if word is None:
            break
        out.append(_Take(here, follow_reason(rank, word), next_to=rank))
        here = split.after(here)
    return out


def _forward(at: tuple[int, int], rank: int, split: _Sentences) -> list[_Take]:
    """The sentence after the one at ``at`` where that one introduces it, else nothing (in
    the next paragraph too: a list after a colon is often one of its own)."""
    why = _leads_on(split.words(at))
    nxt = split.after(at, across=True) if why else None
    if why is None or nxt is None:
        return []
    return [_Take(nxt, after_reason(rank, why), next_to=rank)]


def _pieces(
    takes: Sequence[_Take], split: _Sentences, budget: int, counter: TokenCounter, *,
    verdicts: Sequence[Verdict], rank: dict[int, int],
) -> dict[int, list[Piece]]:  # fmt: skip
    """Each chunk a kept sentence lies in, as pieces: the sentences kept (in ``takes``'s order
    while they fit ``budget``), the text between them dropped, each counted exactly."""
    chosen: dict[tuple[int, int], _Take] = {}
    for t in takes:
        chosen.setdefault(t.at, t)
    text = split.text
    counts = dict(zip(chosen, counter.count_many(
        [text[a:b] for a, b in (split.of(j)[k] for j, k in chosen)]), strict=True))  # fmt: skip
    kept: dict[tuple[int, int], _Take] = {}
    used = 0
    for at, t in chosen.items():
        if used + counts[at] <= budget:
            kept[at] = t
            used += counts[at]
    out: dict[int, list[Piece]] = {}
    for j in sorted({j for j, _ in kept}):
        runs: list[tuple[int, int, _Take | None]] = []
        for k, (a, b) in enumerate(split.of(j)):
            took = kept.get((j, k))
            if took is None and runs and runs[-1][2] is None:
                runs[-1] = (runs[-1][0], b, None)
            else:
                runs.append((a, b, took))
        gaps = counter.count_many([text[a:b] for a, b, took in runs if took is None])
        pieces: list[Piece] = []
        v = verdicts[j]
        for a, b, took in runs:
            if took is not None:
                pieces.append(Piece(a, b, counts[took.at], True, took.reason, took.score,
                                    took.rank, took.terms, took.next_to))  # fmt: skip
            elif j in rank and v.kept:  # the rest of a match
                pieces.append(Piece(a, b, gaps.pop(0), False, rest_reason(rank[j])))
            else:  # the rest of a part kept for a neighbour's sake: as the part is
                pieces.append(Piece(a, b, gaps.pop(0), False, v.reason, v.score, v.rank,
                                    v.terms))  # fmt: skip
        out[j] = pieces
    if out:
        first = min(out)
        out[first] = _trimmed(out[first], text, counter)
    return out


def _trimmed(pieces: list[Piece], text: str, counter: TokenCounter) -> list[Piece]:
    """``pieces`` with the blank space that opens the first kept one dropped: the excerpts
    start the document's place in the prompt with their first word, as a document does (the
    blank lines before a paragraph are tokens of their own, and a 135M model answers
    differently after them: 2 of 12 facts fewer named on the multi-fact questions)."""
    k = next(i for i, p in enumerate(pieces) if p.kept)
    p = pieces[k]
    body = p.start + len(text[p.start : p.end]) - len(text[p.start : p.end].lstrip())
    if body in (p.start, p.end):
        return pieces
    blank = Piece(p.start, body, counter.count(text[p.start : body]), False, BLANK)
    kept = replace(p, start=body, tokens=counter.count(text[body : p.end]))
    return [*pieces[:k], blank, kept, *pieces[k + 1 :]]
