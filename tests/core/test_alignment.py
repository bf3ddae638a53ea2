"""Each sentence of an answer tied to the kept sentence that supports it (core/jobs/alignment.py):
on real text (the Jargon File's entry for "hacker", the Gettysburg Address, the 道德经), a sentence
copied from the text and a paraphrase that keeps its rare word find theirs, an invented sentence
finds none, the work stays bounded on a whole book, and a job's result carries the alignment of
its answers and summaries (not of an extract) into ``as_dict``, as the store and the CLI read it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from app.core.documents import document_from_text, load_document
from app.core.engine.types import Finished, GenerationStats, PromptProgress, TextDelta
from app.core.jobs import alignment
from app.core.jobs.alignment import (
    MAX_CANDIDATE_CHARS,
    MAX_SENTENCES,
    THRESHOLD,
    SentenceSource,
    align,
    alignment_from,
    sentences,
)
from app.core.jobs.tasks import JobFinished, JobResult, OutputSpan, ask, extract
from app.core.paths import sample_document
from app.services.versions import open_version
from app.store.archive import export_session, import_session
from app.store.db import open_database
from app.store.repository import Repository
from tests.conftest import DATA
from tests.core.fake_engine import FakeCounter, ReportingEngine

pytestmark = pytest.mark.unit

JARGON = sample_document().read_text(encoding="utf-8")
HACKER = JARGON.index(":hacker: n.")
KEPT = [(HACKER, HACKER + 8_000)]  # about 2,000 tokens: the entry and those after it


def _one(answer: str, document: str = JARGON, kept: Sequence[tuple[int, int]] = KEPT) -> Any:
    [found] = align(answer, document, kept)
    return found


def _source_text(found: SentenceSource, document: str = JARGON) -> str:
    assert found.source is not None
    return " ".join(document[found.source[0] : found.source[1]].split())


def test_a_sentence_from_the_text_finds_it() -> None:
    found = _one("A hacker is a person who enjoys exploring the details of programmable systems.")
    assert _source_text(found).startswith("1. A person who enjoys exploring the details of "
                                          "programmable systems and how to stretch")  # fmt: skip
    assert found.score > 0.9 and (found.start, found.end) == (0, 78)


def test_a_paraphrase_with_the_rare_word_finds_it() -> None:
    found = _one("Hackers see themselves as an elite, a meritocracy based on ability.")
    assert "meritocracy based on ability" in _source_text(found)
    found = _one("The original sense was someone who makes furniture with an axe.")
    assert _source_text(found) == "[originally, someone who makes furniture with an axe]"
    # a name counts in full: the rest of the sentence in other words
    found = _one("RFC1392 gives a definition too.")
    assert _source_text(found).startswith("RFC1392, the Internet Users' Glossary")
    assert THRESHOLD <= found.score < 0.9


def test_an_invented_sentence_has_no_source() -> None:
    for invented in ("Hackers usually drink a lot of coffee at night.",
                     "The moon is made of green cheese and orbits Mars.",
                     "Computers are used by many people around the world today."):  # fmt: skip
        found = _one(invented)
        assert found.source is None and 0 <= found.score < THRESHOLD, invented


def test_each_sentence_of_an_answer_on_its_own_with_offsets_into_the_answer() -> None:
    doc = load_document(DATA / "sample.pdf").text  # the Declaration, Gettysburg, the Constitution
    answer = ("  Four score and seven years ago our fathers brought forth a new nation.\n\n"
              "Dr. Smith thinks the moon is made of cheese! Governments get their just powers "
              "from the consent of the governed.")  # fmt: skip
    got = align(answer, doc, [(0, len(doc))])
    assert [answer[s.start : s.end] for s in got] == [
        "Four score and seven years ago our fathers brought forth a new nation.",
        "Dr. Smith thinks the moon is made of cheese!",  # "Dr." ends no sentence
        "Governments get their just powers from the consent of the governed.",
    ]
    assert "Four score and seven years ago" in _source_text(got[0], doc)
    assert got[1].source is None
    assert "consent of the governed" in _source_text(got[2], doc)


def test_chinese_sentences_and_their_sources() -> None:
    doc = (DATA / "src" / "chinese-simplified.txt").read_text(encoding="utf-8")
    answer = "上善若水。圣人处无为之事，行不言之教。今天天气很好，我们去公园散步！"
    got = align(answer, doc, [(0, len(doc))])
    assert [answer[s.start : s.end] for s in got] == [
        "上善若水。", "圣人处无为之事，行不言之教。", "今天天气很好，我们去公园散步！"]  # fmt: skip
    assert _source_text(got[0], doc) == "上善若水。"
    assert "是以圣人处无为之事，行不言之教" in _source_text(got[1], doc)
    assert got[2].source is None


def test_only_the_kept_spans_are_sources() -> None:
    answer = "Hackers consider themselves something of an elite."
    assert align(answer, JARGON, [])[0].source is None  # nothing kept: nothing supports it
    found = _one(answer)
    assert found.source is not None
    assert KEPT[0][0] <= found.source[0] < found.source[1] <= KEPT[0][1]
    dropped = [(KEPT[0][0], found.source[0]), (found.source[1], KEPT[0][1])]
    elsewhere = _one(answer, kept=dropped)
    assert elsewhere.source != found.source and elsewhere.score < found.score


def test_empty_and_blank_answers() -> None:
    assert align("", JARGON, KEPT) == ()
    assert align(" \n\n ", JARGON, KEPT) == ()
    assert align("Anything.", "", [(0, 10)])[0].source is None


def test_a_kept_text_of_two_thousand_tokens_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 300-token answer against 2,000 tokens of kept text: each kept sentence and each of the
    answer's is analysed once, however many sentences the answer has (work counted in
    characters, not timed: the same on every machine, busy or not)."""
    text = JARGON[KEPT[0][0] : KEPT[0][1]]
    picked = sentences(text)[::4]
    answer = " ".join(" ".join(text[a:b].split()) for a, b in picked)[:1_700]  # ~300 tokens
    found: tuple[SentenceSource, ...] = ()

    def run() -> None:
        nonlocal found
        found = align(answer, JARGON, KEPT)

    assert _analysed(monkeypatch, run) <= len(text) + 2 * len(answer)  # its names: a second look
    assert sum(s.source is not None for s in found) >= len(picked) // 2


def test_a_huge_answer_on_a_whole_book_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary of 5,000 sentences whose kept spans are the whole 1.6 MB Jargon File: the first
    MAX_SENTENCES sentences aligned, and no more of the book analysed than the candidates' cap
    (MAX_CANDIDATE_CHARS), whatever the book's size."""
    answer = "A hacker enjoys programming quickly and well. " * 5_000
    got: tuple[SentenceSource, ...] = ()

    def run() -> None:
        nonlocal got
        got = align(answer, JARGON, [(0, len(JARGON))])

    aligned = sum(b - a for a, b in sentences(answer)[:MAX_SENTENCES])
    assert _analysed(monkeypatch, run) <= MAX_CANDIDATE_CHARS + 2 * aligned < len(JARGON) // 4
    assert len(got) == MAX_SENTENCES and all(s.source is not None for s in got)


def test_sentences_keep_abbreviations_initials_and_lists() -> None:
    text = ("J. R. Smith met Dr. Jones at 5 p.m. on Monday, e.g. near St. Paul's. He left.\n"
            "- first item\n- second item\n\nA new paragraph without a stop")  # fmt: skip
    assert [text[a:b] for a, b in sentences(text)] == [
        "J. R. Smith met Dr. Jones at 5 p.m. on Monday, e.g. near St. Paul's.", "He left.",
        "- first item", "- second item", "A new paragraph without a stop"]  # fmt: skip
    long = "word " * 1_000
    assert all(b - a <= 600 for a, b in sentences(long))


def test_as_dict_and_back_and_records_that_have_none() -> None:
    sentences_ = (SentenceSource(0, 10, (5, 40), 0.87654), SentenceSource(11, 20, None, 0.1))
    records = [s.as_dict() for s in sentences_]
    assert records == [{"start": 0, "end": 10, "source": [5, 40], "score": 0.8765},
                       {"start": 11, "end": 20, "source": None, "score": 0.1}]  # fmt: skip
    assert alignment_from(records) == (SentenceSource(0, 10, (5, 40), 0.8765), sentences_[1])
    assert alignment_from(None) == () and alignment_from("x") == ()
    assert alignment_from([{"start": 1}, 3, records[1]]) == (sentences_[1],)


# ----- a job aligns its answers when it ends -----


class _Answering(ReportingEngine):
    """The scripted engine, replying ``reply``."""

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def generate(self, prompt: Sequence[int], **_kw: Any) -> Iterator[Any]:
        n = len(prompt)
        self.held = n
        yield PromptProgress(n, n, n / 1000, self.kv_usage())
        yield TextDelta(" " + self.reply, (1, 2))
        self.held = n + 2
        yield Finished(GenerationStats(n, n, n / 1000, 2, 0.01, "stop", n + 2))


def test_a_jobs_answers_carry_their_alignment_and_an_extract_none() -> None:
    text = JARGON[HACKER : HACKER + 4_000]
    reply = ("Hackers consider themselves something of an elite. "
             "They mostly live on the moon.")  # fmt: skip
    engine = _Answering(reply)
    events = list(ask(engine, text, FakeCounter(engine), questions=["Who are hackers?"],  # type: ignore[arg-type]
                      strategy="head", n_ctx=4_096, max_tokens=8))  # fmt: skip
    assert isinstance(events[-1], JobFinished)
    result = events[-1].result
    [out] = result.outputs
    assert out.text == reply and len(out.alignment) == 2
    first, second = out.alignment
    assert reply[first.start : first.end] == "Hackers consider themselves something of an elite."
    assert first.source is not None and second.source is None
    assert "something of an elite" in text[first.source[0] : first.source[1]]
    assert any(a <= first.source[0] < first.source[1] <= b for a, b in out.source_spans)
    record = result.as_dict()
    assert record["outputs"][0]["alignment"] == [first.as_dict(), second.as_dict()]
    assert "document_text" not in record and result.document_text == ""  # let go at the end

    events = list(extract(engine, text, FakeCounter(engine), instruction="List the names.",  # type: ignore[arg-type]
                          strategy="head", n_ctx=4_096, max_tokens=8))  # fmt: skip
    result = events[-1].result
    assert result.outputs and all(o.alignment == () for o in result.outputs)
    assert result.as_dict()["outputs"][0]["alignment"] == []


def test_the_history_keeps_it_and_runs_recorded_before_it_still_open(tmp_path: Any) -> None:
    """A run's record (``as_dict``) keeps each output's alignment: an opened version has it,
    and so has the same version exported to a .ctxlens file and imported again; a run recorded
    before outputs had one opens with none."""
    found = (SentenceSource(0, 12, (3, 40), 0.75), SentenceSource(13, 20, None, 0.125))
    out = OutputSpan("answer 1", "Hello there. Moon.", ((0, 100),), 2, "stop", found)
    repos = []
    for name in ("a.db", "b.db"):
        db = open_database(tmp_path / name)
        repos.append((Repository(db), db))
    try:
        (repo, _), (other, _) = repos
        sid = repo.create_session("s", repo.add_document(document_from_text("x" * 100, name="d")))
        new = repo.save_version(sid, task="ask", strategy="head", prompt="Who?")
        old = repo.save_version(sid, task="ask", strategy="head", prompt="Who?")
        result = JobResult("ask", "head", "stop", 512, outputs=[out])
        repo.save_run(new.id, result)
        record = result.as_dict()
        del record["outputs"][0]["alignment"]  # as a run was recorded before
        repo.write(lambda s: _save_raw(s, old.id, record))
        assert alignment_from(open_version(repo, new.id).outputs[0]["alignment"]) == found
        assert "alignment" not in open_version(repo, old.id).outputs[0]
        assert alignment_from(open_version(repo, old.id).outputs[0].get("alignment")) == ()
        export_session(repo, sid, tmp_path / "s.ctxlens")
        got = import_session(other, tmp_path / "s.ctxlens")
        numbers = {v.number: v.id for v in other.history(got.session_id)}
        opened = open_version(other, numbers[new.number])
        assert alignment_from(opened.outputs[0]["alignment"]) == found
    finally:
        for repo, db in repos:
            repo.close()
            db.close()


def _save_raw(s: Any, version_id: int, record: dict[str, Any]) -> None:
    from app.store.rows import save_run  # noqa: PLC0415 (the store's own writer)

    save_run(s, version_id, record)


def _analysed(monkeypatch: pytest.MonkeyPatch, fn: Any) -> int:
    """How many characters ``fn`` hands the term analyser: the work aligning does."""
    total = 0
    real = alignment.analyze

    def counting(text: str) -> Any:
        nonlocal total
        total += len(text)
        return real(text)

    monkeypatch.setattr(alignment, "analyze", counting)
    fn()
    return total
