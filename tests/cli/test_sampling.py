"""Sampling on the command line: ``run --temperature 0.7 --repeat-penalty 1.15 --seed 1`` records
its settings with the version (``snapshots show``, ``diff``, export), a rollback with its KV state
resumes with them (the same seed: the same reply), a batch does not take a run sampled otherwise
for the same run, and bad values are refused in one sentence before anything loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.jobs import job_spec
from app.cli.main import build_parser, main
from app.core.documents import document_from_text
from app.core.jobs.tasks import JobResult
from app.core.paths import sample_document
from app.services.jobs import EngineFacts
from app.services.versions import version_content
from app.store.db import open_database
from app.store.repository import Entry, Repository
from tests.cli.runner import assert_one_line_error, run

SAMPLED = ["--temperature", "0.7", "--repeat-penalty", "1.15", "--seed", "1"]


def _doc(folder: Path, chars: int = 2000) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = folder / "part.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:chars], encoding="utf-8")
    return doc


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """A quick command in this process (no model): its output; it must succeed."""

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_a_sampled_run_records_its_settings_and_a_rollback_resumes_with_them(
    tmp_path: Path, model_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "h.db")
    doc = _doc(tmp_path, 800)
    proc = run("run", str(doc), "--strategy", "head", "--n-ctx", "512", "--max-tokens", "12",
               *SAMPLED, "--keep-kv", "--db", db, "--json", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout.splitlines()[-1])
    [version] = json.loads(cli(capsys, "snapshots", "list", "--db", db, "--json"))[:1]
    shown = json.loads(cli(capsys, "snapshots", "show", str(version["id"]), "--db", db, "--json"))
    sampling = shown["settings"]["sampling"]
    assert (sampling["temperature"], sampling["repeat_penalty"], sampling["seed"]) == (0.7, 1.15, 1)
    assert (sampling["top_k"], sampling["repeat_last_n"], sampling["dry_multiplier"]) == (40, 64, 0)
    listed = cli(capsys, "snapshots", "show", str(version["id"]), "--db", db)
    assert '"temperature": 0.7' in listed and '"repeat_penalty": 1.15' in listed
    # the same command again: the same seed and settings give the same reply
    proc = run("run", str(doc), "--strategy", "head", "--n-ctx", "512", "--max-tokens", "12",
               *SAMPLED, "--db", db, "--json", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["outputs"] == first["outputs"]
    # the rollback resumes with the version's sampling (its last prompt token evaluated alone,
    # so a sampled reply may part from the first after a few tokens: not compared)
    proc = run("snapshots", "rollback", str(version["id"]), "--resume", "--db", db, "--json",
               timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    resumed = json.loads(proc.stdout.splitlines()[-1])
    assert resumed["evaluated_tokens"] == 1 and resumed["outputs"][0]["text"]
    new = resumed["version"]["id"]
    again = json.loads(cli(capsys, "snapshots", "show", str(new), "--db", db, "--json"))
    assert again["settings"]["sampling"] == sampling
    # an exported session carries them into another history
    archive, other = tmp_path / "s.ctxlens", str(tmp_path / "other.db")
    cli(capsys, "snapshots", "export", str(version["session"]), str(archive), "--db", db)
    cli(capsys, "snapshots", "import", str(archive), "--db", other)
    imported = json.loads(cli(capsys, "snapshots", "list", "--db", other, "--json"))
    shown = json.loads(cli(capsys, "snapshots", "show", str(imported[0]["id"]), "--db", other,
                           "--json"))  # fmt: skip
    assert shown["settings"]["sampling"] == sampling


@pytest.mark.unit
def test_a_batch_takes_a_run_sampled_otherwise_for_another_run(tmp_path: Path) -> None:
    """What a batch asks the history before running a document (``finished_version`` with the
    command's version content): done the same way, it is skipped; sampled otherwise, it runs.
    A reply stopped in a loop (``repetition``) is a finished run like ``stop`` and ``length``."""

    def content(*flags: str) -> dict[str, object]:
        args = build_parser().parse_args(["batch", str(tmp_path), "--strategy", "head", *flags])
        return version_content(job_spec(args, ["head"]), "head", 512,
                               EngineFacts("m.gguf", "ab", "local", "f16"))  # fmt: skip

    doc = document_from_text("A document the batch has done once.", name="d.txt")
    greedy, sampled = content(), content("--temperature", "0.5", "--seed", "5")
    assert sampled["settings"]["sampling"]["seed"] == 5  # type: ignore[index]
    db = open_database(tmp_path / "h.db")
    repo = Repository(db)
    try:
        [first] = repo.record(doc, "d", [Entry(greedy, JobResult("summarize", "head",
                                                                 "repetition", 512))])  # fmt: skip
        assert repo.finished_version(doc.sha256, content()) == first
        assert repo.finished_version(doc.sha256, sampled) is None
        assert repo.finished_version(doc.sha256, content("--sampling", "balanced")) is None
        [second] = repo.record(doc, "d", [Entry(sampled, JobResult("summarize", "head", "stop",
                                                                   512))])  # fmt: skip
        assert repo.finished_version(doc.sha256, content("--seed", "5", "--temperature",
                                                         "0.5")) == second  # fmt: skip
        diff = repo.diff(first, second)
    finally:
        repo.close()
        db.close()
    assert '-    "seed": 0' in diff and '+    "seed": 5' in diff
    assert '-    "temperature": 0.0' in diff and '+    "temperature": 0.5' in diff


BAD = [
    (["--temperature", "-1"], "--temperature must be between 0 (greedy) and 100 (got -1.0)"),
    (["--top-p", "0"], "--top-p must be above 0 and at most 1"),
    (["--top-k", "-3"], "--top-k must be 0 (off) or more (got -3)"),
    (["--min-p", "1.5"], "--min-p must be between 0 (off) and 1 (got 1.5)"),
    (["--repeat-penalty", "0"], "--repeat-penalty must be above 0 and at most 10 (1 is off)"),
    (["--repeat-last-n", "-2"], "--repeat-last-n must be -1 (the whole context), 0 (off) or more"),
    (["--dry-multiplier", "nan"], "--dry-multiplier must be between 0 (off) and 100"),
    (["--seed", "-1"], "--seed must be between 0 and 4294967294 (got -1)"),
    (["--sampling", "wild"], "unknown sampling preset 'wild'"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("flags", "message"), BAD)
@pytest.mark.parametrize("command", ["run", "compare", "batch", "generate"])
def test_bad_sampling_values_exit_2_with_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, flags: list[str],
    message: str,
) -> None:
    """In process (the refusal comes before anything loads); the real command once below."""

    doc = _doc(tmp_path)
    where = {
        "run": ["run", str(doc), "--strategy", "head", "--db", str(tmp_path / "h.db")],
        "compare": ["compare", str(doc), "--strategies", "head,tail"],
        "batch": ["batch", str(doc.parent), "--strategy", "head"],
        "generate": ["generate", "--prompt", "hello"],
    }[command]
    assert main([*where, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("error:"), err


def test_the_command_refuses_a_bad_value_before_loading(tmp_path: Path) -> None:
    proc = run("run", str(_doc(tmp_path)), "--strategy", "head", "--temperature", "-1")
    assert proc.returncode == 2
    assert "--temperature must be between 0 (greedy) and 100 (got -1.0)" in proc.stderr
    assert_one_line_error(proc)
