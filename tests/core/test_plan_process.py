"""Planning in a child process: the same plans and counts as in this process, stale requests
skipped, a dead child replaced, a changed file refused, plans asked again answered without
planning again, and jobs that run the plans handed in."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.default_model import default_model_path
from app.core.documents import Document, DocumentError, document_from_text, load_document
from app.core.jobs.tasks import JobFinished, PlanReady, StrategiesFinished, planning, run_strategies
from app.core.paths import sample_document
from app.core.planning import strategies as strategies_module
from app.core.planning.process import DocumentChanged, PlanProcess, PlanProcessError, Superseded
from app.core.planning.strategies import Planner, plan_for
from app.core.tokens import (
    CL100K_KEY,
    LlamaCounter,
    TokenCounter,
    cl100k,
    counter_for_key,
    counter_key,
    gguf_encoding,
)

DATA = Path(__file__).resolve().parents[1] / "data"
TASK = "Summarize the document."


@pytest.fixture(scope="module", autouse=True)
def _cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Children keep plans under a folder of this module's own (they inherit the variable)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def process() -> Iterator[PlanProcess]:
    p = PlanProcess()
    yield p
    p.close()


@pytest.fixture(scope="module")
def lexicon(tmp_path_factory: pytest.TempPathFactory) -> Document:
    """300 KB of the sample text: ~70k tokens, many chunks under a 2k context."""
    path = tmp_path_factory.mktemp("docs") / "lexicon.txt"
    path.write_text(sample_document().read_text(encoding="utf-8")[:300_000], encoding="utf-8")
    return load_document(path)


@pytest.fixture(scope="module")
def part(tmp_path_factory: pytest.TempPathFactory) -> Document:
    """3 KB of the sample: more than a 512-token context, quick to run through the model."""
    path = tmp_path_factory.mktemp("docs") / "part.md"
    path.write_text(sample_document().read_text(encoding="utf-8")[20_000:23_000], encoding="utf-8")
    return load_document(path)


def _counter(key: str, model_path: Path) -> TokenCounter:
    return cl100k() if key == CL100K_KEY else gguf_encoding(model_path)


@pytest.mark.parametrize("which", ["cl100k", "model"])
def test_plans_from_the_child_equal_the_plans_made_here(
    process: PlanProcess, lexicon: Document, model_path: Path, which: str
) -> None:
    counter = cl100k() if which == "cl100k" else gguf_encoding(model_path)
    key = counter_key(counter)
    assert key is not None
    docs = [lexicon] + [load_document(DATA / n) for n in ("sample.md", "sample.html", "sample.pdf")]
    for doc in docs:
        here = Planner(doc, counter)
        n_ctx = 2048 if doc is lexicon else 256
        for strategy in ("head", "entropy", "map-reduce", "rolling"):
            args = {"n_ctx": n_ctx, "reserve": 32, "instruction": TASK}
            theirs = process.plan(doc, key, strategy, model=model_path, **args)
            ours = plan_for(here, strategy, model_path, **args)
            assert theirs == ours, f"{strategy} on {doc.name}"
            assert theirs.chunks and theirs.total_tokens == ours.total_tokens
        if doc is lexicon:  # a plan of many chunks, several kept and dropped spans
            assert len(ours.chunks) > 100 and len(ours.windows) > 10


def test_counts_in_the_child_equal_counts_here(
    process: PlanProcess, lexicon: Document, model_path: Path
) -> None:
    for key in (CL100K_KEY, counter_key(gguf_encoding(model_path))):
        assert key is not None
        expected = _counter(key, model_path).count(lexicon.text)
        assert process.count(lexicon, key) == expected > 50_000


@pytest.mark.unit
def test_counter_keys_name_what_the_child_can_rebuild(model_path: Path) -> None:
    fast = gguf_encoding(model_path)
    assert counter_key(cl100k()) == CL100K_KEY and counter_for_key(CL100K_KEY) is cl100k()
    assert counter_key(fast) == str(model_path.resolve())
    rebuilt = counter_for_key(str(model_path.resolve()))
    assert rebuilt.exact and rebuilt.encode("Hello, world!") == fast.encode("Hello, world!")
    assert counter_key(LlamaCounter(lambda text, special: [], name="x")) is None


def test_a_superseded_request_is_skipped_before_it_reaches_the_child(
    lexicon: Document, model_path: Path
) -> None:
    p = PlanProcess()
    try:
        stale, newest = p.ticket(), p.ticket()
        with pytest.raises(Superseded):
            p.plan(lexicon, CL100K_KEY, "head", model=None, n_ctx=2048, reserve=32,
                   instruction=TASK, ticket=stale)  # fmt: skip
        assert p.pid is None, "a skipped request starts no child"
        plan = p.plan(lexicon, CL100K_KEY, "head", model=None, n_ctx=2048, reserve=32,
                      instruction=TASK, ticket=newest)  # fmt: skip
        assert plan.kept and p.pid is not None
    finally:
        p.close()


def test_a_running_plan_finishes_though_a_newer_ticket_arrives(lexicon: Document) -> None:
    p = PlanProcess()
    try:
        results: list[object] = []
        first = p.ticket()
        worker = threading.Thread(target=lambda: results.append(
            p.plan(lexicon, CL100K_KEY, "entropy", model=None, n_ctx=2048, reserve=32,
                   instruction=TASK, ticket=first)))  # fmt: skip
        worker.start()
        _wait_for(lambda: p.pid is not None)  # the request is in the child
        queued = p.ticket() - 1  # what a request issued now, then replaced, would hold
        p.ticket()
        worker.join(120)
        assert results and results[0].strategy == "entropy"  # type: ignore[attr-defined]
        with pytest.raises(Superseded):
            p.count(lexicon, CL100K_KEY, ticket=queued)
    finally:
        p.close()


def test_a_killed_child_costs_one_clear_error_then_a_new_one_starts(
    tmp_path: Path, model_path: Path
) -> None:
    path = tmp_path / "long.txt"
    path.write_text(sample_document().read_text(encoding="utf-8") * 2, encoding="utf-8")
    doc = load_document(path)
    p = PlanProcess()
    try:
        errors: list[Exception] = []

        def plan() -> None:
            try:
                p.plan(doc, CL100K_KEY, "entropy", model=None, n_ctx=2048, reserve=32,
                       instruction=TASK)  # fmt: skip
            except Exception as exc:
                errors.append(exc)

        worker = threading.Thread(target=plan)
        worker.start()
        _wait_for(lambda: p.pid is not None)
        killed = p.pid
        time.sleep(0.5)  # the child is importing, or reading 3 MB: seconds from an answer
        os.kill(killed, signal.SIGKILL)  # type: ignore[arg-type]
        worker.join(60)
        [error] = errors
        assert isinstance(error, PlanProcessError)
        assert str(error) == (
            "The planning process stopped (killed by SIGKILL); the next plan starts a new one."
        )
        assert p.count(doc, CL100K_KEY) == cl100k().count(doc.text)
        assert p.pid is not None and p.pid != killed
    finally:
        p.close()


def test_a_document_changed_on_disk_is_refused_in_one_sentence(
    process: PlanProcess, tmp_path: Path
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("First version of the notes.\n" * 50, encoding="utf-8")
    doc = load_document(path)
    path.write_text("Second version, edited after it was opened.\n" * 50, encoding="utf-8")
    with pytest.raises(DocumentChanged) as err:
        process.plan(doc, CL100K_KEY, "head", model=None, n_ctx=256, reserve=16, instruction=TASK)
    said = "notes.txt changed on disk since it was opened; open it again to plan it."
    assert str(err.value) == said
    reopened = load_document(path)  # what the window does next
    assert process.count(reopened, CL100K_KEY) == cl100k().count(reopened.text)


def test_a_file_swapped_after_opening_is_never_parsed_by_the_planning_child(
    process: PlanProcess, tmp_path: Path
) -> None:
    """Review round 3, row 6: the child parsed the file again, without the reader's memory cap,
    before it compared hashes: an HTML swapped for a 200k-element one was parsed with RLIMIT_AS
    unlimited. Now text is hashed before it is decoded, and HTML, PDF and DOCX are parsed only
    in the reader's capped child, their hash compared after: the refusal is the changed
    file's."""
    path = tmp_path / "page.html"
    path.write_text("<html><body>" + "<p>An opened page.</p>" * 50 + "</body></html>", "utf-8")
    doc = load_document(path)
    path.write_bytes(b"%PDF-1.4\n" + b"\x00 not a pdf the reader could parse " * 1000)
    with pytest.raises(DocumentChanged, match=r"page\.html changed on disk since it was opened"):
        process.plan(doc, CL100K_KEY, "head", model=None, n_ctx=256, reserve=16, instruction=TASK)


def test_errors_in_the_child_come_back_with_its_words(process: PlanProcess, tmp_path: Path) -> None:
    path = tmp_path / "gone.txt"
    path.write_text("Soon deleted.\n", encoding="utf-8")
    doc = load_document(path)
    with pytest.raises(ValueError, match="unknown strategy 'sideways'"):
        process.plan(doc, CL100K_KEY, "sideways", model=None, n_ctx=256, reserve=16,
                     instruction=TASK)  # fmt: skip
    path.unlink()
    other = load_document(DATA / "sample.md")
    process.count(other, CL100K_KEY)  # the child now holds another document
    with pytest.raises(DocumentError, match=r"gone\.txt"):
        process.count(doc, CL100K_KEY)
    with pytest.raises(ValueError, match="no file"):
        process.count(document_from_text("pasted text"), CL100K_KEY)


def test_close_ends_the_child_and_later_requests_are_dropped(lexicon: Document) -> None:
    p = PlanProcess()
    assert p.count(lexicon, CL100K_KEY) > 0
    pid = p.pid
    assert pid is not None
    p.close()
    assert p.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone, and reaped
    with pytest.raises(Superseded):
        p.count(lexicon, CL100K_KEY)
    p.close()  # twice is fine


def _long_document(folder: Path) -> Document:
    path = folder / "long.txt"
    path.write_text(sample_document().read_text(encoding="utf-8") * 2, encoding="utf-8")
    return load_document(path)


def _plan_in_background(p: PlanProcess, doc: Document) -> tuple[threading.Thread, list[object]]:
    """A long plan started on a thread, once the child is up: (the thread, its outcome)."""
    outcome: list[object] = []

    def plan() -> None:
        try:
            outcome.append(p.plan(doc, CL100K_KEY, "entropy", model=None, n_ctx=2048,
                                  reserve=32, instruction=TASK))  # fmt: skip
        except Exception as exc:
            outcome.append(exc)

    worker = threading.Thread(target=plan)
    worker.start()
    _wait_for(lambda: p.pid is not None)
    return worker, outcome


def test_close_does_not_wait_for_a_plan_in_flight(tmp_path: Path) -> None:
    p = PlanProcess()
    worker, outcome = _plan_in_background(p, _long_document(tmp_path))
    t0 = time.monotonic()
    p.close()
    worker.join(30)
    assert time.monotonic() - t0 < 5
    assert [type(o) for o in outcome] == [Superseded]


def test_cancel_stops_the_plan_in_flight_and_the_next_one_works(tmp_path: Path) -> None:
    p = PlanProcess()
    try:
        assert not p.cancel()  # nothing in flight: nothing to stop
        worker, outcome = _plan_in_background(p, _long_document(tmp_path))
        first = p.pid
        t0 = time.monotonic()
        assert p.cancel()
        worker.join(30)
        assert time.monotonic() - t0 < 5
        assert [type(o) for o in outcome] == [Superseded]
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)  # type: ignore[arg-type]
        small = load_document(DATA / "sample.md")
        plan = p.plan(small, CL100K_KEY, "head", model=None, n_ctx=512, reserve=32,
                      instruction=TASK)  # fmt: skip
        assert plan.kept and p.pid != first
    finally:
        p.close()


# ----- no work twice ----------------------------------------------------------------------


def _growth(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def test_switching_strategy_back_is_answered_without_the_child(
    process: PlanProcess, lexicon: Document, model_path: Path
) -> None:
    key = counter_key(gguf_encoding(model_path))
    assert key is not None
    args = {"model": model_path, "n_ctx": 1900, "reserve": 40, "instruction": TASK}
    before, asked = process.child_stats(), dataclasses.replace(process.stats)
    first = process.plan(lexicon, key, "head", **args)
    process.plan(lexicon, key, "semantic", **args)
    assert process.plan(lexicon, key, "head", **args) is first  # A -> B -> A
    grown = _growth(before, process.child_stats())
    assert grown["plans_made"] == 2 and grown["plans_reused"] == 0
    assert process.stats.asked - asked.asked == 3
    assert process.stats.answered_here - asked.answered_here == 1


def test_a_reopened_document_after_a_restart_is_neither_read_nor_counted(
    process: PlanProcess, lexicon: Document, model_path: Path, tmp_path: Path
) -> None:
    key = counter_key(gguf_encoding(model_path))
    assert key is not None and lexicon.path is not None
    args = {"model": model_path, "n_ctx": 1700, "reserve": 40, "instruction": TASK}
    made = {s: process.plan(lexicon, key, s, **args) for s in ("middle", "map-reduce")}
    total = process.count(lexicon, key)
    copy = tmp_path / "moved" / "lexicon.txt"  # the same bytes, opened from another folder
    copy.parent.mkdir()
    copy.write_bytes(lexicon.path.read_bytes())
    reopened = load_document(copy)
    restarted = PlanProcess()  # a new window, a new child: nothing in memory
    try:
        for strategy, plan in made.items():
            assert restarted.plan(reopened, key, strategy, **args) == plan
        assert restarted.count(reopened, key) == total
        stats = restarted.child_stats()
    finally:
        restarted.close()
    assert stats["documents_read"] == 0, "the child read the file for work it had done"
    assert stats["plans_made"] == stats["chunkings_made"] == stats["counts_made"] == 0
    assert stats["plans_reused"] == 2 and stats["counts_reused"] == 1 and stats["disk_reads"] == 3


def test_changed_bytes_are_planned_anew_not_served_stale(
    process: PlanProcess, tmp_path: Path
) -> None:
    path = tmp_path / "notes.md"
    path.write_text((DATA / "sample.md").read_text(encoding="utf-8"), encoding="utf-8")
    args = {"n_ctx": 300, "reserve": 16, "instruction": TASK}
    before = process.plan(load_document(path), CL100K_KEY, "tail", model=None, **args)
    path.write_text(path.read_text(encoding="utf-8") + "\nA new closing paragraph.\n",
                    encoding="utf-8")  # fmt: skip
    edited = load_document(path)
    after = process.plan(edited, CL100K_KEY, "tail", model=None, **args)
    assert after == plan_for(Planner(edited, cl100k()), "tail", None, **args) != before


# ----- jobs run the plans made in the child -------------------------------------------------


JOBS = [  # every instruction and reserve a job plans with: summarize, its parts, rolling, ask
    ("summarize", ["head", "map-reduce", "rolling"], {}),
    ("ask", ["tail"], {"questions": ["Who wrote it?"]}),
]


@pytest.mark.parametrize("job", JOBS, ids=["summarize", "ask"])
def test_a_job_given_the_childs_plans_runs_them_without_planning_again(
    process: PlanProcess, engine: object, part: Document, monkeypatch: pytest.MonkeyPatch,
    job: tuple[str, list[str], dict[str, object]],
) -> None:  # fmt: skip
    task, strategies, options = job
    doc = part
    n_ctx, max_tokens = 512, 8
    model_path = default_model_path()
    counter = gguf_encoding(model_path)
    key = counter_key(counter)
    assert key is not None
    seeded = Planner(doc, counter)
    for strategy in strategies:
        instruction, reserve = planning(task, strategy, counter, max_tokens=max_tokens,
                                        questions=options.get("questions", ()))  # type: ignore[arg-type]  # fmt: skip
        seeded.remember(process.plan(doc, key, strategy, model=model_path, n_ctx=n_ctx,
                                     reserve=reserve, instruction=instruction))  # fmt: skip
    chunked: list[int] = []  # the chunk sizes the document was cut with, in this process
    real_chunk_document = strategies_module.chunk_document

    def spy(*args: object, **kwargs: object) -> object:
        chunked.append(args[2])  # type: ignore[arg-type]
        return real_chunk_document(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(strategies_module, "chunk_document", spy)

    jobs = run_strategies(engine, doc.text, counter, task=task, strategies=strategies,  # type: ignore[arg-type]
                   planner=seeded, n_ctx=n_ctx, max_tokens=max_tokens, **options)  # fmt: skip
    events = list(jobs)
    assert isinstance(events[-1], StrategiesFinished)
    ready = [e for e in events if isinstance(e, PlanReady)]
    results = [e.result for e in events if isinstance(e, JobFinished)]
    assert [r.strategy for r in ready] == strategies
    assert chunked == [], "the job planned again instead of running the plans handed in"
    here = Planner(doc, counter)  # the same plans, made in this process at the job's budgets
    for event, result in zip(ready, results, strict=True):
        plan = here.plan(event.strategy, event.budget)
        assert seeded.plan(event.strategy, event.budget) == plan
        shown = {k: v for k, v in plan.as_dict().items() if k not in ("kept", "dropped")}
        assert result.plan == shown | {"seconds": result.plan["seconds"]}
        assert result.outputs and result.finish_reason in ("stop", "length")
    assert chunked, "a planner without those plans chunks the document"


def _wait_for(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
