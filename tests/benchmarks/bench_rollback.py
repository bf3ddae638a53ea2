"""History: a rollback that resumes from the saved KV state, against evaluating the prompt again.

Run with ``make bench`` (or ``python tests/benchmarks/bench_rollback.py``). Each round asks a
question about a document of about ``--doc-tokens`` tokens (the ``ask`` job, ``head`` strategy),
records the version, its run and the KV state in a real SQLite history file (as
``contextlens-cli run --keep-kv`` does), then, from an empty KV cache:

- cold: the same prompt is sent to the engine and evaluated from scratch;
- rollback: ``Repository.rollback`` makes the new version, ``Repository.kv_state`` reads and
  decompresses the state from the database, and the ``resume`` job restores it and generates.

Both are timed from the start of the action to the first generated text, in the same process,
alternating. The replies must be identical (greedy decoding) and the rollback must evaluate one
prompt token. Goal (issue: history store): rollback / cold <= 0.10.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core.default_model import default_model_path, sha256_of  # noqa: E402
from app.core.engine.host import EngineHost  # noqa: E402
from app.core.engine.types import Finished, LoadSettings, TextDelta  # noqa: E402
from app.core.jobs.tasks import JobFinished, JobResult, TokenBatch, ask, resume  # noqa: E402
from app.core.tokens import exact_counter, host_tokenize  # noqa: E402
from app.store.db import open_database  # noqa: E402
from app.store.repository import Repository  # noqa: E402
from tests.benchmarks.bench_kv import QUESTIONS, document_text  # noqa: E402
from tests.benchmarks.report import parse_args, row, write_rows  # noqa: E402

MAX_TOKENS = 16


def asked(host: EngineHost, text: str, counter: object, question: str, n_ctx: int) -> JobResult:
    for ev in ask(host, text, counter, questions=[question], strategy="head", n_ctx=n_ctx,
                  max_tokens=MAX_TOKENS):  # fmt: skip
        if isinstance(ev, JobFinished):
            return ev.result
    raise AssertionError("the job ended without a result")


def cold(host: EngineHost, prompt: tuple[int, ...]) -> tuple[float, str, int]:
    """Seconds to the first text when the prompt is evaluated again; the reply; evaluated."""
    host.reset()
    t0 = time.perf_counter()
    first, parts, evaluated = None, [], 0
    for ev in host.generate(prompt, max_tokens=MAX_TOKENS):
        if isinstance(ev, TextDelta):
            first = first or time.perf_counter() - t0
            parts.append(ev.text)
        elif isinstance(ev, Finished):
            evaluated = ev.stats.prompt_eval_tokens
            first = first or time.perf_counter() - t0
    assert first is not None
    return first, "".join(parts).strip(), evaluated


def rolled_back(host: EngineHost, repo: Repository, version: int, sha: str,
                n_ctx: int) -> tuple[float, str, int]:  # fmt: skip
    """Seconds from the rollback to the first text, restoring the stored state; the reply."""
    host.reset()
    t0 = time.perf_counter()
    new = repo.rollback(version)
    saved = repo.kv_state(new.id, model_sha256=sha, n_ctx=n_ctx, cache_type="f16")
    assert saved is not None, "the state saved with the run was not found"
    first, result = None, None
    for ev in resume(host, saved.state, saved.prompt_tokens, task="ask", strategy="head",
                     max_tokens=MAX_TOKENS):  # fmt: skip
        if isinstance(ev, TokenBatch):
            first = first or time.perf_counter() - t0
        elif isinstance(ev, JobFinished):
            result = ev.result
            first = first or time.perf_counter() - t0
    assert first is not None and result is not None
    return first, result.text, result.evaluated_tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=default_model_path())
    parser.add_argument("--doc-tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parse_args(parser, {"doc_tokens": 300, "rounds": 1})
    settings = LoadSettings(n_ctx=4096)
    sha = sha256_of(args.model)
    with tempfile.TemporaryDirectory() as tmp, EngineHost() as host:
        db = open_database(Path(tmp) / "history.db")
        repo = Repository(db)
        loaded = host.load(args.model, settings)
        counter = exact_counter(args.model, host_tokenize(host))
        text = document_text(host, args.doc_tokens)
        session = repo.create_session("bench")
        print(f"model {args.model.name}, n_ctx {loaded.n_ctx}, document of {args.doc_tokens:,} "
              f"tokens, {args.rounds} rounds")  # fmt: skip
        ratios, seconds = [], []
        for r in range(args.rounds):
            question = QUESTIONS[r % len(QUESTIONS)]
            host.reset()
            result = asked(host, text, counter, question, loaded.n_ctx)
            state = host.save_state()
            version = repo.save_version(session, task="ask", strategy="head", prompt=question,
                                        model_path=str(args.model), model_sha256=sha)  # fmt: skip
            repo.save_run(version.id, result)
            repo.save_kv_state(version.id, state, sha, prompt_tokens=len(result.final_prompt))
            t_cold, reply_cold, n_cold = cold(host, result.final_prompt)
            t_back, reply_back, n_back = rolled_back(host, repo, version.id, sha, loaded.n_ctx)
            if reply_back != reply_cold or n_back != 1:
                print(f"error: the rollback did not resume ({n_back} tokens evaluated, reply "
                      f"{reply_back!r} vs {reply_cold!r})", file=sys.stderr)  # fmt: skip
                return 1
            ratios.append(t_back / t_cold)
            seconds.append(t_back)
            print(f"  round {r + 1}: cold {t_cold * 1000:8.1f} ms ({n_cold:,} evaluated), "
                  f"rollback {t_back * 1000:6.1f} ms ({n_back} evaluated, state "
                  f"{len(state.data) / 2**20:.1f} MiB), ratio {t_back / t_cold:.3f}")  # fmt: skip
        repo.close()
        db_bytes = db.path.stat().st_size
        db.close()
    ratio = statistics.median(ratios)
    print(f"history file after {args.rounds} runs with KV states: {db_bytes / 2**20:.1f} MiB")
    print(
        f"time to first token, rollback / cold re-evaluation (median): {ratio:.3f}; "
        "replies identical"
    )
    print(f"goal: <= 0.10: {'PASS' if ratio <= 0.10 else 'FAIL'}")
    write_rows(args.json, "bench_rollback", [
        row("time to first token after a rollback", "cold re-evaluation of the prompt",
            statistics.median(seconds) * 1000, ratio, "<= 0.10", unit="ms",
            note=f"document of {args.doc_tokens:,} tokens, {args.rounds} rounds"),
    ])  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
