"""A cache folder written by someone else (a shared ``CONTEXTLENS_CACHE``, a copied cache) runs no
code and touches no file outside it (review round 3, row 2).

``diskcache`` obeys each row: ``mode`` 4 is ``pickle.load`` on ``get``, an absolute ``filename``
is read, and the plan cache's "damaged entry" handling then deleted that file. Each attack below
is written into the real store's database the way an attacker would, then the real cache reads
it: before app/core/disk_store.py the pickle ran and the outside file was deleted.
"""

from __future__ import annotations

import pickle
import sqlite3
import stat
from pathlib import Path

import pytest

from app.core.disk_store import open_store
from app.core.model_cards import CardCache
from app.core.planning.cache import PlanCache

pytestmark = pytest.mark.unit

KEY = ("document", 1)


class _Runs:
    """Unpickling it creates ``path``: the stand-in for any code an attacker's pickle runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.path), "w")


def _stored(folder: Path) -> Path:
    """A plan cache in ``folder`` holding one count; the store's database."""
    cache = PlanCache(folder)
    assert cache.count(KEY, lambda: 42) == 42
    cache.close()
    return folder / "cache.db"


def _tamper(db: Path, sql: str, *args: object) -> None:
    with sqlite3.connect(db) as con:
        assert con.execute(sql, args).rowcount >= 1


def test_a_pickle_row_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    ran = tmp_path / "the-pickle-ran"
    db = _stored(tmp_path / "cache")
    _tamper(db, "UPDATE Cache SET mode = 4, value = ?", pickle.dumps(_Runs(ran)))
    later = PlanCache(tmp_path / "cache")
    assert later.count(KEY, lambda: 7) == 7  # made again: the row is a damaged entry
    assert not ran.exists()
    assert later.stats.disk_errors == 1


def test_a_row_naming_a_file_outside_the_folder_neither_reads_nor_deletes_it(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "someone-elses-file"
    victim.write_bytes(b"precious")
    db = _stored(tmp_path / "cache")
    _tamper(db, "UPDATE Cache SET mode = 2, filename = ?, value = NULL", str(victim))
    later = PlanCache(tmp_path / "cache")
    assert later.count(KEY, lambda: 7) == 7
    assert victim.read_bytes() == b"precious"
    for relative in ("../someone-elses-file", "a/../../someone-elses-file"):
        _tamper(db, "UPDATE Cache SET mode = 2, filename = ?, value = NULL", relative)
        assert PlanCache(tmp_path / "cache").count(KEY, lambda: 8) == 8
        assert victim.read_bytes() == b"precious"


def test_a_store_with_settings_of_its_own_is_cleared_not_obeyed(tmp_path: Path) -> None:
    db = _stored(tmp_path / "cache")
    _tamper(db, "INSERT INTO Settings VALUES ('disk_directory', '/')")
    later = PlanCache(tmp_path / "cache")
    assert later.on_disk
    assert later.count(KEY, lambda: 7) == 7  # the store was cleared: made again, stored again
    later.close()
    with sqlite3.connect(db) as con:
        keys = {row[0] for row in con.execute("SELECT key FROM Settings")}
    assert "disk_directory" not in keys


def test_the_model_cards_store_keeps_json_bytes_and_refuses_a_pickle_row(
    tmp_path: Path, model_path: Path
) -> None:
    ran = tmp_path / "the-pickle-ran"
    first = CardCache(tmp_path / "cards")
    card = first.card(model_path)
    first.close()
    _tamper(tmp_path / "cards" / "cache.db", "UPDATE Cache SET mode = 4, value = ?",
            pickle.dumps(_Runs(ran)))  # fmt: skip
    later = CardCache(tmp_path / "cards")
    assert later.card(model_path) == card and later.headers_read == 1  # read again
    assert not ran.exists()


def test_values_are_bytes_only_and_the_folder_is_private(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "store"
    store = open_store(folder, 1 << 20)
    try:
        store.set("small", b"x" * 10)
        store.set("large", b"y" * (1 << 16))  # in a file of its own, inside the folder
        assert store.get("small") == b"x" * 10 and store.get("large") == b"y" * (1 << 16)
        with pytest.raises(TypeError, match="bytes only"):
            store.set("object", {"a": 1})
    finally:
        store.close()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
