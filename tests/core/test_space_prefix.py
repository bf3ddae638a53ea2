"""Chunks tokenized apart on a SentencePiece model that adds a space prefix (Llama 2, Mistral,
Phi-3, Baichuan): llama.cpp puts '▁' before every text it tokenizes from the start, so each
chunk the jobs tokenized on its own reached the model as ' chunk', one space more than the
document has at every chunk boundary, and the audit reported each as text changed.

The jobs now tokenize a chunk, and the words after the document, as they stand inside a prompt
(``continuation``: llama.cpp's vocabulary with ``tokenizer.ggml.add_space_prefix`` overridden
to false), and the plans count them the same way. Proven here end to end on a one-layer model of
random weights around llama.cpp's own Llama 2 vocabulary test file (tests/core/tiny_models.py):
the jobs run, pass the audit, and the model sees the document's text exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.documents import load_document
from app.core.engine.host import EngineHost
from app.core.engine.types import LoadSettings
from app.core.jobs.audit import Audit
from app.core.jobs.tasks import JobFinished, PlanReady, ask, summarize
from app.core.planning.strategies import Planner
from app.core.tokens import TokenCounter, counter_for_key, counter_key, host_counter
from app.core.vocab_tokenizer import VocabCounter
from tests.conftest import DATA
from tests.core.tiny_models import tiny_model, vocab_file

N_CTX = 256
TEXT = (DATA / "sample.py").read_text(encoding="utf-8")  # many lines: many chunks


@pytest.fixture(scope="module")
def llama2(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EngineHost, Path, TokenCounter]]:
    vocab = vocab_file("llama-spm")
    if not vocab.exists():
        pytest.fail(f"{vocab} is missing: run `make test`, which fetches llama.cpp's vocabularies")
    path = tiny_model(vocab, tmp_path_factory.mktemp("tiny") / "tiny-llama-spm.gguf")
    with EngineHost() as host:
        host.load(path, LoadSettings(n_ctx=N_CTX))
        yield host, path, host_counter(path, host)


def test_a_chunk_continues_the_prompt_without_the_space_prefix(
    llama2: tuple[EngineHost, Path, TokenCounter],
) -> None:
    host, path, counter = llama2
    text = "Hello world.\n\nThe second paragraph"
    whole = host.tokenize(text, add_special=False)
    inside = host.tokenize(text, add_special=False, continuation=True)
    assert whole != inside  # '▁Hello' from the start, 'Hello' inside a prompt
    assert host.detokenize(inside) == text and host.detokenize(whole) == " " + text
    assert host.tokenize(" " + text, add_special=False, continuation=True) == whole
    # The fast counter the plans use counts the same tokens, and so does the one a planning
    # child rebuilds from its key; a whole-text counter keeps llama.cpp's count of a file.
    assert isinstance(counter, VocabCounter) and counter.continuation
    assert counter.encode(text) == inside
    rebuilt = counter_for_key(counter_key(counter) or "")
    assert rebuilt.encode(TEXT) == host.tokenize(TEXT, add_special=False, continuation=True)
    assert host_counter(path, host, continuation=False).encode(text) == whole


@pytest.mark.parametrize("strategy", ["head", "map-reduce"])
def test_jobs_show_the_model_the_document_exactly(
    llama2: tuple[EngineHost, Path, TokenCounter], strategy: str
) -> None:
    """Every chunk's tokens are its own text inside a prompt, their pieces spell the document
    without an added space, and their number is what the plan counted (the audit); the whole
    prompt of a one-call job is the frame around the kept text, character for character."""
    host, _path, counter = llama2
    planner = Planner(load_document_text(), counter)
    audit = Audit(host, exact_counts=True)
    run = ask if strategy == "map-reduce" else summarize
    kwargs = {"questions": ["What does bisect do?"]} if run is ask else {}
    events = list(run(host, planner.text, counter, strategy=strategy, n_ctx=N_CTX, max_tokens=4,
                      audit=audit, planner=planner, **kwargs))  # fmt: skip
    audit.raise_if_failed()
    [ready] = [ev for ev in events if isinstance(ev, PlanReady)]
    [done] = [ev for ev in events if isinstance(ev, JobFinished)]
    assert done.result.error is None and audit.counts.chunks >= 2
    if strategy == "head":
        kept = "".join(
            planner.text[s.start : s.end] for s in planner.plan("head", ready.budget).kept
        )
        assert host.detokenize(done.result.final_prompt) == f"Document:\n\n{kept}\n\nSummary:"


def load_document_text() -> str:
    return load_document(DATA / "sample.py").text
