"""The environment is read in one place (app/core/config.py): each variable's meaning, an entry
point's configuration held for its run and given back after, and no other module reading it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.core import calibrate, config, credentials, model_fetch
from app.core.config import Config

pytestmark = pytest.mark.unit

APP = Path(__file__).resolve().parents[2] / "app"


def test_an_empty_environment_is_every_default() -> None:
    assert Config.from_environ({}) == Config()
    assert Config().calibrate is True and Config().db is None and Config().api_key == ""


def test_each_variable_reaches_its_field(tmp_path: Path) -> None:
    env = {
        "CONTEXTLENS_DB": str(tmp_path / "h.db"),
        "CONTEXTLENS_CACHE": "~/cache",
        "CONTEXTLENS_MODELS": str(tmp_path / "models"),
        "CONTEXTLENS_RESOURCES": str(tmp_path / "res"),
        "CONTEXTLENS_STATE": str(tmp_path / "state"),
        "CONTEXTLENS_CALIBRATE": "0",
        "CONTEXTLENS_PYPI_URL": " https://mirror.example/simple ",
        "CONTEXTLENS_API_KEY": " sk-1 ",
        "CONTEXTLENS_API_HOST": "gpu-box:8000",
        "CONTEXTLENS_BENCH_DIR": str(tmp_path / "bench"),
    }
    got = Config.from_environ(env)
    assert got.db == tmp_path / "h.db"
    assert got.cache == Path("~/cache").expanduser() and "~" not in str(got.cache)
    assert (got.models, got.resources, got.state, got.bench_dir) == (
        tmp_path / "models", tmp_path / "res", tmp_path / "state", tmp_path / "bench")  # fmt: skip
    assert got.calibrate is False
    assert got.package_index == "https://mirror.example/simple"  # stripped, not rewritten here
    assert (got.api_key, got.api_host) == ("sk-1", "gpu-box:8000")


@pytest.mark.parametrize(("value", "on"), [("0", False), ("off", False), ("No", False),
                                           ("FALSE", False), (" 0 ", False), ("1", True),
                                           ("yes", True), ("", True)])  # fmt: skip
def test_calibration_is_turned_off_by_the_usual_words(value: str, on: bool) -> None:
    assert Config.from_environ({"CONTEXTLENS_CALIBRATE": value}).calibrate is on


def test_an_empty_path_variable_means_the_default() -> None:
    assert Config.from_environ({"CONTEXTLENS_DB": "", "CONTEXTLENS_CACHE": ""}) == Config()


def test_an_entry_point_runs_under_what_it_read_and_gives_it_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "first"))
    assert config.current().cache == tmp_path / "first"  # no entry point: the environment now
    with config.using() as running:
        assert running.cache == tmp_path / "first"
        monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "second"))
        assert config.current() is running  # read once: a later change does not reach it
        with config.using(Config(cache=tmp_path / "inner")):
            assert config.current().cache == tmp_path / "inner"
        assert config.current() is running
    assert config.current().cache == tmp_path / "second"


def test_an_entry_point_that_fails_still_gives_its_configuration_back() -> None:
    with pytest.raises(RuntimeError), config.using(Config(calibrate=False)):
        raise RuntimeError("the command failed")
    assert config._RUNNING == []


def test_no_other_module_reads_a_contextlens_variable() -> None:
    """A new setting goes into Config, not into an ``os.environ`` read beside the code using it."""
    read = re.compile(r"(environ\.get|environ\[|getenv)\(?\s*[\"']CONTEXTLENS_")
    offenders = [
        str(path.relative_to(APP))
        for path in APP.rglob("*.py")
        if path.name != "config.py" and read.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
    # and the names the messages quote are the ones Config reads
    assert (calibrate.AUTO_ENV, model_fetch.INDEX_ENV, credentials.ENV_KEY,
            credentials.ENV_HOST) == (config.CALIBRATE_ENV, config.INDEX_ENV, config.API_KEY_ENV,
                                      config.API_HOST_ENV)  # fmt: skip
