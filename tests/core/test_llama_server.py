"""The remote engine against llama.cpp's own ``llama-server`` with parallel slots:
``$LLAMA_SERVER``, or the build of ``packaging/build-llama-server.sh`` that ``make setup``
makes (from the same llama.cpp as the wheel, cached outside the checkout). Under ``make test``
these tests fail when there is none ($CONTEXTLENS_REQUIRE_LLAMA_SERVER); run alone without the
build, they are skipped and say why. What only this server offers is checked for real: its
context and template from /props, KV figures from /slots, prompts sent as token ids, several
requests in flight, its own refusal of a prompt too long."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.engine.host import EngineHost
from app.core.engine.remote import RemoteEngine
from app.core.engine.remote_http import Connection
from app.core.engine.types import ContextOverflowError, LaneFinished, TextDelta
from app.core.jobs.tasks import JobFinished, summarize
from app.core.paths import sample_document
from app.core.planning.frame import ServerTemplate
from app.core.planning.strategies import Planner, plan_for
from tests.benchmarks.bench_remote import llama_server, start_llama_server

SLOTS, N_CTX = 4, 1024  # start_llama_server: --parallel 4, 1,024 tokens per slot
BINARY = llama_server()
NO_LLAMA_SERVER = "no llama-server here: run packaging/build-llama-server.sh or set LLAMA_SERVER"


@pytest.fixture(scope="module", autouse=True)
def _built_by_the_setup() -> None:
    """Skipped where nothing built the server; under `make test`, a failure that says so."""
    if BINARY is not None and BINARY.exists():
        return
    if os.environ.get("CONTEXTLENS_REQUIRE_LLAMA_SERVER") == "1":
        pytest.fail("llama-server is not built: `make setup` builds it "
                    "(packaging/build-llama-server.sh), and `make test` runs these tests",
                    pytrace=False)  # fmt: skip
    pytest.skip(NO_LLAMA_SERVER)


@pytest.fixture(scope="module")
def url(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert BINARY is not None
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    proc, address = start_llama_server(BINARY, model_path, log)
    yield address
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def llama_remote(url: str) -> Iterator[RemoteEngine]:
    """A remote engine connected to llama.cpp's own llama-server."""
    with RemoteEngine(Connection(url)) as engine:
        engine.connect()
        yield engine


def test_the_server_reports_context_slots_template_and_kv(llama_remote: RemoteEngine) -> None:
    info = llama_remote.info
    assert info.kind == "llama-server" and info.n_ctx == N_CTX and info.n_ctx_source == "/props"
    assert info.slots == SLOTS and info.kv_source == "/slots" and info.accepts_token_ids
    assert info.tokenizer == "the server (/tokenize)"
    assert info.chat_template == "the server (/props)"
    prompt = llama_remote.apply_chat_template([{"role": "user", "content": "hi"}])
    assert prompt.endswith("<|im_start|>assistant\n")


def test_a_plan_made_elsewhere_is_framed_by_the_servers_template(
    llama_remote: RemoteEngine,
) -> None:
    """The window plans with ServerInfo.frame: the budget must be the one the job computes."""
    assert isinstance(llama_remote.info.frame, ServerTemplate)
    text = sample_document().read_text(encoding="utf-8")[:8000]
    counter = llama_remote.counter()
    shown = plan_for(Planner(text, counter), "head", llama_remote.info.frame,
                     instruction="Summarize the document.", n_ctx=N_CTX, reserve=16)  # fmt: skip
    events = list(summarize(llama_remote, text, counter, strategy="head", n_ctx=N_CTX,
                            max_tokens=16))  # fmt: skip
    ran = next(e.result for e in events if isinstance(e, JobFinished))
    assert ran.plan["budget"] == shown.budget and ran.plan["kept_tokens"] == shown.kept_tokens


def test_a_reply_and_the_kv_figures_come_from_the_server(llama_remote: RemoteEngine,
                                                        engine: EngineHost) -> None:  # fmt: skip
    messages = [{"role": "user", "content": "Name three colours."}]
    prompt = llama_remote.tokenize(llama_remote.apply_chat_template(messages), parse_special=True)
    local = engine.tokenize(engine.apply_chat_template(messages), parse_special=True)
    assert prompt == local  # the same tokens, the server's /tokenize against llama.cpp here
    text = "".join(ev.text for ev in llama_remote.generate(prompt, max_tokens=24)
                   if isinstance(ev, TextDelta))  # fmt: skip
    assert text.strip()
    usage = llama_remote.kv_usage()
    assert usage.reported_by == "/slots" and usage.cells_used >= len(prompt)


def test_requests_run_in_parallel_slots(llama_remote: RemoteEngine) -> None:
    prefix = llama_remote.tokenize("<|im_start|>user\n", parse_special=True)
    suffixes = [llama_remote.tokenize(f"Say the number {i}.<|im_end|>\n<|im_start|>assistant\n",
                                parse_special=True) for i in range(6)]  # fmt: skip
    events = list(llama_remote.generate_lanes(prefix, suffixes, lanes=8, max_tokens=12))
    finished = [e for e in events if isinstance(e, LaneFinished)]
    assert sorted(e.index for e in finished) == list(range(6))
    assert {e.lane for e in finished} == set(range(SLOTS))  # never more than the server's slots


def test_a_prompt_too_long_is_refused_by_the_server_with_its_numbers(url: str) -> None:
    with RemoteEngine(Connection(url), n_ctx=N_CTX) as engine:
        engine.connect()
        # believe in a larger context than the server's, so the server itself refuses
        engine._info = replace(engine.info, n_ctx=N_CTX * 4)
        prompt = engine.tokenize("word " * (N_CTX + 50))
        with pytest.raises(ContextOverflowError) as exc:
            list(engine.generate(prompt, max_tokens=4))
    assert exc.value.n_ctx == N_CTX and exc.value.prompt_tokens >= N_CTX


def test_a_batch_keeps_four_documents_in_flight(url: str, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    text = sample_document().read_text(encoding="utf-8")
    for i in range(6):
        (folder / f"d{i}.txt").write_text(text[30_000 * (i + 1) :][:1500], encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "app.cli", "batch", str(folder), "--strategy",
                           "head", "--max-tokens", "16", "--engine", url, "--concurrency", "4",
                           "--db", str(tmp_path / "h.db"), "--json"], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["done"] == 6 and summary["failed"] == 0
