"""The words a question and a document share, and which of them name what the question asks
about: the analyzer behind `retrieve`'s index and its choice of sentences.

Terms come from a plain word analyzer rather than the model's tokens: BM25 wants words whose
forms a question and the document share ("edited" and "editor" both reach "edit"), which
subword pieces are not. It treats Chinese, Japanese and Korean (no spaces between words) as
single characters and pairs of characters, and Latin and other spaced scripts as words.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache

import Stemmer

# The analyzer's name in cache keys: an index built by an older analyzer is never read.
ANALYZER = "words-1"

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


def word_count(text: str) -> int:
    """How many words ``text`` holds (a CJK character counts as one)."""
    n = 0
    for m in _TOKEN.finditer(text):
        n += len(m.group("cjk")) if m.group("cjk") else 1
    return n


# A question names what it is about with its rarest word (a place, a person, a coined name): a
# term in at most this many parts of the document is that word, and every sentence that holds
# it is evidence (a question that asks for several facts about one thing finds each fact by
# the thing's name, however few of the question's other words it shares).
RARE_PARTS = 6


@dataclass(frozen=True)
class Subject:
    """What the question asks about as rare terms (see :func:`subject`), whether it is a name the
    question writes, and how many parts hold each of the question's terms."""

    terms: frozenset[str] = frozenset()
    rarity: dict[str, int] = field(default_factory=dict)
    name: bool = False


def parts_holding(held: Iterable[str], subject: Subject) -> int:
    """How many parts hold the rarest of ``held``."""
    return min((subject.rarity.get(t, 0) for t in held), default=0)


def rarest(held: set[str], rarity: dict[str, int]) -> frozenset[str]:
    """The rarest of ``held`` that are rare (in at most :data:`RARE_PARTS` parts), else none."""
    rare = [t for t in held if 0 < rarity.get(t, 0) <= RARE_PARTS]
    least = min((rarity[t] for t in rare), default=0)
    return frozenset(t for t in rare if rarity[t] == least)


def subject(question: str, ranked: Sequence[int], holds: dict[int, set[str]],
            rarity: dict[str, int]) -> Subject:  # fmt: skip
    """What ``question`` is about, as rare terms (each in at most :data:`RARE_PARTS` parts),
    and whether the question writes it as a name; no terms when every term is common.
    ``ranked``: the matching parts, best first; ``holds``: the question's terms each holds;
    ``rarity``: how many parts hold each term.

    A name the question writes with a capital inside the sentence ("Quist", "the Mallory
    Wren") is its subject: the rarest such term. Without one, the rarest rare term of the
    best-ranked match that holds any: the evidence that answers best names the subject. A
    rarer word alone is often an aside ("the contraption he loved", "his reckoning device"),
    and a rare word beside the name a common one elsewhere ("smith" beside "Harrowgate")."""
    names = rarest(_named(question) & set(rarity), rarity)
    if names:
        return Subject(names, rarity, name=True)
    for i in ranked:
        here = rarest(holds.get(i, set()), rarity)
        if here:
            return Subject(here, rarity)
    return Subject(frozenset(), rarity)


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
