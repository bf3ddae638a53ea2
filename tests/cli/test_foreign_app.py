"""The app's children never import from the folder it was started in (issue 21, finding 5).

``python -m app.core.engine.child`` puts the working directory first on the child's path: run
from a folder holding its own ``app/__init__.py``, the engine ran that file instead of the app
(and ``multiprocessing``'s spawn, which the planning process used, runs ``python -c``: the same).
Here ``contextlens-cli``, as installed, runs from a folder whose ``app``, ``jinja2``,
``llama_cpp``, ``json`` and ``multiprocessing`` packages each leave a mark and exit: the commands
that start the engine, its chat-template renderer and the planning process work as anywhere
else, and nothing is marked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.child_process import package_root
from app.core.documents import load_document
from app.core.planning.process import PlanProcess
from app.core.tokens import CL100K_KEY
from tests.conftest import DATA

FOREIGN = ("app", "jinja2", "llama_cpp", "json", "multiprocessing")
CLI = Path(sys.executable).with_name("contextlens-cli")


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """A folder of look-alike packages; each, imported, writes ``marks/NAME`` and exits 97."""
    folder = tmp_path / "elsewhere"
    marks = tmp_path / "marks"
    marks.mkdir()
    for name in FOREIGN:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(
            f"open({str(marks / name)!r}, 'w').close()\nraise SystemExit(97)\n"
        )
    return folder


def _marks(foreign: Path) -> list[str]:
    return sorted(p.name for p in (foreign.parent / "marks").iterdir())


def _cli(foreign: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not CLI.exists():
        pytest.skip(f"{CLI} is not installed (pip install -e .)")
    # This checkout's app (an installed copy would do the same); the folder stays the cwd.
    env = {**os.environ, "PYTHONPATH": package_root()}
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run([str(CLI), *args], cwd=foreign, env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


def test_generate_from_a_folder_with_its_own_app(foreign: Path, model_path: Path) -> None:
    """The engine child, and the renderer of the chat template it starts in turn."""
    proc = _cli(foreign, "generate", "--prompt", "Say hello.", "--max-tokens", "4", "--json",
                "--model", str(model_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["type"] == "done"
    assert _marks(foreign) == []


def test_plan_from_a_folder_with_its_own_app(foreign: Path, model_path: Path) -> None:
    """The prompt frame comes from the model's template, rendered in a child of the CLI."""
    proc = _cli(foreign, "plan", str(DATA / "sample.md"), "--model", str(model_path),
                "--n-ctx", "512", "--strategy", "head", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["strategy"] == "head"
    assert _marks(foreign) == []


def test_the_planning_process_from_a_folder_with_its_own_app(
    foreign: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))
    doc = load_document(DATA / "sample.md")
    monkeypatch.chdir(foreign)
    plans = PlanProcess()
    try:
        assert plans.count(doc, CL100K_KEY) > 0
    finally:
        plans.close()
    assert _marks(foreign) == []


def test_a_child_started_as_before_would_have_run_the_folders_app(foreign: Path) -> None:
    """The hazard is real: the same folder, the old command line."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    proc = subprocess.run([sys.executable, "-m", "app.core.engine.child", "--help"], env=env,
                          cwd=foreign, capture_output=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 97 and _marks(foreign) == ["app"]
