"""How many checks the suite makes, counted in its source: ``assert`` statements and
``pytest.raises`` blocks, per tier folder. Run ``python -m tests.assertion_count [REV]`` (REV: a
git revision to count instead of the working tree): moving and merging tests must not lower it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def checks(source: str) -> int:
    """The ``assert`` statements and ``pytest.raises(...)`` calls in ``source``."""
    def is_check(node: ast.AST) -> bool:
        if isinstance(node, ast.Assert):
            return True
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "raises")  # fmt: skip

    return sum(1 for node in ast.walk(ast.parse(source)) if is_check(node))


def _sources(rev: str | None) -> dict[str, str]:
    if rev is None:
        return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
                for p in (ROOT / "tests").rglob("*.py")}  # fmt: skip
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "tests"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    return {n: subprocess.run(["git", "show", f"{rev}:{n}"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout
            for n in names if n.endswith(".py")}  # fmt: skip


def count(rev: str | None = None) -> Counter[str]:
    """Checks per top folder of tests/ (benchmarks left out: they measure, not test)."""
    per: Counter[str] = Counter()
    for name, source in _sources(rev).items():
        parts = Path(name).parts
        if "benchmarks" in parts:
            continue
        folder = parts[1] if len(parts) > 2 else "."
        per[folder] += checks(source)
    return per


def main(argv: list[str]) -> int:
    per = count(argv[0] if argv else None)
    for folder, n in sorted(per.items()):
        print(f"{folder:10s} {n:6,}")
    print(f"{'total':10s} {sum(per.values()):6,}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
