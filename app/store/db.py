"""Opening the database: durability settings, an integrity check, migrations, refusals.

One SQLite file in the user data folder. WAL journal, ``synchronous=FULL``, foreign keys and a
busy timeout on every connection. On open, ``PRAGMA quick_check`` runs first: a damaged file is
renamed aside (never overwritten) and a fresh one is made, and the caller gets a notice to show.
A database from a newer ContextLens is refused and left untouched; an older one is migrated.

Two engines share the file. ``writer`` starts every transaction with ``BEGIN IMMEDIATE``: it takes
the write lock before reading anything, so a second ContextLens window writing the same file
waits (up to the busy timeout) instead of failing to upgrade a read snapshot. ``engine`` (readers)
starts with a plain ``BEGIN``, so each read sees one consistent snapshot.

A file this process cannot write (or whose folder cannot take the ``-wal``/``-shm`` files WAL
needs) opens read-only: browsable, never modified, and every save refused in one sentence.
"""

from __future__ import annotations

import errno
import functools
import os
import sqlite3
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import platformdirs
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Connection, Engine, create_engine, event

from app.core.config import current as current_config

try:  # not on Windows: there the file-size limit check is simply skipped
    import resource
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]

APP_NAME = "ContextLens"
BUSY_TIMEOUT_MS = 5000  # read at each new connection
_MIGRATIONS = Path(__file__).with_name("migrations")

# SQLite's primary result codes (the low byte of an extended code)
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL = 5, 6, 8, 10, 13
_NO_ROOM_ERRNOS = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
_READ_ONLY_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}
_LOW_ROOM = 1 << 20  # bytes: "almost no room" when deciding what a bare I/O error means


class StoreError(RuntimeError):
    """The database cannot be used; the message is one sentence and the file was not modified."""


class RepositoryError(ValueError):
    """An action the history cannot take (unknown id, deleted item); one sentence."""


def default_db_path() -> Path:
    """The user's database: $CONTEXTLENS_DB, else contextlens.db in the user data folder."""
    chosen = current_config().db
    return chosen or Path(platformdirs.user_data_dir(APP_NAME)) / "contextlens.db"


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


# ----- what went wrong, in one sentence -----


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _out_of_room(path: Path) -> bool:
    """Whether a bare I/O error on ``path`` is most likely a full disk or the file-size limit.

    SQLite reports ENOSPC (and short writes) as SQLITE_FULL, but a write refused with EFBIG (the
    process's RLIMIT_FSIZE) or EDQUOT as a plain SQLITE_IOERR, and Python cannot see the errno.
    """
    if resource is not None:
        soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY:
            sizes = []
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    sizes.append(os.stat(f"{path}{suffix}").st_size)
                except OSError:
                    sizes.append(0)
            # a checkpoint writes database pages no further out than the WAL reaches
            if sizes[0] + sizes[1] + _LOW_ROOM >= soft or max(sizes) + _LOW_ROOM >= soft:
                return True
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < _LOW_ROOM


def describe_failure(exc: BaseException, path: Path) -> str:
    """One sentence for a failed write (disk full, locked, read-only, I/O error)."""
    orig = getattr(exc, "orig", None) or exc
    name = path.name
    code = getattr(orig, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    os_errno = getattr(orig, "errno", None) if isinstance(orig, OSError) else None
    text = str(orig)
    lowered = text.lower()
    if (
        primary == _SQLITE_FULL
        or os_errno in _NO_ROOM_ERRNOS
        or (primary is None and "database or disk is full" in lowered)
        or (primary == _SQLITE_IOERR and _out_of_room(path))
    ):
        return f"There is no room left to save to {name} (disk full); nothing was saved."
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED) or (
        primary is None and "database is locked" in lowered
    ):
        return f"{name} is busy in another ContextLens window; nothing was saved, try again."
    if (
        primary == _SQLITE_READONLY
        or os_errno in _READ_ONLY_ERRNOS
        or (primary is None and "readonly database" in lowered)
    ):
        return f"{name} is read-only; nothing was saved."
    cause = _one_line(text) or type(orig).__name__
    return f"{name} could not be written ({cause}); nothing was saved."


# ----- schema revisions -----


def alembic_config(connection: object | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def _revisions() -> tuple[frozenset[str], str]:
    """The migrations shipped with this app (read once: they do not change while it runs)."""
    scripts = ScriptDirectory.from_config(alembic_config())
    head = scripts.get_current_head()
    assert head is not None
    return frozenset(s.revision for s in scripts.walk_revisions()), head


def known_revisions() -> set[str]:
    return set(_revisions()[0])


def head_revision() -> str:
    """The schema this app writes."""
    return _revisions()[1]


# ----- looking at a file without changing it -----


def _uri(path: Path, **params: str) -> str:
    """A SQLite URI for ``path`` (any characters in it escaped) with query ``params``."""
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quote(str(path.absolute()), safe='/')}" + (f"?{query}" if query else "")


def _read_only_uri(path: Path) -> str:
    """How to read a file this process may not write, creating nothing beside it.

    With a WAL in use (another window has the file open, or one was killed), ``mode=ro`` reads
    it through the existing ``-wal``/``-shm``. Without one (the file was closed cleanly) the file
    alone is the whole database: ``immutable`` reads it without making ``-wal``/``-shm`` files,
    which ``mode=ro`` would otherwise create (owned by this user) in a writable folder.
    """
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return _uri(path, mode="ro")
    return _uri(path, mode="ro", immutable="1")


def _current_revision(uri: str) -> str | None:
    with closing(sqlite3.connect(uri, uri=True)) as con:
        has = con.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='alembic_version'"
        ).fetchone()
        if not has:
            return None
        row = con.execute("SELECT version_num FROM alembic_version").fetchone()
        return row[0] if row else None


def _quick_check(uri: str) -> str:
    """'ok', or what is wrong, without modifying the file."""
    try:
        with closing(sqlite3.connect(uri, uri=True)) as con:
            rows = con.execute("PRAGMA quick_check").fetchall()
        return "ok" if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows[:3])
    except sqlite3.DatabaseError as exc:
        return str(exc)


def _probe_folder(folder: Path) -> None:
    """Make (and drop) a file in ``folder``: OSError when that is refused."""
    if hasattr(os, "O_TMPFILE"):  # an unnamed file: nothing is left behind even after a kill
        try:
            os.close(os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o600))
            return
        except OSError as exc:
            if exc.errno in _READ_ONLY_ERRNOS:
                raise
            # this file system has no unnamed files: a named probe instead
    fd, probe = tempfile.mkstemp(prefix=".contextlens-", suffix=".probe", dir=folder)
    os.close(fd)
    os.unlink(probe)


def _writable(path: Path) -> bool:
    """Whether this process can write ``path`` and create its ``-wal``/``-shm`` beside it.

    Tried for real (``os.access`` says yes to root whatever the file system allows): the file is
    opened for appending, writing nothing, and a probe file is made and dropped in its folder.
    """
    try:
        with open(path, "ab"):
            pass
        _probe_folder(path.parent)
    except OSError as exc:
        # another failure (no room for the probe...) is left for SQLite to report
        return exc.errno not in _READ_ONLY_ERRNOS
    return True


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


# ----- engines -----


def _engine(path: Path, uri: str, begin: str, *, read_only: bool = False) -> Engine:
    """An engine on ``uri`` whose transactions start with ``begin`` (the pysqlite recipe: the
    driver's own transaction handling is off, SQLAlchemy's "begin" event issues the BEGIN)."""

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
        )  # fmt: skip

    def on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None  # autocommit: BEGIN comes from on_begin
        cur = dbapi_connection.cursor()
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")  # first: the others may wait
        if not read_only:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    def on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin)

    engine = create_engine(URL.create("sqlite", database=str(path)), creator=connect)
    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
    return engine


def _dispose(*engines: Engine) -> None:
    for engine in engines:
        engine.dispose()


# ----- opening -----


def _open_read_only(path: Path) -> Database:
    """Browse a file this process cannot write; refuse what would need a change to it."""
    uri = _read_only_uri(path)
    unchanged = "The file was not changed."
    problem = _quick_check(uri)
    if problem != "ok":
        raise StoreError(
            f"{path.name} is damaged ({_one_line(problem)}) and read-only, so it cannot be set "
            f"aside. {unchanged}"
        )
    try:
        revision = _current_revision(uri)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path.name} could not be read ({_one_line(str(exc))}).") from exc
    if revision is None:
        raise StoreError(
            f"{path.name} is read-only and holds no ContextLens history; it cannot be set up. "
            f"{unchanged}"
        )
    if revision not in known_revisions():
        raise StoreError(
            f"{path.name} was written by a newer ContextLens (schema {revision}); "
            f"update the app to open it. {unchanged}"
        )
    if revision != head_revision():
        raise StoreError(
            f"{path.name} is read-only and was written by an older ContextLens; it cannot be "
            f"upgraded. {unchanged}"
        )
    engine = _engine(path, uri, "BEGIN", read_only=True)
    notice = f"{path.name} is read-only: its history can be browsed, but changes will not be saved."
    return Database(path, engine, engine, notice, read_only=True)


def open_database(path: Path | None = None) -> Database:
    """Open (creating or migrating) the database; StoreError when it must not be used."""
    path = Path(path or default_db_path())
    notice = None
    if path.exists():
        if not path.is_file():
            raise StoreError(f"{path} is not a database file.")
        if not _writable(path):
            return _open_read_only(path)
        problem = _quick_check(_uri(path, mode="ro"))
        if problem != "ok":
            notice = _set_aside(path, problem)
        else:
            try:
                revision = _current_revision(_uri(path, mode="ro"))
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{path.name} could not be read ({_one_line(str(exc))}).") from exc
            if revision is not None and revision not in known_revisions():
                raise StoreError(
                    f"{path.name} was written by a newer ContextLens (schema {revision}); "
                    "update the app to open it. The file was not changed."
                )
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{path.name} could not be created ({_one_line(str(exc))}).") from exc
    uri = _uri(path)
    writer = _engine(path, uri, "BEGIN IMMEDIATE")
    engine = _engine(path, uri, "BEGIN")
    try:  # through the writer: one transaction, so a crash leaves the old schema or the new
        with writer.begin() as conn:
            command.upgrade(alembic_config(conn), "head")
    except Exception as exc:
        _dispose(engine, writer)
        cause = _one_line(str(getattr(exc, "orig", None) or exc))
        raise StoreError(f"{path.name} could not be opened ({cause}).") from exc
    return Database(path, engine, writer, notice)
