"""Opening the database: durability settings, an integrity check, migrations, refusals.

One SQLite file in the user data folder. WAL journal, ``synchronous=FULL``, foreign keys and a
busy timeout on every connection. On open, ``PRAGMA quick_check`` runs first: a damaged file is
renamed aside (never overwritten) and a fresh one is made, and the caller gets a notice to show.
A database from a newer ContextLens is refused and left untouched; an older one is migrated.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event

APP_NAME = "ContextLens"
BUSY_TIMEOUT_MS = 5000
_MIGRATIONS = Path(__file__).with_name("migrations")


class StoreError(RuntimeError):
    """The database cannot be used; the message is one sentence and the file was not modified."""


def default_db_path() -> Path:
    """The user's database: $CONTEXTLENS_DB, else contextlens.db in the user data folder."""
    env = os.environ.get("CONTEXTLENS_DB")
    return Path(env) if env else Path(platformdirs.user_data_dir(APP_NAME)) / "contextlens.db"


@dataclass
class Database:
    path: Path
    engine: Engine  # readers: short-lived sessions
    writer: Engine  # the single writer's transactions
    notice: str | None = None  # for the person, e.g. that a damaged file was set aside
    read_only: bool = False  # the file cannot be written: browse only

    def close(self) -> None:
        self.engine.dispose()
        if self.writer is not self.engine:
            self.writer.dispose()


def describe_failure(exc: BaseException, path: Path) -> str:
    """One sentence for a failed write (disk full, locked, read-only, I/O error)."""
    text = str(getattr(exc, "orig", None) or exc)
    return f"{path.name} could not be written ({text}); nothing was saved."


def alembic_config(connection: object | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def known_revisions() -> set[str]:
    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def head_revision() -> str:
    """The schema this app writes."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _current_revision(path: Path) -> str | None:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        has = con.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='alembic_version'"
        ).fetchone()
        if not has:
            return None
        row = con.execute("SELECT version_num FROM alembic_version").fetchone()
        return row[0] if row else None


def _quick_check(path: Path) -> str:
    """'ok', or what is wrong, without modifying the file."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
            rows = con.execute("PRAGMA quick_check").fetchall()
        return "ok" if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows[:3])
    except sqlite3.DatabaseError as exc:
        return str(exc)


def _set_aside(path: Path, problem: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
        n += 1
    path.rename(aside)
    for suffix in ("-wal", "-shm"):  # the journal belongs to the damaged file
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(aside.with_name(aside.name + suffix))
    return (
        f"The history database was damaged ({problem}); it was kept as {aside.name} and a new "
        "one was started."
    )


def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.close()


def open_database(path: Path | None = None) -> Database:
    """Open (creating or migrating) the database; StoreError when it must not be used."""
    path = Path(path or default_db_path())
    notice = None
    if path.exists():
        if not path.is_file():
            raise StoreError(f"{path} is not a database file.")
        problem = _quick_check(path)
        if problem != "ok":
            notice = _set_aside(path, problem)
        else:
            revision = _current_revision(path)
            if revision is not None and revision not in known_revisions():
                raise StoreError(
                    f"{path.name} was written by a newer ContextLens (schema {revision}); "
                    "update the app to open it. The file was not changed."
                )
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{path}")
    event.listen(engine, "connect", _on_connect)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "head")
    except Exception as exc:
        engine.dispose()
        raise StoreError(f"{path.name} could not be opened ({exc}).") from exc
    return Database(path, engine, engine, notice)
