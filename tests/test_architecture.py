"""Dependencies point one way: core and store never import Qt (also an import-linter contract)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import app.core
import app.store


def _modules(package: object) -> list[str]:
    return [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]  # type: ignore[attr-defined]


def test_core_and_store_load_without_qt() -> None:
    modules = ["app.core", "app.store", *_modules(app.core), *_modules(app.store)]
    assert "app.core.engine.host" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('PySide6', 'shiboken6', 'pyqtgraph') or m.startswith('app.ui'))\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "", f"Qt reached core/store through: {proc.stdout}"


def test_import_linter_contracts_hold() -> None:
    from pathlib import Path

    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 kept, 0 broken" in proc.stdout
