"""The Simplified Chinese translation: complete for every string the code marks, faithful to its
placeholders and accelerators, actually shown by the window, and chosen by the language setting.

The .qm the app loads is compiled here from the committed .ts (as ``make setup`` does), so the
tests check the source of truth whether or not the build has run.
"""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QLocale, QSettings
from PySide6.QtWidgets import (
    QApplication,
    QWidget,
)

from app.core.engine.types import KV_CACHE_TYPE_NAMES
from app.core.paths import project_root
from app.core.planning.strategies import STRATEGIES
from app.ui import i18n
from app.ui.main_window import MainWindow
from tests.ui.ui_texts import TS, tool, visible_texts

UI_SOURCES = sorted(str(p) for p in (project_root() / "app" / "ui").glob("*.py"))
PLACEHOLDER = re.compile(r"\{[^{}]*\}|%\d+")
ACCELERATOR = re.compile(r"&([^&\s])")
CJK = re.compile(r"[\u4e00-\u9fff]")
# Latin text that stays as it is in the Chinese window, and why:
ALLOWED = [
    r"ContextLens",  # the product's name
    r"English",  # a language offered in its own name (View ▸ Language)
    *(re.escape(name) for name in STRATEGIES),  # strategy identifiers, as typed in the CLI
    *KV_CACHE_TYPE_NAMES,  # llama.cpp's cache type names
    # technical terms, which Chinese software writes in Latin letters too
    *(r"GGUF v\d+", r"GGUF", r"llama\.cpp", r"KV", r"GPU", r"CPU", r"n_ctx", r"Flash Attention"),
    r"(?:/[\w.-]+)*/?[\w.-]+\.(?:gguf|ctxlens|txt)",  # file names and paths (a tooltip's)
    r"%p%",  # a progress bar's format: Qt puts the percentage there
    r"https?://[\w.:/-]+",  # addresses (the server's)
    r"\d[\d,.]*\s*(?:MiB|GiB|MB|B|M|s)?\b",  # numbers and their units
]


def _messages(path: Path) -> dict[tuple[str, str], ET.Element]:
    """(context, source) -> its <translation> element."""
    found = {}
    for context in ET.parse(path).getroot().iter("context"):
        name = context.findtext("name", "")
        for message in context.iter("message"):
            found[(name, message.findtext("source", ""))] = message.find("translation")
    return found


def _text(translation: ET.Element | None) -> str:
    """A translation's text; for a plural (``%n``) its forms, one per line (Chinese has one)."""
    if translation is None:
        return ""
    forms = translation.findall("numerusform")
    return "\n".join(f.text or "" for f in forms) if forms else translation.text or ""


@pytest.fixture
def chinese(qapp: QApplication, compiled: Path) -> Iterator[None]:
    """The zh_CN translators installed for one test, then taken off again."""
    assert i18n.install_translator(qapp, "zh_CN", folder=compiled) == "zh_CN"
    yield
    i18n.install_translator(qapp, i18n.ENGLISH)


def test_every_marked_string_has_a_finished_translation(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.ts"
    subprocess.run([tool("lupdate"), "-silent", *UI_SOURCES, "-ts", str(fresh)], check=True)
    extracted = _messages(fresh)
    committed = _messages(TS)
    assert len(extracted) > 300
    missing = [key for key in extracted if key not in committed]
    unfinished = [
        key
        for key, t in committed.items()
        if t is None or t.get("type") is not None or not _text(t).strip()
    ]
    stale = [key for key in committed if key not in extracted]
    assert not missing, f"not in the .ts (run `make translations`, then translate): {missing}"
    assert not unfinished, f"without a finished translation: {unfinished}"
    assert not stale, f"no longer in the code (run `make translations`): {stale}"


def test_translations_keep_placeholders_accelerators_and_ellipses() -> None:
    wrong = []
    for (context, source), element in _messages(TS).items():
        text = _text(element)
        if Counter(PLACEHOLDER.findall(source)) != Counter(PLACEHOLDER.findall(text)):
            wrong.append((context, source, text, "placeholders"))
        keys = {k.lower() for k in ACCELERATOR.findall(source)}
        if keys != {k.lower() for k in ACCELERATOR.findall(text)}:
            wrong.append((context, source, text, "accelerator"))
        if source.endswith("…") != text.endswith("…"):
            wrong.append((context, source, text, "trailing …"))
        if (source[:1] == " ", source[-1:] == " ") != (text[:1] == " ", text[-1:] == " "):
            wrong.append((context, source, text, "padding"))
    assert not wrong, "\n".join(map(repr, wrong))


def test_the_window_shows_chinese_throughout(qtbot, tmp_path: Path, chinese: None) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(None, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_panel.card.value("arch") != "–", timeout=10_000)
    card = window.model_panel.card
    data = [re.escape(card.value(k)) for k in ("name", "arch", "quant")]  # the model's own words
    allowed = re.compile("|".join(rf"(?<!\w)(?:{a})(?!\w)" for a in [*data, *ALLOWED]))
    untranslated = []
    for where, text in visible_texts(window):
        bare = re.sub(r"\(&\w\)|&(?=\S)", "", text)
        if not CJK.search(bare) and re.search(r"[A-Za-z]", allowed.sub("", bare)):
            untranslated.append((where, text))
    window.close()
    assert not untranslated, "\n".join(map(repr, sorted(set(untranslated))))


def test_the_language_setting(qapp: QApplication, compiled: Path, tmp_path: Path) -> None:
    def file_menu() -> str:
        return QCoreApplication.translate("MainActions", "&File")

    before = QLocale()
    try:
        assert i18n.install_translator(qapp, "en", folder=compiled) == "en"
        assert file_menu() == "&File"
        assert i18n.install_translator(qapp, "zh_CN", folder=compiled) == "zh_CN"
        assert file_menu() == "文件(&F)"
        QLocale.setDefault(QLocale("de_DE"))
        assert i18n.install_translator(qapp, "system", folder=compiled) == "en"
        assert file_menu() == "&File"  # choosing again took the Chinese one off
        QLocale.setDefault(QLocale(QLocale.Language.Chinese, QLocale.Country.China))
        assert i18n.install_translator(qapp, "system", folder=compiled) == "zh_CN"
        assert file_menu() == "文件(&F)"
        assert i18n.install_translator(qapp, "fr", folder=compiled) == "en"  # none shipped
    finally:
        QLocale.setDefault(before)
        i18n.install_translator(qapp, "en")

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    parent = QWidget()
    menu = i18n.LanguageMenu(parent, settings, folder=compiled)
    choices = {a.data(): a for a in menu.actions()}
    assert choices["system"].isChecked() and {"en", "zh_CN"} <= choices.keys()
    try:
        choices["zh_CN"].trigger()  # installed at once, and stored for the next start
        QCoreApplication.processEvents()  # Qt posts the language change to the widgets
        assert settings.value(i18n.SETTINGS_KEY) == "zh_CN" and choices["zh_CN"].isChecked()
        assert i18n.current_language() == "zh_CN" and file_menu() == "文件(&F)"
        assert menu.title() == "语言(&L)" and choices["zh_CN"].text() == "简体中文"
        choices["en"].trigger()
        QCoreApplication.processEvents()
        assert settings.value(i18n.SETTINGS_KEY) == "en" and file_menu() == "&File"
        assert i18n.current_language() == "en" and menu.title() == "&Language"
    finally:
        i18n.install_translator(qapp, "en")
