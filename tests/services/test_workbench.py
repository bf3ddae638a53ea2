"""What the window decides, without a window: the job the toolbar asks for (or why none can
run), the plans shown and run (the job's own framing and reserve), needle retention, the
version a comparison goes on from, and what a rollback gives back. cl100k counts, a real
SQLite file, no model, no Qt, no process."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.documents import Document, document_from_text
from app.core.planning.strategies import Planner, plan_for
from app.core.tokens import cl100k
from app.services import history, versions
from app.services.workbench import decisions
from app.services.workbench.decisions import JobChoices, Refusal
from app.store.repository import Repository
from tests.services.outcomes import DOC, OTHER, outcome

pytestmark = pytest.mark.unit

FACT = "The lighthouse keeper hid the spare key under the third blue stone."
TEXT = "".join(f"Paragraph {i} tells of the harbour and its boats. " * 6 + "\n\n"
               for i in range(60))  # fmt: skip


DOCUMENT: Document = document_from_text(f"{FACT}\n\n{TEXT}", name="harbour.txt")


@pytest.fixture(scope="module")
def document_planner() -> Planner:
    """DOCUMENT planned with the cl100k counter."""
    return Planner(DOCUMENT, cl100k())


@pytest.mark.parametrize(
    ("choices", "document", "model", "refusal"),
    [
        (JobChoices(), False, True, Refusal.NO_DOCUMENT),
        (JobChoices(), True, False, Refusal.NO_MODEL),
        (JobChoices(task="ask"), True, True, Refusal.NO_QUESTION),
        (JobChoices(task="extract"), True, True, Refusal.NO_QUESTION),
    ],
)
def test_a_job_that_cannot_run_says_why(
    choices: JobChoices, document: bool, model: bool, refusal: Refusal
) -> None:
    assert decisions.job_for(choices, ("head",), document=document, model=model) is refusal


def test_the_job_the_toolbar_asks_for() -> None:
    ask = JobChoices(task="ask", question="Who keeps the key?", max_tokens=64, lanes=2,
                     audit=True)  # fmt: skip
    spec = decisions.job_for(ask, ("retrieve", "head"), document=True, model=True)
    assert not isinstance(spec, Refusal)
    assert spec.task == "ask" and spec.questions == ("Who keeps the key?",)
    assert spec.strategies == ("retrieve", "head") and spec.instruction == ""
    assert (spec.max_tokens, spec.lanes, spec.audit, spec.keep_kv) == (64, 2, True, True)
    spec.check()  # a job the services accept as it is
    extract = JobChoices(task="extract", question="List the boats.").spec(("map-reduce",))
    assert extract.instruction == "List the boats." and extract.questions == ()
    summary = JobChoices(question="left over from an ask").spec(("head",))
    assert summary.questions == () and summary.instruction == ""
    assert JobChoices(task="ask", question="Q?").ranked_by == "Q?"
    assert JobChoices(question="Q?").ranked_by == ""  # a summary ranks by nothing


@pytest.mark.parametrize("n_ctx", [256, 1024])
def test_the_plans_a_job_runs_are_framed_as_the_job_frames_them(
    document_planner: Planner, n_ctx: int
) -> None:
    ask = JobChoices(task="ask", question="Where is the spare key?", max_tokens=32)
    spec = ask.spec(("retrieve", "head"))
    made = decisions.job_plans(document_planner, DOCUMENT, None, spec, document_planner.counter,
                               model=None, n_ctx=n_ctx)  # fmt: skip
    assert made is not None and [p.strategy for p in made] == ["retrieve", "head"]
    for plan in made:
        instruction, reserve = spec.framing(plan.strategy, document_planner.counter)
        assert reserve > spec.max_tokens  # the question's room after the document
        expected = plan_for(document_planner, plan.strategy, None, instruction=instruction,
                            n_ctx=n_ctx, reserve=reserve,
                            question="Where is the spare key?")  # fmt: skip
        assert plan.budget == expected.budget and plan.kept == expected.kept
        assert 0 < plan.kept_tokens <= plan.budget < n_ctx and plan.refused is None
    retrieve, head = made
    assert retrieve.question == "Where is the spare key?" and head.question == ""
    assert any(s.start == 0 for s in retrieve.kept)  # the fact (at the start) ranks first


def test_needle_retention_is_measured_on_the_plans_shown(document_planner: Planner) -> None:
    choices = JobChoices(max_tokens=32, needles=(FACT,))
    found = decisions.needle_retention(document_planner, DOCUMENT, None, choices=choices,
                                       strategies=("head", "tail"),
                                       counter=document_planner.counter, model=None,
                                       n_ctx=256)  # fmt: skip
    assert found == [("head", 1.0), ("tail", 0.0)]  # the fact opens a document cut to fit
    absent = JobChoices(max_tokens=32, needles=("Not in the document at all.",))
    assert decisions.needle_retention(document_planner, DOCUMENT, None, choices=absent,
                                      strategies=("head",), counter=document_planner.counter,
                                      model=None, n_ctx=256) == []  # fmt: skip


def test_a_comparison_goes_on_from_the_strategy_chosen(repo: Repository) -> None:
    done = versions.record_outcome(repo, DOC, outcome("head", "tail", "middle"))
    compared = outcome("head", "tail", "middle")
    assert decisions.version_to_go_on_from(done, compared, "tail") == done.versions[1]
    assert decisions.version_to_go_on_from(done, compared, "entropy") == done.versions[0]


def test_a_rollback_says_which_document_it_is_of_and_refuses_a_resume_without_a_state(
    repo: Repository,
) -> None:
    done = versions.record_outcome(repo, DOC, outcome("head"))
    [version] = done.versions
    back = history.rollback(history.History(repo), version)
    assert back.document_sha256 == DOC.sha256 != OTHER.sha256
    assert back.version.parent == version and back.copied.id == version and back.resume is None
    # a resume asked for, but no KV state was saved with it: refused, nothing written
    before = repo.history()
    on = history.ResumeOn(model=Path("/m.gguf"), model_sha256="m" * 64, n_ctx=512)
    with pytest.raises(history.NothingToResume, match=f"version {version} has no saved KV"):
        history.rollback(history.History(repo), version, resume_on=on)
    assert repo.history() == before
