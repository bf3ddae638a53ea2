"""Opening the store: durability settings, damaged files set aside, newer schemas refused."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as OrmSession

from app.store.db import (
    StoreError,
    alembic_config,
    head_revision,
    known_revisions,
    open_database,
)
from app.store.models import KVStateRow, PromptVersion, Session

pytestmark = pytest.mark.unit


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_new_database_is_durable_and_migrated(tmp_path: Path) -> None:
    db = open_database(tmp_path / "h.db")
    try:
        with db.engine.connect() as conn:
            names = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            pragmas = {p: conn.exec_driver_sql(f"PRAGMA {p}").scalar() for p in names}
            revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        assert pragmas == {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1,
                           "busy_timeout": 5000}  # fmt: skip
        assert revision in known_revisions() and db.notice is None
    finally:
        db.close()
    again = open_database(tmp_path / "h.db")  # reopening migrates nothing and loses nothing
    again.close()


def test_versions_form_a_tree_and_foreign_keys_hold(tmp_path: Path) -> None:
    db = open_database(tmp_path / "h.db")
    try:
        with OrmSession(db.engine) as s, s.begin():
            session = Session(name="report")
            s.add(session)
            s.flush()
            root = PromptVersion(session_id=session.id, number=1, task="summarize",
                                 strategy="head", settings={"n_ctx": 2048})  # fmt: skip
            s.add(root)
            s.flush()
            s.add(PromptVersion(session_id=session.id, parent_id=root.id, number=2,
                                task="summarize", strategy="tail"))  # fmt: skip
        with OrmSession(db.engine) as s:
            versions = s.scalars(select(PromptVersion).order_by(PromptVersion.number)).all()
            assert [v.parent_id for v in versions] == [None, versions[0].id]
            assert versions[0].settings == {"n_ctx": 2048}
        with pytest.raises(IntegrityError), OrmSession(db.engine) as s, s.begin():
            s.add(PromptVersion(session_id=999, number=1, task="ask", strategy="head"))
    finally:
        db.close()


def test_a_damaged_file_is_set_aside_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    before = _digest(path)
    db = open_database(path)
    try:
        assert db.notice and "damaged" in db.notice
        aside = [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
        assert len(aside) == 1 and _digest(aside[0]) == before
        assert aside[0].name in db.notice
        with db.engine.connect() as conn:  # the new one works
            assert conn.exec_driver_sql("PRAGMA quick_check").scalar() == "ok"
    finally:
        db.close()


def test_a_database_from_a_newer_app_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    open_database(path).close()
    with sqlite3.connect(path) as con:
        con.execute("UPDATE alembic_version SET version_num = '9999'")
    con.close()
    before = _digest(path)
    with pytest.raises(StoreError, match="newer ContextLens") as err:
        open_database(path)
    assert "not changed" in str(err.value) and _digest(path) == before


def test_a_folder_is_not_a_database(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a database file"):
        open_database(tmp_path)


def test_an_empty_file_becomes_a_database(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    db = open_database(path)
    db.close()
    with sqlite3.connect(path) as con:
        assert (
            con.execute("SELECT version_num FROM alembic_version").fetchone()[0] == head_revision()
        )
    con.close()


def test_a_database_of_the_first_schema_is_migrated_with_its_rows(tmp_path: Path) -> None:
    """A file written by the first release (schema 0001) opens in this one, nothing lost."""
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
        conn.exec_driver_sql("INSERT INTO sessions (id, name, created) VALUES (1, 'old', "
                             "'2026-01-01 00:00:00')")  # fmt: skip
        conn.exec_driver_sql(
            "INSERT INTO prompt_versions (id, session_id, number, task, prompt, strategy, "
            "model_path, model_sha256, settings, created) VALUES (1, 1, 1, 'ask', 'why?', "
            "'head', 'm.gguf', 'ab', '{\"n_ctx\": 512}', '2026-01-01 00:00:00')"
        )
        conn.exec_driver_sql(
            "INSERT INTO kv_states (id, version_id, model_sha256, n_ctx, cache_type, tokens, "
            "data, ring, created) VALUES (1, 1, 'ab', 512, 'f16', x'00', x'00', '{}', "
            "'2026-01-01 00:00:00')"
        )
    engine.dispose()
    db = open_database(path)
    try:
        with OrmSession(db.engine) as s:
            version = s.scalars(select(PromptVersion)).one()
            state = s.scalars(select(KVStateRow)).one()
        assert (version.prompt, version.settings) == ("why?", {"n_ctx": 512})
        assert (state.prompt_tokens, state.state_bytes) == (0, 0)  # the new columns' defaults
    finally:
        db.close()
    with sqlite3.connect(path) as con:
        assert (
            con.execute("SELECT version_num FROM alembic_version").fetchone()[0] == head_revision()
        )
    con.close()
