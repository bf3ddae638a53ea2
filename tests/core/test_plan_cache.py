"""No work twice: chunkings, plans and counts are made once per document bytes and tokenizer.

Switching strategy back, opening the same bytes again (at another path, or after a restart
through the disk) counts nothing; changed bytes are planned anew; a damaged cache entry is made
again; what the cache returns equals what is made fresh.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import diskcache
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.documents import Document, document_from_text, load_document
from app.core.paths import sample_document
from app.core.planning import cache as plan_cache
from app.core.planning.cache import BoundedLru, PlanCache, doc_id
from app.core.planning.strategies import STRATEGIES, Planner, PlanOptions
from app.core.tokens import LlamaCounter, TiktokenCounter, cl100k
from tests.core.doc_strategies import markdown_documents

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parent.parent / "data"
REAL = ("sample.md", "sample.html", "sample.pdf", "sample.docx", "chinese-gbk.txt", "sample.py")
_FIXTURES_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@pytest.fixture(scope="module")
def lexicon_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 KB of the sample text as a file: hundreds of chunks."""
    path = tmp_path_factory.mktemp("docs") / "lexicon.txt"
    path.write_text(sample_document().read_text(encoding="utf-8")[:200_000], encoding="utf-8")
    return path


class Spy:
    """How often the counter was asked to count (any counting is a recount here)."""

    def __init__(self, counter: TiktokenCounter, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        for name in ("count", "count_many", "encode"):
            monkeypatch.setattr(counter, name, self._wrap(getattr(counter, name)))

    def _wrap(self, real: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object) -> object:
            self.calls += 1
            return real(*args)

        return call


@pytest.fixture
def spy(gguf_counter: TiktokenCounter, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spy]:
    yield Spy(gguf_counter, monkeypatch)


def _never() -> Document:
    raise AssertionError("the document was read, though its work was done")


def test_switching_strategy_back_replans_and_recounts_nothing(
    gguf_counter: TiktokenCounter, lexicon_file: Path, spy: Spy
) -> None:
    planner = Planner(load_document(lexicon_file), gguf_counter)
    first = planner.plan("head", 1500)
    planner.plan("entropy", 1500)
    made, calls = planner.stats.as_dict(), spy.calls
    assert made["plans_made"] == 2 and made["chunkings_made"] == 2 and calls > 0
    again = planner.plan("head", 1500)
    assert again is first
    assert spy.calls == calls, "switching back counted again"
    assert planner.stats.plans_made == 2 and planner.stats.plans_reused == 1
    assert planner.stats.chunkings_made == 2


def test_the_same_bytes_at_another_path_reuse_counts_and_plans(
    gguf_counter: TiktokenCounter, lexicon_file: Path, tmp_path: Path, spy: Spy
) -> None:
    cache = PlanCache()
    docs = [load_document(DATA / name) for name in REAL] + [load_document(lexicon_file)]
    plans = {}
    for doc in docs:
        planner = Planner(doc, gguf_counter, cache=cache)
        for strategy in STRATEGIES:
            plans[doc.name, strategy] = planner.plan(strategy, 300)
        assert planner.count() == gguf_counter.count(doc.text)
    made, calls = cache.stats.as_dict(), spy.calls
    for doc in docs:
        assert doc.path is not None
        copy = tmp_path / f"copy-of-{doc.path.name}"
        shutil.copyfile(doc.path, copy)
        reopened = load_document(copy)
        assert reopened.sha256 == doc.sha256 and reopened.path != doc.path
        planner = Planner(reopened, gguf_counter, cache=cache)
        for strategy in STRATEGIES:
            assert planner.plan(strategy, 300) is plans[doc.name, strategy]
        planner.count()
    assert spy.calls == calls, "a document opened again was counted again"
    assert cache.stats.plans_made == made["plans_made"]
    assert cache.stats.chunkings_made == made["chunkings_made"]
    assert cache.stats.counts_made == made["counts_made"] == len(docs)
    assert cache.stats.plans_reused == len(docs) * len(STRATEGIES)


def test_a_changed_document_is_planned_anew(gguf_counter: TiktokenCounter, tmp_path: Path) -> None:
    cache = PlanCache(tmp_path / "cache")
    path = tmp_path / "notes.md"
    path.write_text((DATA / "sample.md").read_text(encoding="utf-8"), encoding="utf-8")
    before = Planner(load_document(path), gguf_counter, cache=cache).plan("head", 120)
    path.write_text(path.read_text(encoding="utf-8").replace("the", "THE THE"), encoding="utf-8")
    edited = load_document(path)
    after = Planner(edited, gguf_counter, cache=cache).plan("head", 120)
    assert after == Planner(edited, gguf_counter).plan("head", 120) != before
    assert cache.stats.plans_made == 2 and cache.stats.plans_reused == 0


def test_other_options_and_other_counters_are_other_work(
    gguf_counter: TiktokenCounter, lexicon_file: Path
) -> None:
    cache = PlanCache()
    doc = load_document(lexicon_file)
    head = Planner(doc, gguf_counter, cache=cache).plan("semantic", 900)
    wider = Planner(doc, gguf_counter, cache=cache).plan("semantic", 900, PlanOptions(overlap=0.4))
    estimate = Planner(doc, cl100k(), cache=cache).plan("semantic", 900)
    assert cache.stats.plans_made == 3 and cache.stats.plans_reused == 0
    assert wider != head and estimate.total_tokens != head.total_tokens
    # the same bytes read as another format are other chunks
    assert doc_id(doc.sha256, "text") != doc_id(doc.sha256, "markdown")


def test_after_a_restart_the_disk_answers_without_reading_or_counting(
    gguf_counter: TiktokenCounter, lexicon_file: Path, tmp_path: Path, spy: Spy
) -> None:
    doc = load_document(lexicon_file)
    first = PlanCache(tmp_path / "cache")
    made = {s: Planner(doc, gguf_counter, cache=first).plan(s, 700) for s in ("head", "rolling")}
    total = Planner(doc, gguf_counter, cache=first).count()
    first.close()
    calls = spy.calls
    later = PlanCache(tmp_path / "cache")  # a new process: nothing in memory
    planner = Planner(_never, gguf_counter, cache=later, doc_id=doc_id(doc.sha256, doc.format))
    for strategy, plan in made.items():
        assert planner.plan(strategy, 700) == plan
    assert planner.count() == total
    assert spy.calls == calls
    stats = later.stats
    assert stats.disk_reads == 3 and stats.plans_reused == 2 and stats.counts_reused == 1
    assert stats.plans_made == stats.chunkings_made == stats.counts_made == stats.disk_errors == 0
    # a plan not on disk reads the document after all: here the loader says so
    with pytest.raises(AssertionError, match="was read"):
        planner.plan("tail", 700)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "index"])
def test_a_damaged_cache_is_ignored_and_made_again(
    gguf_counter: TiktokenCounter, lexicon_file: Path, tmp_path: Path, damage: str
) -> None:
    doc = load_document(lexicon_file)
    folder = tmp_path / "cache"
    first = PlanCache(folder)
    fresh = {s: Planner(doc, gguf_counter).plan(s, 400) for s in ("head", "entropy")}
    for strategy in fresh:
        Planner(doc, gguf_counter, cache=first).plan(strategy, 400)
    first.close()
    files: list[Path] = []
    if damage == "garbage":  # every entry, small (in the index) or large (in its own file)
        with diskcache.Cache(str(folder)) as raw:
            for key in list(raw):
                raw.set(key, b"CLPC\x01 not what was written")
    elif damage == "truncated":
        files = list(folder.rglob("*.val"))
        assert files, "large entries live in files of their own"
        for file in files:
            file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    else:
        for file in folder.glob("cache.db*"):
            file.write_bytes(b"this is not a database" * 100)
    later = PlanCache(folder)
    assert later.on_disk
    for strategy, plan in fresh.items():
        assert Planner(doc, gguf_counter, cache=later).plan(strategy, 400) == plan
    stats = later.stats
    assert stats.plans_made + stats.plans_reused == 2
    if damage == "garbage":  # both plans, both chunkings and the count were unreadable
        assert stats.plans_made == 2 and stats.disk_errors == 5
    elif damage == "truncated":
        assert 1 <= stats.disk_errors <= len(files)
    else:  # the damaged index was cleared: nothing to read, nothing unreadable
        assert stats.plans_made == 2 and stats.disk_errors == 0
    again = PlanCache(folder)  # what was made again was stored again, and is read now
    for strategy, plan in fresh.items():
        assert Planner(doc, gguf_counter, cache=again).plan(strategy, 400) == plan
    assert again.stats.plans_reused == 2 and again.stats.disk_errors == 0


def test_an_unusable_folder_leaves_a_cache_in_memory(gguf_counter: TiktokenCounter, tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cache = PlanCache(blocker / "cache")
    assert not cache.on_disk
    doc = load_document(DATA / "sample.md")
    planner = Planner(doc, gguf_counter, cache=cache)
    assert planner.plan("tail", 100) is planner.plan("tail", 100)


def test_the_disk_store_stays_within_its_size(
    gguf_counter: TiktokenCounter, tmp_path: Path
) -> None:
    limit = 64 * 1024
    cache = PlanCache(tmp_path / "cache", disk_bytes=limit)
    doc = document_from_text(sample_document().read_text(encoding="utf-8")[:200_000])
    planner = Planner(doc, gguf_counter, cache=cache)
    for budget in range(128, 248, 4):  # every budget its own chunking: ~1 MB written in all
        planner.plan("semantic", budget)
    cache.close()
    with diskcache.Cache(str(tmp_path / "cache")) as raw:
        assert raw.volume() <= 2 * limit
        assert 0 < len(raw) < cache.stats.disk_writes


def test_counters_without_a_name_are_never_shared(tmp_path: Path) -> None:
    llama = LlamaCounter(lambda text, special: list(text.encode()), name="bytes")
    cache = PlanCache(tmp_path / "cache")
    planner = Planner(document_from_text("Some words. More words."), llama, cache=cache)
    planner.plan("head", 10)
    assert planner.cache is not cache and cache.stats.plans_made == 0
    assert planner.stats.plans_made == 1


def test_a_document_loaded_on_demand_must_be_named(gguf_counter: TiktokenCounter) -> None:
    with pytest.raises(ValueError, match="doc_id"):
        Planner(_never, gguf_counter, cache=PlanCache())


def test_the_memory_lru_is_bounded_by_items_and_rows() -> None:
    lru = BoundedLru(max_items=3, max_rows=10)
    for i in range(4):
        lru.put(i, str(i), rows=2)
    assert len(lru) == 3 and lru.get(0) is None and lru.get(1) == "1"
    lru.put("big", "x", rows=7)  # 1 (just used) stays, the older 2 goes, then 3
    assert lru.get(2) is None and lru.get(1) == "1" and lru.get("big") == "x"
    lru.put("huge", "y", rows=11)
    assert lru.get("huge") is None, "an entry over the bound is not held"


@settings(max_examples=25, deadline=None, suppress_health_check=_FIXTURES_OK)
@given(markdown_documents(), st.integers(0, 500), st.sampled_from(sorted(STRATEGIES)))
def test_plans_from_the_cache_equal_plans_made_fresh(
    gguf_counter: TiktokenCounter, tmp_path: Path, text: str, budget: int, strategy: str
) -> None:
    doc = document_from_text(text, format="markdown")
    fresh = Planner(doc, gguf_counter).plan(strategy, budget)
    folder = tmp_path / "cache"
    Planner(doc, gguf_counter, cache=PlanCache(folder)).plan(strategy, budget)
    memory_only = PlanCache()
    Planner(doc, gguf_counter, cache=memory_only).plan(strategy, budget)
    for cache in (PlanCache(folder), memory_only):
        reused = Planner(doc, gguf_counter, cache=cache).plan(strategy, budget)
        assert reused == fresh and reused.chunks == fresh.chunks
        assert cache.stats.plans_reused >= 1


def test_the_disk_key_hashes_the_sources_that_decide_plans() -> None:
    """Plans on disk are keyed by a hash of the code that made them; were a source missing
    (a module moved), the key would fall back to the version string and keep stale plans."""
    core = Path(plan_cache.__file__).resolve().parents[1]
    assert all((core / name).exists() for name in plan_cache._CODE), plan_cache._CODE
    version = plan_cache.code_version()
    assert len(version) == 64 and ":" not in version
