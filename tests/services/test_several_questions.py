"""Several questions at once: the toolbar's text asks each line, their `retrieve` plans side by
side say which chunks each keeps and which they share, and the job's answers are recorded as a
version per question, each the child of the one before (the thread a turn each, the KV state
with the last). No model, no Qt: plans and results made here, a real SQLite file."""

from __future__ import annotations

import pytest

from app.core.documents import document_from_text
from app.core.engine.types import KVState
from app.core.jobs.tasks import JobResult, OutputSpan
from app.core.planning.plan import Plan, Span
from app.core.planning.strategies import Planner, PlanOptions
from app.core.tokens import cl100k
from app.services import versions
from app.services.jobs import EngineFacts, JobOutcome, JobSpec
from app.services.question_plans import side_by_side
from app.services.workbench import decisions
from app.services.workbench.decisions import JobChoices
from app.store.repository import Repository

pytestmark = pytest.mark.unit

FACTS = EngineFacts("/m.gguf", "m" * 64, "local", "f16")
DOC = document_from_text("The harbour at dawn. The boats go out. " * 20, name="harbour.txt")


def kept(start: int, end: int, tokens: int, rank: int | None) -> Span:
    return Span(start, end, tokens, f"rank {rank}", score=1.0 if rank else None, rank=rank)


def test_the_chunks_two_plans_share_are_marked_in_both_columns_and_counted() -> None:
    a = Plan("retrieve", 100, 400, (kept(0, 10, 5, 2), kept(10, 20, 6, 1), kept(50, 60, 7, 3)),
             (), question="Where?")  # fmt: skip
    b = Plan("retrieve", 100, 400, (kept(10, 20, 6, 2), kept(50, 60, 7, 1), kept(90, 99, 4, 3)),
             (), question="When?")  # fmt: skip
    c = Plan("retrieve", 100, 400, (kept(90, 99, 4, 1),), (), question="Who?")

    two = side_by_side([a, b])
    first, second = two.questions
    assert (first.question, second.question) == ("Where?", "When?")
    assert [p.shared_with for p in first.parts] == [(), (1,), (1,)]
    assert [p.shared_with for p in second.parts] == [(0,), (0,), ()]
    assert first.shares == (0, 2) and second.shares == (2, 0)  # "shares 2 of 3 chunks"
    assert (first.kept_tokens, second.kept_tokens) == (18, 17)
    assert (first.shared_tokens, second.shared_tokens) == (13, 13)
    assert two.shared_parts == ((10, 20), (50, 60)) and two.shared_tokens == 13
    assert (two.strategy, two.budget) == ("retrieve", 100)
    rows = two.rows()  # a row per chunk either keeps, in document order
    assert [span for span, _ in rows] == [(0, 10), (10, 20), (50, 60), (90, 99)]
    assert [tuple(p is not None for p in cells) for _, cells in rows] == [
        (True, False), (True, True), (True, True), (False, True)]  # fmt: skip
    assert rows[0][1][0].rank == 2

    three = side_by_side([a, b, c])
    assert three.questions[2].parts[0].shared_with == (1,)
    assert three.questions[1].shares == (2, 0, 1)
    assert three.shared_tokens == 17  # each shared chunk once


def test_the_plans_of_a_real_document_share_what_both_questions_match() -> None:
    text = ("Boats leave the harbour at dawn. " * 30 + "\n\n" + "The keeper keeps the key. " * 30
            + "\n\n" + "Nets dry in the sun all day. " * 30)  # fmt: skip
    planner = Planner(document_from_text(text), cl100k())
    plans = [planner.plan("retrieve", 200, PlanOptions(question=q))
             for q in ("When do boats leave the harbour?", "Who keeps the key of the harbour?")]
    side = side_by_side(plans)
    assert [q.kept_tokens for q in side.questions] == [p.kept_tokens for p in plans]
    for q, plan in zip(side.questions, plans, strict=True):
        others = {(s.start, s.end) for p in plans if p is not plan for s in p.kept}
        assert [bool(p.shared_with) for p in q.parts] == [
            (s.start, s.end) in others for s in plan.kept]  # fmt: skip


def test_the_toolbar_asks_each_line_and_retrieve_plans_each_question() -> None:
    choices = JobChoices(task="ask", question="When?\n\n  Who?  \n", strategy="retrieve")
    assert choices.questions == ("When?", "Who?")
    assert choices.ranked_by == "When?"  # the plan painted on the document: the first's
    spec = choices.spec(("retrieve",))
    assert spec.questions == ("When?", "Who?") and spec.prompt == "When?\nWho?"
    assert decisions.asks_several(spec)
    assert not decisions.asks_several(choices.spec(("head",)))  # one plan whatever is asked
    one = JobChoices(task="ask", question="Where?")
    assert one.questions == ("Where?",) and one.spec(("head",)).questions == ("Where?",)
    assert not decisions.asks_several(one.spec(("retrieve",)))
    extract = JobChoices(task="extract", question="List boats.\nAnd nets.")
    assert extract.questions == () and extract.ranked_by == "List boats.\nAnd nets."
    assert decisions.job_for(JobChoices(task="ask", question=" \n "), ("head",), document=True,
                             model=True) is decisions.Refusal.NO_QUESTION  # fmt: skip


def asked(questions: tuple[str, ...], answers: tuple[str, ...], *, finish: str = "stop",
          strategy: str = "retrieve") -> JobOutcome:  # fmt: skip
    outputs = [OutputSpan(f"answer {i + 1}", a, ((0, 40),), 1, "stop")
               for i, a in enumerate(answers)]  # fmt: skip
    result = JobResult("ask", strategy, finish, 512, prompt_tokens=60, outputs=outputs,
                       plan={"strategy": strategy, "question": questions[-1], "budget": 300},
                       final_prompt=(1, 2, 3))  # fmt: skip
    state = KVState((1, 2, 3), b"kv", 512, "f16", "/m.gguf")
    return JobOutcome(JobSpec("ask", (strategy,), questions=questions), results=[result],
                      states={0: state}, engine=FACTS)  # fmt: skip


def test_each_answer_is_a_version_child_of_the_one_before(repo: Repository) -> None:
    first = versions.record_outcome(repo, DOC, asked(("Where?",), ("At the harbour.",)))
    [root] = first.versions
    figures = {"When?": {"strategy": "retrieve", "question": "When?", "budget": 300,
                         "kept_tokens": 40}}  # fmt: skip
    done = versions.record_continuing(repo, DOC, asked(("When?", "Who?"), ("At dawn.", "Boats.")),
                                      versions.Target(first.session, root),
                                      figures=figures)  # fmt: skip
    when, who = done.versions
    assert done.ends == (who,) and done.parent == root
    assert decisions.version_to_go_on_from(done, asked(("When?", "Who?"), ("", "")), "retrieve") \
        == who  # fmt: skip
    v_when, v_who = repo.get_version(when), repo.get_version(who)
    assert (v_when.parent, v_who.parent) == (root, when)
    assert (v_when.prompt, v_who.prompt) == ("When?", "Who?")
    assert [t.question for t in versions.thread(repo, who)] == ["Where?", "When?", "Who?"]
    assert [(t.version, t.answer) for t in versions.thread(repo, who)][1:] == [
        (when, "At dawn."), (who, "Boats.")]  # fmt: skip
    # each version opens with its own answer, as if its question was asked apart
    opened = versions.open_version(repo, when)
    assert [(o["step"], o["text"]) for o in opened.outputs] == [("answer 1", "At dawn.")]
    assert opened.plan_figures["question"] == "When?" and opened.finish_reason == "stop"
    assert versions.open_version(repo, who).plan_figures["question"] == "Who?"
    # the KV state saved after the job is the last answer's: a rollback resumes it
    assert versions.resume_spec(repo, v_when, model_sha256="m" * 64) is None
    resumed = versions.resume_spec(repo, v_who, model_sha256="m" * 64)
    assert resumed is not None and resumed.saved_version == who
    # the command line records the job as it ran: one version, its questions one per line
    [whole] = versions.record_outcome(repo, DOC, asked(("A?", "B?"), ("a", "b"))).versions
    assert repo.get_version(whole).prompt == "A?\nB?"


def test_a_job_cut_short_records_the_questions_it_reached(repo: Repository) -> None:
    cut = asked(("When?", "Who?", "Why?"), ("At dawn.",), finish="cancelled")
    done = versions.record_continuing(repo, DOC, cut, versions.Target())
    assert len(done.versions) == 2  # the third was never asked
    when, who = (repo.get_version(v) for v in done.versions)
    assert (when.prompt, who.prompt, who.parent) == ("When?", "Who?", when.id)
    assert versions.open_version(repo, who.id).finish_reason == "cancelled"
    # the state holds the last answer's call: it goes with that version
    assert versions.resume_spec(repo, when, model_sha256="m" * 64) is not None
    assert versions.resume_spec(repo, who, model_sha256="m" * 64) is None
