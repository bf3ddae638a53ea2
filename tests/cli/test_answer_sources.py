"""`contextlens-cli run --task ask --json` with the default model: the done record's answer carries
each of its sentences tied to the kept sentence that supports it (app/core/jobs/alignment.py),
each source inside the spans the answer was written from; the history keeps the same."""

from __future__ import annotations

import json
from pathlib import Path

from app.core.documents import load_document
from app.services.versions import open_version
from app.store.db import open_database
from app.store.repository import Repository
from tests.cli.runner import run
from tests.conftest import DATA

QUESTION = "What truths do they hold to be self-evident?"


def test_the_done_records_answer_carries_its_sentences_sources(tmp_path: Path) -> None:
    doc = DATA / "sample.pdf"  # the Declaration of Independence, Gettysburg, the Constitution
    db = tmp_path / "h.db"
    proc = run("run", str(doc), "--task", "ask", "--question", QUESTION, "--strategy", "head",
               "--n-ctx", "1024", "--max-tokens", "64", "--json", "--db", str(db))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout.splitlines()[-1])
    assert done["type"] == "done" and done["truncated"]  # the document is over the context
    [answer] = done["outputs"]
    text, kept = answer["text"], [tuple(s) for s in answer["source_spans"]]
    assert text and kept
    alignment = answer["alignment"]
    assert alignment, answer
    document = load_document(doc).text
    ends = 0
    for sentence in alignment:
        assert set(sentence) == {"start", "end", "source", "score"}
        assert ends <= sentence["start"] < sentence["end"] <= len(text)  # in order, in the text
        ends = sentence["end"]
        assert text[sentence["start"] : sentence["end"]].strip()
        assert 0.0 <= sentence["score"] <= 1.0
        if sentence["source"] is not None:
            a, b = sentence["source"]
            assert any(x <= a < b <= y for x, y in kept), (sentence, kept)
            assert document[a:b].strip()
    assert not text[ends:].strip()  # every sentence of the answer

    recorded = done["recorded"]["versions"][0]
    database = open_database(db)
    repo = Repository(database)
    try:
        assert open_version(repo, recorded).outputs[0]["alignment"] == alignment
    finally:
        repo.close()
        database.close()
