"""ContextLens behind a real gateway: LiteLLM's proxy (tests/gateway.py) in front of two real
llama-servers, one address for both, as a team serves several machines.

A gateway answers the OpenAI paths only, so ContextLens sees an "openai-compatible" server: the
context is the one given (--n-ctx), counts and the chat template come from the same GGUF here
(--model), and what the gateway hides (/props, /tokenize, /slots) is said once. The gateway picks
a server for each request; a batch keeps several requests in flight through it and records every
document exactly once.

Serial: two servers, each pinned to a core of its own with one thread, beside the gateway and the
command. Under `make test` the set-up's llama-server and gateway must be there (they fail the
tests instead of skipping them: $CONTEXTLENS_REQUIRE_LLAMA_SERVER, $CONTEXTLENS_REQUIRE_GATEWAY).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK
from app.core.paths import sample_document
from tests.cli.runner import run
from tests.gateway import NO_GATEWAY, Gateway, gateway, gateway_executable
from tests.llama_servers import NO_LLAMA_SERVER, have_llama_server, llama_servers

pytestmark = pytest.mark.serial

N_CTX = 1024  # each server's context per slot
SLOTS = 2  # per server: 4 requests in flight through the gateway keep both busy
DOCUMENTS = 12
HIDDEN = "answers none of /props, /tokenize and /slots (a gateway in front of servers hides them)"


@pytest.fixture(scope="module", autouse=True)
def _built_by_the_setup() -> None:
    """Skipped where the set-up did not build them; under `make test`, a failure that says so."""
    needs = [
        (have_llama_server(), NO_LLAMA_SERVER, "CONTEXTLENS_REQUIRE_LLAMA_SERVER"),
        (gateway_executable() is not None, NO_GATEWAY, "CONTEXTLENS_REQUIRE_GATEWAY"),
    ]
    for here, reason, required in needs:
        if here:
            continue
        if os.environ.get(required) == "1":
            pytest.fail(f"{reason} (`make test` runs these tests)", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def through(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The gateway in front of two llama-servers, each on a core of its own when there are two."""
    logs = tmp_path_factory.mktemp("gateway")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = cpus[:2] if len(cpus) >= 2 else None
    with contextlib.ExitStack() as stack:
        servers = stack.enter_context(
            llama_servers(model_path, 2, logs, parallel=SLOTS, ctx_per_slot=N_CTX, threads=1,
                          cores=cores)
        )  # fmt: skip
        running = stack.enter_context(gateway([s.url for s in servers], logs))
        print(f"the gateway answered {running.started_s:.1f} s after its start")
        yield running


def _documents(folder: Path) -> list[Path]:
    folder.mkdir()
    text = sample_document().read_text(encoding="utf-8")
    paths = []
    for i in range(DOCUMENTS):
        path = folder / f"part-{i:02}.txt"
        path.write_text(text[40_000 + i * 20_000 :][:1200], encoding="utf-8")
        paths.append(path)
    return paths


def test_a_batch_through_the_gateway_records_every_document_once(
    through: Gateway, model_path: Path, tmp_path: Path
) -> None:
    paths = _documents(tmp_path / "docs")
    done = run("batch", str(tmp_path / "docs"), "--engine", through.url, "--model",
               str(model_path), "--n-ctx", str(N_CTX), "--strategy", "head", "--max-tokens",
               "16", "--concurrency", str(2 * SLOTS), "--db", str(tmp_path / "h.db"),
               "--json")  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    documents = [line for line in lines if line["type"] == "document"]
    assert sorted(d["path"] for d in documents) == [str(p) for p in paths]  # each once
    assert {d["status"] for d in documents} == {"done"}
    assert {d["finish_reason"] for d in documents} <= {"stop", "length"}  # never a cut reply
    assert all(d["output"].strip() for d in documents)
    summary = lines[-1]
    assert summary["type"] == "done" and summary["done"] == DOCUMENTS
    assert summary["failed"] == 0 and summary["not_run"] == 0
    assert done.stderr.count(HIDDEN) == 1, done.stderr  # said once, not per document


def test_what_the_gateway_hides_is_said_and_counts_come_from_the_gguf(
    through: Gateway, model_path: Path
) -> None:
    done = run("remote", "info", through.url, "--model", str(model_path), "--n-ctx", str(N_CTX),
               "--json")  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    info = json.loads(done.stdout)
    assert info["kind"] == "openai-compatible" and info["n_ctx"] == N_CTX
    assert info["tokenizer"] == f"local GGUF {model_path.name}" and info["exact_counts"]
    assert info["chat_template"] == f"local GGUF {model_path.name}"
    assert info["parallel_slots"] is None and info["kv_figures"] == "not reported by this server"
    (note,) = info["warnings"]
    assert HIDDEN in note and f"token counts come from the local GGUF {model_path.name}" in note
    # without --n-ctx the gateway's context is unknown: one sentence, no traceback
    refused = run("remote", "info", through.url, "--model", str(model_path))
    assert refused.returncode == EXIT_BAD_INPUT
    assert "does not report its context size" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
