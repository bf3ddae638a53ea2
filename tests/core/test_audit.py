"""The faithfulness audit on the real engine: it passes for every strategy and job on real
documents (English, Chinese, code, mixed), and it fails loudly when the model saw anything else.

``make test`` runs every strategy once and each job on each kind of document; ``SLOW=1`` runs
the whole matrix (every document × every strategy × every job).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from app.core.documents import Document, document_from_text, load_document
from app.core.engine.host import EngineHost
from app.core.engine.types import GenerationStats, KVUsage
from app.core.jobs.audit import Audit, AuditFailed, CallRecord, LaidSegment
from app.core.jobs.ring import Ring, SegmentKind
from app.core.jobs.tasks import (
    JobFinished,
    JobResult,
    ask,
    extract,
    resume,
    state_after,
    summarize,
)
from app.core.planning.chunking import Boundary, Chunk
from app.core.planning.retrieve import NEEDS_QUESTION
from app.core.planning.strategies import QUESTION_STRATEGIES, STRATEGIES, Planner
from app.core.tokens import TokenCounter
from tests.conftest import DATA
from tests.core.audit_corpus import AUDITED, CORPUS
from tests.engines import Counters, Hosts

N_CTX = 256  # small enough that every document overflows and every strategy has work to do
MAX_TOKENS = 8
TASKS = ("summarize", "ask", "extract")
# What `retrieve` ranks each document against (an ask's question, an extract's instruction):
# words the document holds, so that its plan keeps something to audit.
RETRIEVE = {
    "english": "Why does Ishmael go to sea when he feels grim?",
    "chinese": "圣人如何处无为之事？",
    "code": "How does insort keep the list sorted with a key?",
    "mixed": "Which settings file format is used for the migration?",
    "web": "What does the reading guide say about the Gettysburg Address?",
}


@dataclasses.dataclass
class Bench:
    """The engine, the model's own counter, and the corpus planned once per document."""

    host: EngineHost
    counter: TokenCounter
    docs: dict[str, tuple[Document, Planner]]

    def audited(self, kind: str, task: str, strategy: str) -> JobResult:
        """Run a job with the audit and require it to pass, having checked real work."""
        doc, planner = self.docs[kind]
        question = RETRIEVE[kind] if strategy in QUESTION_STRATEGIES else None
        result, audit = run_job(self.host, task, strategy, doc, self.counter, planner=planner,
                                question=question)  # fmt: skip
        audit.raise_if_failed()
        assert result.error is None, result.error
        AUDITED["jobs"] += 1
        AUDITED["calls"] += audit.counts.calls
        AUDITED["document_tokens"] += audit.counts.document_tokens
        AUDITED["documents"].add(kind)
        if strategy == "refuse":  # every document here overflows N_CTX: refused with numbers
            assert result.refused and "budget" in result.refused and audit.counts.calls == 0
        elif strategy in QUESTION_STRATEGIES and task == "summarize":  # a summary has none
            assert result.refused == NEEDS_QUESTION and audit.counts.calls == 0
        else:
            assert audit.counts.calls >= 1 and audit.counts.chunks >= 1
            assert audit.counts.document_tokens > 0 and audit.counts.template_tokens > 0
            if result.plan["kept_tokens"] < result.plan["total_tokens"]:
                assert result.truncated  # (the audit checks it too, from the text itself)
        return result


@pytest.fixture(scope="module")
def bench(make_host: Hosts, make_counter: Counters) -> Bench:
    host = make_host(n_ctx=N_CTX)
    counter = make_counter(host)
    docs = {}
    for kind, name in CORPUS.items():
        doc = load_document(DATA / name)
        docs[kind] = (doc, Planner(doc, counter))
    return Bench(host, counter, docs)


def run_job(
    engine: Any,
    task: str,
    strategy: str,
    doc: Document,
    counter: TokenCounter,
    *,
    planner: Planner | None = None,
    audited_by: Any = None,
    question: str | None = None,
) -> tuple[JobResult, Audit]:
    """One job with the audit on; the result and the audit (not yet asked to raise).
    ``audited_by``: the engine the audit reads (by default the job's); ``question``: the ask's
    question and the extract's instruction, in place of the usual ones."""
    audit = Audit(audited_by or engine, exact_counts=True)
    options: dict[str, Any] = {
        "strategy": strategy,
        "n_ctx": N_CTX,
        "max_tokens": MAX_TOKENS,
        "planner": planner or Planner(doc, counter),
        "audit": audit,
    }
    if task == "ask":
        events = ask(engine, doc.text, counter, questions=[question or "What is it about?"],
                     **options)  # fmt: skip
    elif task == "extract":
        events = extract(engine, doc.text, counter, instruction=question or "List the names.",
                         **options)  # fmt: skip
    else:
        events = summarize(engine, doc.text, counter, **options)
    result = next(ev.result for ev in events if isinstance(ev, JobFinished))
    return result, audit


# ----- the audit passes: make test -------------------------------------------------------------


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_summarizes_code_exactly_as_planned(bench: Bench, strategy: str) -> None:
    bench.audited("code", "summarize", strategy)


@pytest.mark.parametrize(
    "case",
    [
        ("chinese", "ask", "head"),
        ("chinese", "summarize", "rolling"),
        ("mixed", "extract", "tail"),
        ("mixed", "ask", "map-reduce"),
        ("english", "extract", "semantic"),
        ("english", "summarize", "middle"),
        ("web", "ask", "entropy"),
        ("chinese", "ask", "retrieve"),
        ("english", "extract", "retrieve"),
    ],
)
def test_jobs_on_chinese_mixed_and_english_run_exactly_as_planned(
    bench: Bench, case: tuple[str, str, str]
) -> None:
    bench.audited(*case)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CORPUS))
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_whole_matrix_runs_exactly_as_planned(
    bench: Bench, kind: str, task: str, strategy: str
) -> None:
    bench.audited(kind, task, strategy)


def test_a_resumed_run_holds_exactly_the_saved_prompt(bench: Bench) -> None:
    """A rollback restores the KV state and generates after it: the audit reads the cache back."""
    result = bench.audited("mixed", "summarize", "head")
    state = state_after(bench.host, result)
    assert state is not None
    bench.host.reset()
    audit = Audit(bench.host, exact_counts=True)
    events = resume(bench.host, state, len(result.final_prompt), task="summarize",
                    strategy="head", max_tokens=MAX_TOKENS,
                    sources=result.outputs[-1].source_spans, audit=audit)  # fmt: skip
    resumed = next(ev.result for ev in events if isinstance(ev, JobFinished))
    audit.raise_if_failed()
    assert resumed.evaluated_tokens == 1 and audit.counts.calls == 1
    assert audit.counts.template_tokens == len(result.final_prompt)  # the saved prompt, whole


# ----- the audit fails when the model saw something else ---------------------------------------


class _Proxy:
    """The real engine host, with one thing changed by a subclass."""

    def __init__(self, host: EngineHost) -> None:
        self._host = host

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)


def _findings(engine: Any, counter: TokenCounter, doc: Document, strategy: str = "head") -> str:
    _, audit = run_job(engine, "summarize", strategy, doc, counter)
    with pytest.raises(AuditFailed) as failed:
        audit.raise_if_failed()
    return str(failed.value)


def test_a_token_lost_on_the_way_to_the_model_is_found(bench: Bench) -> None:
    class DropsOne(_Proxy):
        def generate(self, prompt: Sequence[int], **kwargs: Any) -> Iterator[Any]:
            return self._host.generate([*prompt[:50], *prompt[51:]], **kwargs)

    report = _findings(DropsOne(bench.host), bench.counter, bench.docs["code"][0])
    assert "prompt: the KV cache differs from the prompt sent at position 50" in report
    assert "FAILED" in report


def test_text_that_is_not_the_documents_is_found(bench: Bench) -> None:
    class AddsASpace(_Proxy):  # a tokenizer that changes the text it is given
        def tokenize(self, text: str, **kwargs: Any) -> list[int]:
            special = kwargs.get("parse_special", False)
            return self._host.tokenize(text if special else text + " ", **kwargs)

    # a short document, so that the plan leaves room for the tokens the space adds
    doc = document_from_text(bench.docs["chinese"][0].text[:40])
    report = _findings(AddsASpace(bench.host), bench.counter, doc)
    assert "detokenize: chunk 0.." in report and "reached the model as" in report
    assert "count: chunk 0.." in report and "the plan counted" in report


def test_the_right_text_in_other_tokens_is_found(bench: Bench) -> None:
    """The job splits each chunk's text in two and tokenizes the halves apart: the pieces still
    spell the document, but the model sees other tokens than the text's own at the cut. Only a
    check by id finds it (llama.cpp, read by the audit, tokenizes the text whole)."""

    class SplitsText(_Proxy):
        def tokenize(self, text: str, **kwargs: Any) -> list[int]:
            if kwargs.get("parse_special", False) or len(text) < 2:
                return self._host.tokenize(text, **kwargs)
            half = len(text) // 2
            return [*self._host.tokenize(text[:half], **kwargs),
                    *self._host.tokenize(text[half:], **kwargs)]  # fmt: skip

    doc = document_from_text(bench.docs["code"][0].text[:400])
    _, audit = run_job(SplitsText(bench.host), "summarize", "head", doc, bench.counter,
                       audited_by=bench.host)  # fmt: skip
    checks = {f.check for f in audit.findings}
    assert "tokens" in checks and "detokenize" not in checks, audit.findings
    assert any("its text tokenizes to" in f.message for f in audit.findings)


def test_a_cache_that_holds_more_than_the_ring_is_found(bench: Bench) -> None:
    class OneCellMore(_Proxy):
        def kv_usage(self) -> KVUsage:
            usage = self._host.kv_usage()
            return dataclasses.replace(usage, cells_used=usage.cells_used + 1,
                                       pos_max=usage.pos_max + 1)  # fmt: skip

    report = _findings(
        OneCellMore(bench.host), bench.counter, bench.docs["mixed"][0], strategy="tail"
    )
    assert "ring: llama.cpp holds" in report and "the ring expects" in report


def test_a_run_that_hides_its_truncation_is_found(bench: Bench) -> None:
    doc, planner = bench.docs["english"]
    result, audit = run_job(bench.host, "summarize", "head", doc, bench.counter, planner=planner)
    audit.raise_if_failed()
    assert result.truncated
    audit.job_finished(dataclasses.replace(result, truncated=False))
    assert {f.check for f in audit.findings} == {"truncation"}
    assert any("never reached the model" in f.message for f in audit.findings)


def test_outputs_that_name_the_wrong_sources_are_found(bench: Bench) -> None:
    doc, planner = bench.docs["code"]
    result, audit = run_job(bench.host, "summarize", "tail", doc, bench.counter, planner=planner)
    audit.raise_if_failed()
    out = result.outputs[0]
    wrong = dataclasses.replace(out, source_spans=((0, 10),))  # the tail plan never kept 0..10
    audit.job_finished(dataclasses.replace(result, outputs=[wrong]))
    assert [f.check for f in audit.findings] == ["sources"]
    ring = Ring(N_CTX)
    ring.append(SegmentKind.CHUNK, 5, source=(3, 9))
    audit.batch("summary", ring, [(0, 10)], ring.version)
    assert "the context held [3..9]" in audit.findings[-1].message


def test_a_store_that_disagrees_with_the_run_is_found(bench: Bench) -> None:
    doc, planner = bench.docs["code"]
    result, audit = run_job(bench.host, "summarize", "head", doc, bench.counter, planner=planner)
    run = {"strategy": "head", "finish_reason": result.finish_reason, "truncated": False,
           "outputs": [{"step": o.step, "text": o.text} for o in result.outputs]}  # fmt: skip
    audit.check_stored(result, run)
    assert [str(f) for f in audit.findings] == [
        "summarize/head store: store: the store says truncated=False, the job said True"
    ]


def test_segments_at_the_wrong_positions_are_found(make_host: Hosts) -> None:
    """A ring that puts a segment where the cache holds something else."""
    host = make_host(n_ctx=N_CTX)
    host.reset()
    tokens = host.tokenize("One two three four five six.", add_special=False)
    host.evaluate(tokens)
    ring = Ring(N_CTX)
    first = ring.append(SegmentKind.SYSTEM, 2, pinned=True)
    chunk = ring.append(SegmentKind.CHUNK, len(tokens) - 2, source=(0, 5))
    audit = Audit(host)
    audit.job_started("summarize", "head", "One two three four five six.")
    planned = Chunk(0, 0, 5, len(tokens) - 2, Boundary.END)
    audit.planned([planned], [[planned]], dropped=False)
    laid = [LaidSegment(first, tuple(tokens[:2])), LaidSegment(chunk, tuple(reversed(tokens[2:])))]
    stats = GenerationStats(len(tokens), len(tokens), 0.0, 0, 0.0, "stop", len(tokens))
    audit.call_finished(CallRecord("summary", ring, laid, tokens, [], stats, [(0, 5)]))
    assert [f.check for f in audit.findings] == ["positions"]
    assert f"KV positions 2..{len(tokens) - 1} do not hold the chunk segment" in str(
        audit.findings[0]
    )
