"""`contextlens-cli run --lanes`: the map phase in parallel lanes, its events, its bad values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.runner import assert_one_line_error, run
from tests.conftest import DATA


def test_run_in_lanes_reports_them_and_prints_each_reply_whole(
    model_path: Path, tmp_path: Path
) -> None:
    # A third of bisect.py: three or four windows, enough for two lanes (the whole file ran
    # two dozen windows twice, and under heavy load once passed the 300 s per-test timeout).
    doc = tmp_path / "bisect-part.py"
    doc.write_text((DATA / "sample.py").read_text(encoding="utf-8")[:1800], encoding="utf-8")
    args = ("run", str(doc), "--strategy", "map-reduce", "--n-ctx", "256",
            "--max-tokens", "8", "--lanes", "2", "--db", str(tmp_path / "h.db"))  # fmt: skip
    proc = run(*args, "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    started = next(e for e in lines if e["type"] == "lanes_started")
    assert started["lanes"] == 2 and started["windows"] >= 2
    batches = [e for e in lines if e["type"] == "token_batch" and e["lane"] is not None]
    assert {e["lane"] for e in batches} == {0, 1}
    done = lines[-1]
    assert done["type"] == "done" and done["lanes"] == 2
    text = run(*args, timeout=300)  # the text form: each lane's reply whole, then "done"
    assert text.returncode == 0, text.stderr
    assert "replies, 2 at a time in parallel lanes" in text.stderr
    assert text.stderr.count("--- part ") == started["windows"]


@pytest.mark.parametrize("lanes", ["-1", "65"])
def test_lanes_out_of_range_is_one_sentence(lanes: str, tmp_path: Path) -> None:
    proc = run("run", str(DATA / "sample.py"), "--strategy", "map-reduce", "--lanes", lanes,
               "--db", str(tmp_path / "h.db"))  # fmt: skip
    assert proc.returncode == 2
    assert_one_line_error(proc)
    assert "--lanes must be between 0 (one call at a time) and 64" in proc.stderr
