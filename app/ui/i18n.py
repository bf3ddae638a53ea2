"""The language of the window: which translations exist, which one to install, and the menu.

Every visible string goes through ``tr()``; a ``contextlens_<code>.qm`` compiled from
``resources/translations/contextlens_<code>.ts`` (``make setup`` runs lrelease) translates the
app without touching the code. The choice is stored in QSettings under ``language``: "system"
follows the locale, "en" is the source text, any other code names a .qm file. Qt's own
translation (``qtbase_<code>.qm``, shipped with PySide6) is installed beside it so standard
buttons and dialogs speak the same language. A change applies on the next start: the window
builds its texts once, and re-building every panel live is not worth its risk.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import (
    QT_TRANSLATE_NOOP,
    QCoreApplication,
    QLibraryInfo,
    QLocale,
    QSettings,
    QTranslator,
)
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu, QWidget

from app.core.paths import resources_dir

SETTINGS_KEY = "language"
SYSTEM = "system"
ENGLISH = "en"  # the source language: nothing to install
PREFIX = "contextlens_"
# Each language is named in its own tongue, so a person who cannot read the current one finds it.
NATIVE_NAMES = {ENGLISH: "English", "zh_CN": "简体中文"}
# Task identifiers (also stored in the history) and the names the window shows for them.
TASK_NAMES = {
    "summarize": QT_TRANSLATE_NOOP("Task", "summarize"),
    "ask": QT_TRANSLATE_NOOP("Task", "ask"),
    "extract": QT_TRANSLATE_NOOP("Task", "extract"),
}

# Strategy identifiers (stored in the history, typed on the command line) and their names here.
STRATEGY_NAMES = {
    "refuse": QT_TRANSLATE_NOOP("Strategy", "refuse"),
    "head": QT_TRANSLATE_NOOP("Strategy", "head"),
    "tail": QT_TRANSLATE_NOOP("Strategy", "tail"),
    "middle": QT_TRANSLATE_NOOP("Strategy", "middle"),
    "rolling": QT_TRANSLATE_NOOP("Strategy", "rolling"),
    "semantic": QT_TRANSLATE_NOOP("Strategy", "semantic"),
    "entropy": QT_TRANSLATE_NOOP("Strategy", "entropy"),
    "map-reduce": QT_TRANSLATE_NOOP("Strategy", "map-reduce"),
}
# Why a reply ended, as the engine and the jobs record it, and what the window says.
FINISH_NAMES = {
    "stop": QT_TRANSLATE_NOOP("Finish", "stop"),
    "length": QT_TRANSLATE_NOOP("Finish", "length"),
    "cancelled": QT_TRANSLATE_NOOP("Finish", "cancelled"),
    "error": QT_TRANSLATE_NOOP("Finish", "error"),
    "repetition": QT_TRANSLATE_NOOP("Finish", "repetition"),
    "abort": QT_TRANSLATE_NOOP("Finish", "abort"),
}

_installed: list[QTranslator] = []  # what install_translator put on the app, to take it off


def translations_dir() -> Path:
    return resources_dir() / "translations"


def available_languages(folder: Path | None = None) -> list[str]:
    """The choices: "system", "en", then the code of each compiled translation in ``folder``."""
    folder = folder or translations_dir()
    found = sorted(p.stem.removeprefix(PREFIX) for p in folder.glob(f"{PREFIX}*.qm"))
    return [SYSTEM, ENGLISH, *(code for code in found if code != ENGLISH)]


def language_name(code: str) -> str:
    """What the menu shows for ``code``: "System" in the current language, else the native name."""
    if code == SYSTEM:
        return QCoreApplication.translate("Language", "&System")
    return NATIVE_NAMES.get(code) or QLocale(code).nativeLanguageName() or code


def task_label(task: str) -> str:
    """The translated name of a task identifier (an unknown one is shown as it is)."""
    return QCoreApplication.translate("Task", TASK_NAMES.get(task, task))


def strategy_label(strategy: str) -> str:
    """The translated name of a strategy identifier (an unknown one is shown as it is)."""
    return QCoreApplication.translate("Strategy", STRATEGY_NAMES.get(strategy, strategy))


def finish_label(reason: str) -> str:
    """The translated finish reason; anything else (an error's own sentence) as it is."""
    if reason not in FINISH_NAMES:
        return reason
    return QCoreApplication.translate("Finish", FINISH_NAMES[reason])


def resolve(choice: str, locale: QLocale | None = None, folder: Path | None = None) -> str:
    """The translation to load for ``choice`` ("system", "en" or a code): a code with a .qm,
    or "en" for the source text. "system" follows ``locale`` (default: ``QLocale()``, the
    system's unless ``QLocale.setDefault`` changed it); Chinese written in simplified
    characters (China, Singapore, Malaysia) gets zh_CN."""
    codes = available_languages(folder)[2:]
    if choice != SYSTEM:
        return choice if choice in codes else ENGLISH
    locale = locale or QLocale()
    if locale.language() == QLocale.Language.Chinese:
        simplified = locale.script() != QLocale.Script.TraditionalChineseScript
        return "zh_CN" if simplified and "zh_CN" in codes else ENGLISH
    for name in locale.uiLanguages():  # e.g. "de-DE", then "de"
        code = name.replace("-", "_")
        if code in codes:
            return code
        if code.split("_")[0] in codes:
            return code.split("_")[0]
    return ENGLISH


def install_translator(
    app: QCoreApplication, choice: str, *, locale: QLocale | None = None,
    folder: Path | None = None,
) -> str:  # fmt: skip
    """Install the app's and Qt's translations for ``choice`` (replacing any installed before)
    and return the code in effect ("en" when nothing was installed)."""
    for translator in _installed:
        app.removeTranslator(translator)
    _installed.clear()
    folder = folder or translations_dir()
    code = resolve(choice, locale, folder)
    if code == ENGLISH:
        return ENGLISH
    ours = QTranslator(app)
    if not ours.load(f"{PREFIX}{code}", str(folder)):
        return ENGLISH  # listed a moment ago, unreadable now: the source text is still right
    qt_folder = QLibraryInfo.path(QLibraryInfo.LibraryPath.TranslationsPath)
    for translator in (ours, QTranslator(app)):
        if translator is ours or translator.load(f"qtbase_{code}", qt_folder):
            app.installTranslator(translator)
            _installed.append(translator)
    return code


def stored_language(settings: QSettings) -> str:
    value = str(settings.value(SETTINGS_KEY, SYSTEM))
    return value if value in available_languages() else SYSTEM


def language_menu(
    parent: QWidget, settings: QSettings, notify: Callable[[str], None] | None = None
) -> QMenu:
    """View ▸ Language: one checkable entry per language; a choice is stored, and ``notify``
    is told (in the language shown now) that it applies on the next start."""
    menu = QMenu(QCoreApplication.translate("Language", "&Language"), parent)
    group = QActionGroup(menu)
    current = stored_language(settings)
    for code in available_languages():
        action = QAction(language_name(code), menu, checkable=True)
        action.setData(code)
        action.setChecked(code == current)
        group.addAction(action)
        menu.addAction(action)

    def chosen(action: QAction) -> None:
        settings.setValue(SETTINGS_KEY, str(action.data()))
        if notify is not None:
            notify(
                QCoreApplication.translate(
                    "Language", "The language changes the next time ContextLens starts."
                )
            )

    group.triggered.connect(chosen)
    return menu
