"""Fixtures of the archive tests: fresh repositories, a real export to damage, and a history
that hostile imports must leave untouched."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.store.archive import export_session
from app.store.db import open_database
from app.store.repository import Repository
from tests.store.archives import Good, populate


@pytest.fixture
def open_repo(tmp_path: Path) -> Iterator[Callable[[str], Repository]]:
    """Repositories on fresh database files in tmp_path, closed at teardown."""
    opened: list[tuple[Repository, Any]] = []

    def make(name: str) -> Repository:
        db = open_database(tmp_path / name)
        repo = Repository(db)
        opened.append((repo, db))
        return repo

    yield make
    for repo, db in opened:
        repo.close()
        db.close()


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Good:
    folder = tmp_path_factory.mktemp("good")
    db = open_database(folder / "src.db")
    repo = Repository(db)
    try:
        export_session(repo, populate(repo), folder / "good.ctxlens", include_kv=True)
    finally:
        repo.close()
        db.close()
    return Good((folder / "good.ctxlens").read_bytes())


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Repository]:
    """A database with history in it, shared by the table below (none of which may change it)."""
    db = open_database(tmp_path_factory.mktemp("victim") / "x.db")
    repo = Repository(db)
    populate(repo)
    yield repo
    repo.close()
    db.close()
