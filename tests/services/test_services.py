"""The use cases both faces call, on the real engine and a real SQLite file: a job checked once,
run as events, recorded as one VersionContent, recognised as done, resumed from its KV state."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.core.documents import load_document
from app.core.engine.types import LoadSettings, SamplingSettings
from app.core.jobs.tasks import JobFinished, JobResult, TokenBatch
from app.services import versions
from app.services.errors import BadOption, BadRequest
from app.services.job_engine import JobEngine
from app.services.jobs import EngineFacts, JobSpec
from app.store.repository import Entry

DATA = Path(__file__).resolve().parents[1] / "data"
N_CTX = 512


@pytest.fixture(scope="module")
def job_engine(model_path: Path) -> object:
    """The engine jobs run on (JobEngine), the default model loaded, shared by the module."""
    with JobEngine() as s:
        s.load(model_path, LoadSettings(n_ctx=N_CTX))
        yield s


@pytest.mark.unit
@pytest.mark.parametrize(("spec", "message"), [
    (JobSpec("translate", ("head",)), "unknown task 'translate'"),
    (JobSpec("summarize", ("best",)), "unknown strategy 'best'"),
    (JobSpec("summarize", ()), "choose at least one strategy"),
    (JobSpec("ask", ("head",)), "ask needs at least one question"),
    (JobSpec("ask", ("head",), questions=("  ",)), "ask needs at least one question"),
    (JobSpec("extract", ("head",)), "extract needs an instruction"),
    (JobSpec("summarize", ("head", "retrieve")), "^retrieve needs a question to rank the "
                                                 "document against: ask a question, or extract "
                                                 "with an instruction$"),
])  # fmt: skip
def test_a_job_that_cannot_run_is_refused_in_one_sentence(spec: JobSpec, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        spec.check()


@pytest.mark.unit
def test_an_option_out_of_range_names_the_option_for_each_face() -> None:
    with pytest.raises(BadOption) as caught:
        JobSpec("summarize", ("head",), max_tokens=0).check()
    assert (caught.value.option, caught.value.problem) == ("max_tokens", "must be at least 1")
    with pytest.raises(BadOption, match="lanes must be between 0"):
        JobSpec("summarize", ("head",), lanes=65).check()


def test_a_run_is_recorded_once_recognised_and_resumed_from_its_kv_state(
    job_engine: JobEngine, tmp_path: Path
) -> None:
    doc = load_document(DATA / "sample.md")
    spec = JobSpec("summarize", ("head", "tail"), max_tokens=8, keep_kv=True)
    run = job_engine.run(doc.text, spec)
    events = list(run)
    outcome = run.outcome
    assert [r.strategy for r in outcome.results] == ["head", "tail"]
    assert sum(isinstance(e, JobFinished) for e in events) == 2
    assert set(outcome.states) == {0, 1}  # kept after each strategy
    facts = job_engine.facts()
    assert (facts.engine, facts.kv_cache_type, len(facts.model_sha256)) == ("local", "f16", 64)

    with versions.history(tmp_path / "h.db") as h:
        assert outcome.engine == facts
        recorded = versions.record_outcome(h.repo, doc, outcome)
        assert len(recorded.versions) == 2 and recorded.session > 0
        # the same job on the same document: done; the model named by another path: still done
        relative = EngineFacts(os.path.relpath(facts.model_label), facts.model_sha256,
                               "local", "f16")  # fmt: skip
        first = JobSpec("summarize", ("head",), max_tokens=8)
        assert versions.done_before(h.repo, doc, first, N_CTX, relative) == recorded.versions[0]
        # anything that changes the reply is another job
        for other in (JobSpec("summarize", ("head",), max_tokens=9),
                      JobSpec("summarize", ("head",), max_tokens=8,
                              sampling=SamplingSettings(temperature=0.7))):  # fmt: skip
            assert versions.done_before(h.repo, doc, other, N_CTX, facts) is None
        q8 = EngineFacts(facts.model_label, facts.model_sha256, "local", "q8_0")
        assert versions.done_before(h.repo, doc, first, N_CTX, q8) is None

        version = h.repo.get_version(recorded.versions[0])
        resume = versions.resume_spec(h.repo, version, model_sha256=facts.model_sha256,
                                      n_ctx=N_CTX, cache_type="f16")  # fmt: skip
        assert resume is not None and resume.saved_version == version.id
        resumed = job_engine.resume(resume)
        text = "".join(e.text for e in resumed if isinstance(e, TokenBatch))
        [result] = resumed.outcome.results
        assert result.evaluated_tokens == 1 and text.strip() == outcome.results[0].outputs[-1].text
        changed = versions.record_resumed(h.repo, version, result)
        assert changed.versions == (version.id,) and len(h.repo.runs(version.id)) == 2


@pytest.mark.unit
def test_a_server_version_has_no_state_to_resume(tmp_path: Path) -> None:
    doc = load_document(DATA / "sample.md")
    with versions.history(tmp_path / "h.db") as h:
        content = versions.version_content(
            JobSpec("summarize", ("head",)), "head", N_CTX,
            EngineFacts("http://127.0.0.1:1 m", "", "http://127.0.0.1:1", None),
        )  # fmt: skip
        [vid] = h.repo.record(doc, doc.name, [Entry(content, _result())])
        with pytest.raises(BadRequest, match="keeps no KV state"):
            versions.resume_spec(h.repo, h.repo.get_version(vid), model_sha256="")


@pytest.mark.unit
def test_no_model_loaded_is_one_sentence() -> None:
    with JobEngine() as s, pytest.raises(BadRequest, match="load a model"):
        s.run("text", JobSpec("summarize", ("head",)))


def _result() -> JobResult:
    return JobResult("summarize", "head", "stop", N_CTX)
