"""Dependencies point one way: faces > services > store > core (import-linter's layers contract),
core, store and services never import Qt, and no import circle inside app/."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import app.core
import app.services
import app.store


def _modules(package: object) -> list[str]:
    return [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]  # type: ignore[attr-defined]


def test_core_store_and_services_load_without_qt() -> None:
    modules = ["app.core", "app.store", "app.services", *_modules(app.core), *_modules(app.store),
               *_modules(app.services)]  # fmt: skip
    assert "app.core.engine.host" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('PySide6', 'shiboken6', 'pyqtgraph') or m.startswith(('app.ui', 'app.cli')))\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "", f"Qt or a face reached the core through: {proc.stdout}"


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ", 0 broken" in proc.stdout
    for contract in ("the faces never touch the store, the engine host or llama.cpp directly",
                     "the faces never import the job runner"):  # fmt: skip
        assert f"{contract} KEPT" in proc.stdout


def _circles(graph: object) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):  # type: ignore[attr-defined]
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph.modules):  # type: ignore[attr-defined]
        if module not in index:
            visit(module)
    return sorted(found)


@pytest.mark.unit
def test_no_import_circle_inside_app() -> None:
    """No module of ``app/`` imports itself back through others (issue 22): two modules that
    need each other share a part that belongs in a module of its own, which both import. Every
    import counts, deferred ones inside functions and TYPE_CHECKING ones too: a deferred import
    hides a circle from Python, not from the reader."""
    import grimp  # noqa: PLC0415 (import-linter's, the optional `dev` extra)

    graph = grimp.build_graph("app", cache_dir=None)
    assert "app.core.planning.plan" in graph.modules
    assert _circles(graph) == []


@pytest.mark.unit
def test_the_services_export_no_store_type() -> None:
    """What a face can import from ``app.services`` is the services' own or the core's: no class,
    function or error of ``app.store`` passes through (the faces hold a ``History`` and call
    the services, never the repository)."""
    import importlib  # noqa: PLC0415

    leaked = []
    for name in ["app.services", *_modules(app.services)]:
        module = importlib.import_module(name)
        public = getattr(module, "__all__", None) or [n for n in vars(module) if n[0] != "_"]
        for attr in public:
            origin = getattr(getattr(module, attr, None), "__module__", "") or ""
            if origin.startswith("app.store"):
                leaked.append(f"{name}.{attr} ({origin})")
    assert leaked == []


@pytest.mark.unit
def test_the_faces_never_reach_into_the_store_behind_a_history() -> None:
    """``History.repo`` is the services' own: no face reads an attribute named ``repo``."""
    import ast  # noqa: PLC0415

    root = Path(__file__).resolve().parents[1] / "app"
    found = [
        f"{path.relative_to(root.parent)}:{node.lineno}"
        for face in ("ui", "cli")
        for path in sorted((root / face).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr == "repo"
    ]
    assert found == []
