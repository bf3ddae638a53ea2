"""A session is one document's line of work: runs recorded into it are children of the version
they were made from (a comparison: one child per strategy), a target that does not fit is one
sentence with nothing written, a diff shows what the runs answered, and an old version comes
back with its reply and plan. Real SQLite file, no model (the results are made here)."""

from __future__ import annotations

import pytest

from app.core.jobs.tasks import JobResult, OutputSpan
from app.core.planning.plan import Plan, Span
from app.services import versions
from app.services.errors import BadRequest
from app.services.jobs import JobOutcome, JobSpec
from app.store.repository import Repository, RepositoryError
from tests.services.outcomes import DOC, FACTS, OTHER, outcome

pytestmark = pytest.mark.unit


def test_runs_into_a_session_make_a_tree(repo: Repository) -> None:
    first = versions.record_outcome(repo, DOC, outcome("head"))
    assert first.parent is None and len(first.versions) == 1
    [v1] = first.versions
    second = versions.record_outcome(repo, DOC, outcome("tail"),
                                     versions.Target(first.session, v1))  # fmt: skip
    [v2] = second.versions
    assert (second.session, second.parent) == (first.session, v1)
    # --session alone: under the session's newest version
    third = versions.record_outcome(repo, DOC, outcome("middle"), versions.Target(first.session))
    [v3] = third.versions
    assert third.parent == v2
    # a comparison from v1: one child per strategy, all under v1 (a branch)
    compared = versions.record_outcome(repo, DOC, outcome("head", "entropy"),
                                       versions.Target(None, v1))  # fmt: skip
    assert compared.session == first.session and compared.parent == v1
    tree = {v.id: v for v in repo.history(first.session)}
    assert tree[v1].children == (v2, *compared.versions)
    assert tree[v2].children == (v3,) and len(repo.sessions()) == 1
    # no target: a new session, as before
    assert versions.record_outcome(repo, DOC, outcome("head")).session != first.session


@pytest.mark.parametrize(("target", "message"), [
    (versions.Target(99), "there is no session 99"),
    (versions.Target(None, 99), "there is no version 99"),
    (versions.Target("other"), "is on another document \\(other.txt\\), not on harbour.txt"),
    (versions.Target(1, "other"), "is in session 2, not in session 1"),
])  # fmt: skip
def test_a_target_that_does_not_fit_is_one_sentence_and_writes_nothing(
    repo: Repository, target: versions.Target, message: str
) -> None:
    mine = versions.record_outcome(repo, DOC, outcome("head"))
    other = versions.record_outcome(repo, OTHER, outcome("head"))
    if target.parent == "other":
        target = versions.Target(mine.session, other.versions[0])
    elif target.session == "other":
        target = versions.Target(other.session)
    before = repo.history()
    with pytest.raises(BadRequest, match=message):
        versions.check_target(repo, DOC, target)
    with pytest.raises(RepositoryError, match=message):  # recording says so too
        versions.record_outcome(repo, DOC, outcome("tail"), target)
    assert repo.history() == before


def test_diff_shows_the_replies_and_an_old_version_opens(repo: Repository) -> None:
    first = versions.record_outcome(repo, DOC, outcome("head", reply="The boats go out."))
    [v1] = first.versions
    copy = repo.rollback(v1)  # asks the same; answers once run
    again = versions.record_resumed(repo, copy, outcome("head", reply="Dawn.").results[0])
    assert again.parent == v1
    diff = repo.diff(v1, copy.id)
    assert "-The boats go out." in diff and "+Dawn." in diff and "strategy" not in diff
    never = repo.branch(v1, prompt="Other.")
    assert "+finish: (not run)" in repo.diff(v1, never.id)
    opened = versions.open_version(repo, v1)
    assert opened.version.id == v1 and opened.finish_reason == "stop"
    assert opened.outputs[0]["text"] == "The boats go out.\nMore."
    assert opened.document_sha256 == DOC.sha256
    assert opened.plan is not None and opened.plan.kept == (Span(0, 40, 10, "head"),)
    assert opened.plan.dropped == (Span(40, 80, 10, "cut"),)
    assert opened.is_its_plan(opened.plan)  # a plan made again is shown only when it matches
    assert not opened.is_its_plan(Plan("head", 101, 200, opened.plan.kept, ()))
    assert versions.latest_line(repo, DOC) == (first.session, never.id)
    assert versions.latest_line(repo, OTHER) is None


def test_the_windows_run_survives_a_deletion_of_its_place(repo: Repository) -> None:
    """The version (then the session) a Run was made from is deleted while it runs: it goes
    under the session's newest version (then into a new session), never lost."""
    first = versions.record_outcome(repo, DOC, outcome("head"))
    [v1] = first.versions
    [v2] = versions.record_outcome(repo, DOC, outcome("tail"), versions.Target(None, v1)).versions
    [v3] = versions.record_outcome(repo, DOC, outcome("head"), versions.Target(None, v1)).versions
    repo.delete_version(v3)
    moved = versions.record_continuing(repo, DOC, outcome("middle"),
                                       versions.Target(first.session, v3))  # fmt: skip
    assert (moved.session, moved.parent) == (first.session, v2)
    repo.delete_session(first.session)
    fresh = versions.record_continuing(repo, DOC, outcome("middle"),
                                       versions.Target(first.session, moved.versions[0]))
    assert fresh.session != first.session and fresh.parent is None


def asked(questions: tuple[str, ...], answers: tuple[str, ...]) -> JobOutcome:
    """An ask job's end: one "answer i" output per question."""
    outputs = [OutputSpan(f"answer {i + 1}", a, ((0, 40),), 1, "stop")
               for i, a in enumerate(answers)]  # fmt: skip
    result = JobResult("ask", "head", "stop", 512, prompt_tokens=60, outputs=outputs)
    return JobOutcome(JobSpec("ask", ("head",), questions=questions), results=[result],
                      engine=FACTS)  # fmt: skip


def test_the_thread_is_the_questions_along_the_line_of_work(repo: Repository) -> None:
    first = versions.record_outcome(repo, DOC, asked(("Where?",), ("At the harbour.",)))
    [q1] = first.versions
    to = versions.Target(first.session, q1)
    [summary] = versions.record_outcome(repo, DOC, outcome("head"), to).versions
    to = versions.Target(first.session, summary)
    [q2] = versions.record_outcome(repo, DOC, asked(("When?", "Who?"), ("At dawn.", "Boats.")),
                                   to).versions  # fmt: skip
    # a branch from q1: not on q2's line
    [aside] = versions.record_outcome(repo, DOC, asked(("Why?",), ("No one says.",)),
                                      versions.Target(first.session, q1)).versions  # fmt: skip

    turns = versions.thread(repo, q2)
    assert [(t.version, t.question, t.answer) for t in turns] == [
        (q1, "Where?", "At the harbour."), (q2, "When?", "At dawn."), (q2, "Who?", "Boats."),
    ]  # the summary between them is passed over
    assert [t.number for t in turns] == [1, 3, 3] and turns[0].finish_reason == "stop"
    assert [t.question for t in versions.thread(repo, aside)] == ["Where?", "Why?"]
    assert versions.thread(repo, summary)[-1].version == q1
    # a rollback of q2 asks what q2 asked: its turns take q2's place, not repeat them
    again = repo.rollback(q2).id
    assert [(t.version, t.question) for t in versions.thread(repo, again)] == [
        (q1, "Where?"), (again, "When?"), (again, "Who?")]
