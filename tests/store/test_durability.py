"""Durability of the history store, proven on real files by real processes.

A writer killed with SIGKILL at random moments, a disk that fills up (a file-size limit and a
small tmpfs), a read-only file, and a second ContextLens on the same file. Children are forked
from this process, which has already imported the store, so each starts in milliseconds; a child
reports what it saved through a pipe and leaves with ``os._exit``, never returning into pytest.
Nothing here measures wall-clock time: the assertions are about what is in the file.

A SIGKILL leaves the kernel's page cache intact, so these tests prove the app's transactions are
atomic and that a crashed writer's WAL is recovered, not that fsync reaches the platter (that
would take a power cut). Half the crash databases live on a tmpfs, where fsync is free and more
kills land between the writes of one commit: run that way, ``journal_mode=OFF`` is caught.
Set DURABILITY_SEED to replay other kill moments.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import resource
import select
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine

from app.store import db as store_db
from app.store.db import StoreError, alembic_config, head_revision, open_database
from app.store.repository import Repository

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forks real child processes")

SEED = int(os.environ.get("DURABILITY_SEED", "20261129"))
NOBODY = 65534
FULL = "There is no room left to save to {} (disk full); nothing was saved."
BUSY = "{} is busy in another ContextLens window; nothing was saved, try again."
READ_ONLY = "{} is read-only; nothing was saved."


# ----- plumbing: forked children that report through a pipe -----


def _fork(child: Callable[[int], None]) -> tuple[int, int]:
    """Run ``child(report_fd)`` in a forked process; (pid, the pipe's read end)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(r)
            child(w)
        except BaseException:
            code = 1
            text = " | ".join(traceback.format_exc().splitlines()[-6:])
            with suppress(OSError):
                os.write(w, f"ERROR {text[:3000]}\n".encode())
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _say(fd: int, *words: object) -> None:
    os.write(fd, (" ".join(str(w) for w in words) + "\n").encode())  # one write: atomic


def _read_all(fd: int) -> list[str]:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode().splitlines()


def _finish(pid: int, fd: int) -> list[str]:
    """Wait for a child that should exit cleanly; its report lines."""
    lines = _read_all(fd)
    _, status = os.waitpid(pid, 0)
    errors = [line for line in lines if line.startswith("ERROR")]
    assert not errors, errors
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (status, lines)
    return lines


def _prompt(tag: str, i: int, size: int | None = None) -> str:
    """The prompt of version ``i`` written by child ``tag``: from empty to five pages long."""
    rng = random.Random(f"{tag}/{i}")
    if size is None:
        size = rng.choice([0, 40, 700, 3000, 4500, 9000, 20000, 120_000])
    return f"{tag}/{i}:" + rng.randbytes(size // 2).hex()


def _check(path: Path) -> tuple[dict[int, tuple[int, int, str, str]], set[int]]:
    """Open the file as the app does: no notice (quick_check ok), the head schema, integrity ok.
    Its versions (id -> session, number, prompt, settings JSON) and session ids."""
    db = open_database(path)
    try:
        assert db.notice is None, db.notice
        assert not db.read_only
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
            revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
            assert revision == head_revision()
            rows = conn.exec_driver_sql(
                "SELECT id, session_id, number, prompt, settings FROM prompt_versions"
            ).all()
            sessions = {r[0] for r in conn.exec_driver_sql("SELECT id FROM sessions")}
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}, sessions
    finally:
        db.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """Everything the store imports lazily is imported before the first fork."""
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(Path(tmp) / "warm.db")
        repo = Repository(db)
        sid = repo.create_session("warm")
        repo.save_version(sid, task="ask", strategy="head", prompt="warm", settings={"i": 0})
        repo.history(sid)
        repo.close()
        db.close()


# ----- SIGKILL at random moments -----

DATABASES = 8  # each grows over all its kills
KILLS_PER_DATABASE = 8


def _commit_forever(path: Path, tag: str, out: int) -> None:
    """Open the file and save versions until killed, reporting each one as its save returns."""
    db = open_database(path)
    if db.notice:
        raise AssertionError(f"the child got a notice: {db.notice}")
    _say(out, "O")
    repo = Repository(db)
    sid = repo.create_session(tag)
    _say(out, "S", sid)
    for i in range(100_000):
        v = repo.save_version(sid, task="ask", strategy="head", prompt=_prompt(tag, i),
                              settings={"tag": tag, "i": i})  # fmt: skip
        _say(out, "V", v.id, sid, i)
    raise AssertionError("the child was never killed")


@pytest.fixture
def crash_folders(tmp_path: Path) -> Iterator[list[Path]]:
    """A folder on the disk and, where there is one, a folder on a tmpfs (/dev/shm): there
    fsync costs nothing, so more kills land between the writes of a commit."""
    folders = [tmp_path]
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        folders.append(Path(tempfile.mkdtemp(prefix="contextlens-crash-", dir=shm)))
    yield folders
    for folder in folders[1:]:
        shutil.rmtree(folder, ignore_errors=True)


def test_sigkill_at_random_moments_loses_no_version_whose_save_returned(
    crash_folders: list[Path],
) -> None:
    rng = random.Random(SEED)
    seen: Counter[str] = Counter()
    for k in range(DATABASES):
        path = crash_folders[k % len(crash_folders)] / f"crash{k}.db"
        reported: dict[int, tuple[int, str, int]] = {}  # version id -> (session, tag, i)
        sessions: set[int] = set()
        for j in range(KILLS_PER_DATABASE):
            tag = f"{k}.{j}"
            if j == 0:  # a brand-new file: killed while creating or migrating it, or just after
                delay = rng.uniform(0.0, 0.08)
            elif rng.random() < 0.2:  # while opening an existing file
                delay = rng.uniform(0.0, 0.03)
            else:  # in the middle of the save loop
                delay = rng.uniform(0.03, 0.25)
            pid, fd = _fork(lambda out, tag=tag, path=path: _commit_forever(path, tag, out))
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            lines = _read_all(fd)
            where = f"database {k}, kill {j} (seed {SEED}, delay {delay:.3f} s)"
            assert not [x for x in lines if x.startswith("ERROR")], (where, lines)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, where
            seen["kills"] += 1
            for line in lines:
                kind, *rest = line.split()
                if kind == "S":
                    sessions.add(int(rest[0]))
                elif kind == "V":
                    vid, sid, i = map(int, rest)
                    reported[vid] = (sid, tag, i)
                    seen["versions reported"] += 1
            if not lines:
                seen["while opening an existing file" if j else "while creating the file"] += 1
            elif len(lines) <= 2:
                seen["before its first version was saved"] += 1
            else:
                seen["in the save loop"] += 1
            if not path.exists() or path.stat().st_size == 0:
                seen["before the file had a page"] += 1
            wal = Path(f"{path}-wal")
            if wal.exists() and wal.stat().st_size > 0:
                seen["leaving a WAL to recover"] += 1

            rows, present = _check(path)  # quick_check ok (no notice), integrity ok, head schema
            assert sessions <= present, where
            for vid, (sid, vtag, i) in reported.items():
                assert vid in rows, f"{where}: version {vid} was reported saved but is missing"
                session, _number, prompt, settings = rows[vid]
                assert (session, prompt) == (sid, _prompt(vtag, i)), f"{where}: version {vid}"
                assert json.loads(settings) == {"tag": vtag, "i": i}, f"{where}: version {vid}"
            by_session: dict[int, list[int]] = {}
            for session, number, _prompt_text, _settings in rows.values():
                by_session.setdefault(session, []).append(number)
            for session, numbers in by_session.items():
                # each save is one transaction: no gaps, no duplicates, at most one unreported
                assert sorted(numbers) == list(range(1, len(numbers) + 1)), where
                mine = sum(1 for s, _t, _i in reported.values() if s == session)
                assert len(numbers) - mine in (0, 1), where
        seen["largest file (KiB)"] = max(seen["largest file (KiB)"], path.stat().st_size // 1024)
    assert seen["kills"] >= 50
    print(f"\nSIGKILL: {dict(seen)}")


# ----- a full disk -----


def _save_until_full(path: Path, sid: int, out: int, tag: str) -> None:
    """Save versions with large prompts until the store refuses; report each and the refusal."""
    db = open_database(path)
    repo = Repository(db)
    try:
        for i in range(10_000):
            try:
                v = repo.save_version(sid, task="ask", strategy="head",
                                      prompt=_prompt(tag, i, 24_000),
                                      settings={"tag": tag, "i": i})  # fmt: skip
            except StoreError as exc:
                cause = getattr(exc.__cause__, "orig", exc.__cause__)
                _say(out, "FULL", str(exc).replace("\n", "\\n"))
                _say(out, "CAUSE", getattr(cause, "sqlite_errorname", None), cause)
                return
            _say(out, "V", v.id, i)
        raise AssertionError("the disk never filled up")
    finally:
        repo.close()
        db.close()


def _verify_full(path: Path, sid: int, tag: str, lines: list[str]) -> list[str]:
    """The refusal was the disk-full sentence; everything reported is in the file, intact, and
    the refused save left nothing behind. The refusal's cause, for the record."""
    full = [x.removeprefix("FULL ") for x in lines if x.startswith("FULL ")]
    assert full == [FULL.format(path.name)], lines
    saved = {int(x.split()[1]): int(x.split()[2]) for x in lines if x.startswith("V ")}
    assert len(saved) >= 2, lines  # it saved some before the disk filled up
    rows, _sessions = _check(path)
    for vid, i in saved.items():
        assert rows[vid][2] == _prompt(tag, i, 24_000)
    mine = sorted(r[1] for r in rows.values() if r[0] == sid)
    assert mine == list(range(1, len(saved) + 1))
    return [x for x in lines if x.startswith("CAUSE")]


def _new_session(path: Path) -> int:
    db = open_database(path)
    repo = Repository(db)
    sid = repo.create_session("s")
    repo.close()
    db.close()
    return sid


def test_a_file_size_limit_refuses_the_save_in_one_sentence_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "h.db"
    sid = _new_session(path)
    limit = path.stat().st_size + 160 * 1024  # the database's size and a little room

    def child(out: int) -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so the write fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        _save_until_full(path, sid, out, "fsize")

    pid, fd = _fork(child)
    causes = _verify_full(path, sid, "fsize", _finish(pid, fd))
    print(f"\nRLIMIT_FSIZE: {causes}")


@contextmanager
def _tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A small tmpfs mounted on ``folder``; the test is skipped where mounting is not allowed."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {proc.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@contextmanager
def _in_process() -> Iterator[tuple[int, list[str]]]:
    """A report pipe for an action run in this process; its lines once the block ends."""
    r, w = os.pipe()
    lines: list[str] = []
    try:
        yield w, lines
    finally:
        os.close(w)
        lines.extend(_read_all(r))


def test_a_full_tmpfs_refuses_the_save_in_one_sentence_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    with _tmpfs(tmp_path / "small", "384k") as folder:
        path = folder / "h.db"
        sid = _new_session(path)
        with _in_process() as (out, lines):
            _save_until_full(path, sid, out, "tmpfs")
        causes = _verify_full(path, sid, "tmpfs", lines)
        print(f"\ntmpfs: {causes}")
        # once there is room again, saving works again
        subprocess.run(["mount", "-o", "remount,size=4m", str(folder)], check=True)
        db = open_database(path)
        repo = Repository(db)
        try:
            v = repo.save_version(sid, task="ask", strategy="head", prompt="after")
            assert repo.get_version(v.id).prompt == "after"
        finally:
            repo.close()
            db.close()
        _check(path)


# ----- a read-only database -----


@contextmanager
def _shared_folder() -> Iterator[Path]:
    """A folder another user can read (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="contextlens-ro-"))
    try:
        yield folder
    finally:
        for p in [folder, *folder.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(folder)


def _as_reader(action: Callable[[int], None]) -> list[str]:
    """Run ``action(out)`` as a user who may not write the files: ``nobody`` when this is root
    (root writes anything), else this user in-process (the modes are enough)."""
    if os.geteuid() == 0:

        def child(out: int) -> None:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action(out)

        pid, fd = _fork(child)
        return _finish(pid, fd)
    with _in_process() as (out, lines):
        action(out)
    return lines


def _browse_and_try_to_save(path: Path, out: int) -> None:
    db = open_database(path)
    repo = Repository(db)
    try:
        _say(out, "RO", db.read_only)
        _say(out, "NOTICE", db.notice)
        _say(out, "HISTORY", ",".join(v.prompt for v in repo.history()))
        try:
            repo.save_version(1, task="ask", strategy="head", prompt="new")
        except StoreError as exc:
            _say(out, "REFUSED", exc)
        try:
            repo.create_session("another")
        except StoreError as exc:
            _say(out, "REFUSED", exc)
    finally:
        repo.close()
        db.close()


def _make_history(path: Path) -> None:
    db = open_database(path)
    repo = Repository(db)
    sid = repo.create_session("kept")
    for prompt in ("one", "two", "three"):
        repo.save_version(sid, task="ask", strategy="head", prompt=prompt)
    repo.close()
    db.close()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # closed cleanly


def test_a_read_only_database_can_be_browsed_and_is_never_modified() -> None:
    with _shared_folder() as root:
        locked = root / "locked"  # neither the file nor its folder can be written
        locked.mkdir()
        open_folder = root / "open"  # the file cannot be written; its folder can
        open_folder.mkdir()
        paths = [locked / "h.db", open_folder / "h.db"]
        for path in paths:
            _make_history(path)
            path.chmod(0o444)
        root.chmod(0o755)
        locked.chmod(0o555)
        open_folder.chmod(0o777)
        before = {p: _digest(p) for p in paths}
        stamps = {p: p.stat().st_mtime_ns for p in paths}

        def action(out: int) -> None:
            for path in paths:
                _browse_and_try_to_save(path, out)

        lines = _as_reader(action)
        for path in paths:
            assert _digest(path) == before[path] and path.stat().st_mtime_ns == stamps[path]
            assert sorted(p.name for p in path.parent.iterdir()) == ["h.db"]  # no -wal, no -shm
        assert lines.count("RO True") == 2, lines
        notices = [x for x in lines if x.startswith("NOTICE")]
        assert all("read-only" in x and "not be saved" in x for x in notices), notices
        assert lines.count("HISTORY one,two,three") == 2, lines
        assert lines.count(f"REFUSED {READ_ONLY.format('h.db')}") == 4, lines


def test_a_database_on_a_read_only_file_system_can_be_browsed(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "ro", "1m") as folder:
        path = folder / "h.db"
        _make_history(path)
        before = _digest(path)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        with pytest.raises(OSError) as err:  # even root cannot write here
            open(path, "ab").close()
        assert err.value.errno == errno.EROFS
        with _in_process() as (out, lines):
            _browse_and_try_to_save(path, out)
        assert "RO True" in lines and "HISTORY one,two,three" in lines, lines
        assert lines.count(f"REFUSED {READ_ONLY.format('h.db')}") == 2, lines
        assert _digest(path) == before


def test_a_read_only_database_of_an_older_schema_is_refused_untouched() -> None:
    with _shared_folder() as folder:
        path = folder / "old.db"
        engine = create_engine(f"sqlite:///{path}")
        with engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
            command.upgrade(alembic_config(conn), "0001")
        engine.dispose()
        path.chmod(0o444)
        folder.chmod(0o555)
        before = _digest(path)

        def action(out: int) -> None:
            try:
                open_database(path)
            except StoreError as exc:
                _say(out, "REFUSED", exc)

        lines = _as_reader(action)
        assert lines == [
            "REFUSED old.db is read-only and was written by an older ContextLens; it cannot be "
            "upgraded. The file was not changed."
        ]
        assert _digest(path) == before
        assert sorted(p.name for p in folder.iterdir()) == ["old.db"]


# ----- a second ContextLens on the same file -----


def test_two_instances_saving_into_one_session_both_succeed(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    sid = _new_session(path)
    go_r, go_w = os.pipe()

    def child(out: int, tag: str) -> None:
        db = open_database(path)
        repo = Repository(db)
        os.read(go_r, 1)  # both start saving together
        pause = random.Random(tag)
        for i in range(60):
            v = repo.save_version(sid, task="ask", strategy="head", prompt=_prompt(tag, i))
            _say(out, "V", v.id, v.number, i)
            # as a person would, look at the history between saves (SQLite's locks are not
            # fair: a writer that saves again at once would keep the lock to itself)
            assert v.id in {x.id for x in repo.history(sid)}
            time.sleep(pause.uniform(0, 0.004))
        repo.close()
        db.close()

    children = [_fork(lambda out, tag=tag: child(out, tag)) for tag in ("a", "b")]
    os.close(go_r)
    os.write(go_w, b"gg")
    os.close(go_w)
    reports = [_finish(pid, fd) for pid, fd in children]
    rows, _sessions = _check(path)
    numbers = sorted(r[1] for r in rows.values() if r[0] == sid)
    assert numbers == list(range(1, 121))
    owner = {}
    for tag, lines in zip(("a", "b"), reports, strict=True):
        assert len(lines) == 60
        for line in lines:
            _v, vid, number, i = line.split()
            assert rows[int(vid)][1:3] == (int(number), _prompt(tag, int(i)))
            owner[int(number)] = tag
    switches = sum(owner[n] != owner[n + 1] for n in range(1, 120))
    print(f"\ntwo instances: the writer changed hands {switches} times in 120 saves")


def _lock_holder(path: Path, commands: int, out: int) -> None:
    """Hold the write lock on command: ``hold SECONDS`` (or until ``release``); ``exit``."""
    con = sqlite3.connect(path, isolation_level=None)
    while True:
        words = os.read(commands, 64).decode().split()
        if not words or words[0] == "exit":
            con.close()
            return
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO sessions (name, created) VALUES ('holder', '2026-01-01')")
        _say(out, "locked")
        ready, _, _ = select.select([commands], [], [], float(words[1]))
        if ready:
            assert os.read(commands, 64).decode().split() == ["release"]
        _say(out, "releasing")
        con.execute("COMMIT")


def _read_line(fd: int) -> str:
    data = b""
    while not data.endswith(b"\n"):
        data += os.read(fd, 1)
    return data.decode().strip()


def test_a_write_waits_for_another_instance_then_gives_up_in_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "h.db"
    sid = _new_session(path)  # and every connection closed before the fork
    cmd_r, cmd_w = os.pipe()
    pid, fd = _fork(lambda out: _lock_holder(path, cmd_r, out))
    os.close(cmd_r)
    try:
        db = open_database(path)  # opened (and migrated) before the other holds the lock
        repo = Repository(db)
        os.write(cmd_w, b"hold 1.0")
        assert _read_line(fd) == "locked"
        v = repo.save_version(sid, task="ask", strategy="head", prompt="waited")
        # it could only have succeeded once the other let go
        assert _read_line(fd) == "releasing"
        assert repo.get_version(v.id).prompt == "waited"
        repo.close()
        db.close()

        monkeypatch.setattr(store_db, "BUSY_TIMEOUT_MS", 50)
        db = open_database(path)
        repo = Repository(db)
        with db.writer.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 50
        os.write(cmd_w, b"hold 60")
        assert _read_line(fd) == "locked"
        with pytest.raises(StoreError) as err:
            repo.save_version(sid, task="ask", strategy="head", prompt="refused")
        assert str(err.value) == BUSY.format("h.db")
        os.write(cmd_w, b"release")
        assert _read_line(fd) == "releasing"
        again = repo.save_version(sid, task="ask", strategy="head", prompt="again")
        assert [v.prompt for v in repo.history(sid)] == ["waited", "again"]
        assert again.number == 2
        repo.close()
        db.close()
        os.write(cmd_w, b"exit")
    finally:
        os.close(cmd_w)
        _finish(pid, fd)
    _check(path)
