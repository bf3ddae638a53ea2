"""MkDocs hook: pages that live elsewhere in the repository, added to the site as they are.

The user guide is the one the app shows (Help › User Guide reads resources/help/guide.md and its
pictures in resources/help/guide/, app/ui/help.py); ARCHITECTURE.md and tests/README.md are read
beside the code. Each is added at build time under a site path of its own, never copied into
docs/, so there is one text to keep. Nothing is rewritten: the guide's links to ``guide/*.png``
resolve because its pictures are added under the same relative path.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[2]
HELP = ROOT / "resources" / "help"

# site path -> file in the repository
PAGES = {
    "guide.md": HELP / "guide.md",
    "architecture.md": ROOT / "ARCHITECTURE.md",
    "tests.md": ROOT / "tests" / "README.md",
}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for uri, path in PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    # translations of the guide (guide.<lang>.md), reachable but not in the navigation
    for path in sorted(HELP.glob("guide.*.md")):
        files.append(
            File.generated(config, path.name, abs_src_path=str(path),
                           inclusion=InclusionLevel.NOT_IN_NAV)
        )  # fmt: skip
    for path in sorted((HELP / "guide").glob("*.png")):
        files.append(File.generated(config, f"guide/{path.name}", abs_src_path=str(path)))
    return files
