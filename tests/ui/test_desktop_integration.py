"""Desktop integration: the icon and its PNG sizes, the .desktop entry, the .ctxlens file type
(glob and zip magic checked against a real export), the install script, and .ctxlens files
given on the command line or by a second launch going into the history."""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from PySide6.QtCore import QSettings, QThreadPool
from PySide6.QtGui import QImage

from app.core.documents import document_from_text
from app.core.jobs.tasks import JobResult
from app.core.paths import project_root, resources_dir
from app.store.archive import export_session
from app.store.db import open_database
from app.store.repository import Entry, Repository
from app.ui.main_window import MainWindow
from app.ui.single_instance import open_in

LINUX = project_root() / "packaging" / "linux"
SESSION_MIME = "application/x-contextlens-session"
DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
WAIT = 30_000
MIME_NS = "http://www.freedesktop.org/standards/shared-mime-info"


def _render_icons() -> ModuleType:
    """packaging/render_icons.py, which makes the committed PNGs (a script, not a package)."""
    path = project_root() / "packaging" / "render_icons.py"
    spec = importlib.util.spec_from_file_location("render_icons", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pixels(image: QImage) -> np.ndarray:
    """Height x width x 4 (B, G, R, A) of an ARGB32 image."""
    image = image.convertToFormat(QImage.Format.Format_ARGB32)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), -1)
    return rows[:, : image.width() * 4].reshape(image.height(), image.width(), 4).copy()


def test_the_icon_renders_and_its_png_sizes_are_committed(qapp) -> None:
    icons = _render_icons()
    assert resources_dir() / "icons" == icons.ICONS and icons.SVG.is_file()
    for size in icons.SIZES:
        committed = QImage(str(icons.png_path(size)))
        assert not committed.isNull(), f"{icons.png_path(size)} is missing: run render_icons.py"
        assert (committed.width(), committed.height()) == (size, size)
        pixels = _pixels(committed)
        alpha = pixels[..., 3]
        assert 0.6 < (alpha > 0).mean() < 1.0, size  # a rounded tile: corners see through
        opaque = pixels[alpha == 255][:, :3]
        colours = {tuple(c) for c in opaque}
        assert len(colours) >= 5, size  # tile, three bars and the lens, not a flat square
        fresh = _pixels(icons.render(icons.SVG, size))
        drift = np.abs(fresh.astype(int) - pixels.astype(int)).mean()
        assert drift < 2, f"contextlens-{size}.png is older than the SVG (mean drift {drift:.1f})"


def test_the_desktop_entry_is_valid_and_opens_sessions_and_documents() -> None:
    entry = LINUX / "contextlens.desktop"
    validator = shutil.which("desktop-file-validate")
    if validator is not None:
        checked = subprocess.run([validator, str(entry)], capture_output=True, text=True,
                                 check=False)  # fmt: skip
        assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(entry, encoding="utf-8")
    desktop = parser["Desktop Entry"]
    assert desktop["Type"] == "Application" and desktop["Name"] == "ContextLens"
    assert desktop["Exec"] == "contextlens %F" and desktop["Icon"] == "contextlens"
    assert desktop["Terminal"] == "false" and desktop["Categories"].endswith(";")
    types = desktop["MimeType"].rstrip(";").split(";")
    for wanted in (SESSION_MIME, "text/plain", "text/markdown", "text/html", "application/pdf",
                   DOCX_MIME, "text/x-python"):  # fmt: skip
        assert wanted in types
    assert len(types) == len(set(types))


@pytest.fixture
def export(tmp_path: Path) -> Iterator[Path]:
    """A real session export (one version, one run) written by the store."""
    db = open_database(tmp_path / "source.db")
    repo = Repository(db)
    doc = document_from_text("The harbour at dawn. " * 40, name="harbour.txt")
    content = {"task": "summarize", "strategy": "head", "prompt": "Summarize.",
               "model_path": "/m.gguf", "model_sha256": "m" * 64,
               "settings": {"n_ctx": 512}}  # fmt: skip
    repo.record(doc, "harbour", [Entry(content, JobResult("summarize", "head", "stop", 512))])
    path = tmp_path / "harbour.ctxlens"
    export_session(repo, repo.sessions()[0]["id"], path)
    repo.close()
    db.close()
    yield path


def _unescape(value: str) -> bytes:
    """shared-mime-info string values: octal escapes such as ``\\003``."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), value).encode("latin-1")


def test_the_mime_type_names_ctxlens_and_its_magic_matches_a_real_export(export: Path) -> None:
    ns = {"m": MIME_NS}
    root = ET.parse(LINUX / "contextlens-mime.xml").getroot()
    [mime] = root.findall("m:mime-type", ns)
    assert mime.get("type") == SESSION_MIME
    assert [g.get("pattern") for g in mime.findall("m:glob", ns)] == ["*.ctxlens"]
    assert mime.find("m:sub-class-of", ns).get("type") == "application/zip"
    head = export.read_bytes()[:64]
    for match in mime.iter(f"{{{MIME_NS}}}match"):
        offset, value = int(match.get("offset")), _unescape(match.get("value"))
        assert head[offset : offset + len(value)] == value, match.attrib
    plain_zip = export.with_name("other.zip")
    with zipfile.ZipFile(plain_zip, "w") as zf:
        zf.writestr("readme.txt", "not a session")
    inner = next(mime.iter(f"{{{MIME_NS}}}match")).find("m:match", ns)
    offset, value = int(inner.get("offset")), _unescape(inner.get("value"))
    assert plain_zip.read_bytes()[offset : offset + len(value)] != value  # zips stay zips


def _installed(data: Path) -> list[Path]:
    return sorted(p for p in data.rglob("*") if "contextlens" in p.name and p.is_file())


@pytest.mark.parametrize("how", [[], ["--plain"]], ids=["xdg-utils when present", "plain"])
def test_the_install_script_installs_for_the_user_and_uninstalls(
    tmp_path: Path, how: list[str]
) -> None:
    data, config = tmp_path / "data", tmp_path / "config"
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(data),
           "XDG_CONFIG_HOME": str(config)}  # fmt: skip
    script = str(LINUX / "install-desktop.sh")
    done = subprocess.run(["bash", script, *how], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (data / "applications" / "contextlens.desktop").is_file()
    assert any((data / "mime" / "packages").glob("contextlens*.xml"))
    assert (data / "icons/hicolor/scalable/apps/contextlens.svg").is_file()
    for size in (16, 48, 256):
        png = data / f"icons/hicolor/{size}x{size}/apps/contextlens.png"
        assert QImage(str(png)).width() == size
    installed = (data / "applications" / "contextlens.desktop").read_text(encoding="utf-8")
    assert re.search(r"^Exec=\S*contextlens %F$", installed, re.MULTILINE)
    if shutil.which("update-mime-database"):  # the XML went through the real MIME compiler
        globs = (data / "mime" / "globs2").read_text(encoding="utf-8")
        assert f"{SESSION_MIME}:*.ctxlens" in globs

    gone = subprocess.run(["bash", script, "--uninstall", *how], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert gone.returncode == 0, gone.stderr
    assert _installed(data) == []
    for listing in (config / "mimeapps.list", data / "applications" / "defaults.list"):
        if listing.exists():
            assert "contextlens.desktop" not in listing.read_text(encoding="utf-8")


def test_the_install_script_in_the_packaged_folder_names_that_folders_app(tmp_path: Path) -> None:
    """`make package` copies the script and its files to dist/contextlens/desktop/: from there
    the icons come from _internal/resources and the menu entry starts the folder's executable."""
    folder = tmp_path / "contextlens"
    shutil.copytree(LINUX, folder / "desktop")
    shutil.copytree(resources_dir() / "icons", folder / "_internal" / "resources" / "icons")
    app = folder / "contextlens"
    app.write_text("#!/bin/sh\n", encoding="utf-8")
    app.chmod(0o755)
    data = tmp_path / "data"
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(data),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}  # fmt: skip
    done = subprocess.run(["bash", str(folder / "desktop" / "install-desktop.sh"), "--plain"],
                          env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    installed = (data / "applications" / "contextlens.desktop").read_text(encoding="utf-8")
    assert f"\nExec={app} %F\n" in installed and f"\nTryExec={app}\n" in installed
    assert QImage(str(data / "icons/hicolor/48x48/apps/contextlens.png")).width() == 48


def test_an_unknown_install_option_is_refused_in_one_sentence(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(LINUX / "install-desktop.sh"), "--everywhere"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2 and list(tmp_path.iterdir()) == []
    assert done.stderr.strip() == "install-desktop.sh: unknown option '--everywhere' (try --help)"


def test_a_ctxlens_on_the_command_line_is_imported_and_a_second_launch_opens_documents(
    qtbot, tmp_path: Path, export: Path
) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(None, export, db_path=tmp_path / "h.db", settings=settings)  # as on the
    qtbot.addWidget(w)  # command line: `contextlens harbour.ctxlens`
    assert w.history is not None
    imported = qtbot.waitSignal(w.history.imported, timeout=WAIT)
    imported.wait()  # the import runs in the background from the constructor on
    session = imported.args[0].session_id
    assert w.tabs.currentWidget() is w.history and w.history.session_id() == session
    assert [s["name"] for s in w.store.repo.sessions()] == ["harbour"]
    assert w.document_path is None  # a session export is not a document

    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\n\nA second launch sent this file.\n", encoding="utf-8")
    with qtbot.waitSignal(w.plan_shown, timeout=WAIT):
        open_in(w, [doc], {})  # what the running window does with a second launch's files
    assert w.document_path == doc and w.isVisible()
    bad = tmp_path / "broken.ctxlens"
    bad.write_bytes(b"PK\x03\x04 not really")
    with qtbot.waitSignal(w.history.failed, timeout=WAIT) as failed:
        open_in(w, [bad], {})
    assert failed.args[0].startswith("broken.ctxlens is not a ContextLens export")
    assert len(w.store.repo.sessions()) == 1  # nothing changed
    w.close()
    QThreadPool.globalInstance().waitForDone(WAIT)
