"""The language of the window: which translations exist, which one to install, and the menu.

Every visible string goes through ``tr()``; a ``contextlens_<code>.qm`` compiled from
``resources/translations/contextlens_<code>.ts`` (``make setup`` runs lrelease) translates the
app without touching the code. The choice is stored in QSettings under ``language``: "system"
follows the locale, "en" is the source text, any other code names a .qm file. Qt's own
translation (``qtbase_<code>.qm``, shipped with PySide6) is installed beside it so standard
buttons and dialogs speak the same language.

A change applies at once, the way Qt means it to: installing a translator sends
``QEvent.LanguageChange`` to every widget, and each panel (a :class:`FollowsLanguage`) sets its
texts again in ``retranslate()``, the one place they are set, so the window a person switches
into reads exactly as one started in that language.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import (
    QCoreApplication,
    QEvent,
    QLibraryInfo,
    QLocale,
    QSettings,
    QTranslator,
)
from PySide6.QtGui import QAction, QActionGroup, QFontDatabase
from PySide6.QtWidgets import QMainWindow, QMenu, QWidget

from app.core.paths import resources_dir


def QT_TRANSLATE_NOOP(context: str, text: str) -> str:
    """Marks ``text`` for lupdate, to be translated in ``context`` where it is shown, and returns
    it as it is: Qt's own, typed (PySide6's stub has it return object)."""
    return text


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
    "retrieve": QT_TRANSLATE_NOOP("Strategy", "retrieve"),
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
_in_effect = [ENGLISH]  # the code install_translator installed last


class FollowsLanguage:
    """A widget whose texts follow View ▸ Language while it is shown (put it first among the
    bases: ``class Panel(FollowsLanguage, QWidget)``).

    ``retranslate()`` sets every text the widget built, and shows its present state in the
    words of the language now installed; the constructor calls it once, and Qt's
    ``LanguageChange`` event (sent to every widget when a translator comes or goes) calls it
    again. Texts made from events (a status line, a finished run's caption) are not kept: the
    next event says them in the new language."""

    def retranslate(self) -> None:
        raise NotImplementedError

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)  # type: ignore[misc]


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


class Retranslated:
    """Texts of objects that get no ``LanguageChange`` of their own (actions, a menu's title
    set by its owner, a toolbar's name): each is set now, and set again in the language then
    installed by ``retranslate()``, which the owning widget calls from its own."""

    def __init__(self) -> None:
        self._texts: list[tuple[Callable[[str], object], Callable[[], str]]] = []

    def set(self, setter: Callable[[str], object], text: Callable[[], str]) -> None:
        setter(text())
        self._texts.append((setter, text))

    def retranslate(self) -> None:
        for setter, text in self._texts:
            setter(text())


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
    _in_effect[0] = ENGLISH
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
    _in_effect[0] = code
    return code


# the writing system each translation needs a font for, and where to get one on Linux (macOS and
# Windows come with one)
_SCRIPTS = {"zh_CN": QFontDatabase.WritingSystem.SimplifiedChinese}
_FONT_PACKAGES = ("fonts-noto-cjk on Debian and Ubuntu, google-noto-sans-cjk-fonts on Fedora, "
                  "noto-fonts-cjk on Arch")  # fmt: skip


def missing_font_note(code: str, families: list[str] | None = None) -> str:
    """A sentence, in English, when no installed font can draw the language ``code`` ("": one
    can, or the language needs none): the window in Chinese without a CJK font shows boxes
    where each character should be, its own warning included. ``families``: the fonts for the
    language's writing system (default: the font database's)."""
    script = _SCRIPTS.get(code)
    if script is None:
        return ""
    if families is None:
        families = QFontDatabase.families(script)
    if families:
        return ""
    english = QLocale.languageToString(QLocale(code).language())  # the native name needs the font
    return (f"No font for {english} is installed, so its characters show as boxes: "
            f"install a CJK font ({_FONT_PACKAGES}) and start ContextLens again.")


def current_language() -> str:
    """The code of the translation in effect ("en": the source text)."""
    return _in_effect[0]


def stored_language(settings: QSettings, folder: Path | None = None) -> str:
    value = str(settings.value(SETTINGS_KEY, SYSTEM))
    return value if value in available_languages(folder) else SYSTEM


class LanguageMenu(FollowsLanguage, QMenu):
    """View ▸ Language: one checkable entry per language, each named in its own tongue; a
    choice is stored and installed at once (``folder``: where the .qm files are, for tests)."""

    def __init__(self, parent: QWidget, settings: QSettings, folder: Path | None = None) -> None:
        super().__init__(parent)
        self._settings = settings
        self._folder = folder
        group = QActionGroup(self)
        current = stored_language(settings, folder)
        for code in available_languages(folder):
            action = QAction(language_name(code), self, checkable=True)
            action.setData(code)
            action.setChecked(code == current)
            group.addAction(action)
            self.addAction(action)
        group.triggered.connect(self._chosen)
        self.retranslate()

    def retranslate(self) -> None:
        self.setTitle(QCoreApplication.translate("Language", "&Language"))
        for action in self.actions():
            action.setText(language_name(str(action.data())))

    def _chosen(self, action: QAction) -> None:
        code = str(action.data())
        self._settings.setValue(SETTINGS_KEY, code)
        app = QCoreApplication.instance()
        if app is not None:
            note = missing_font_note(install_translator(app, code, folder=self._folder))
            window = self.parentWidget()
            if note and isinstance(window, QMainWindow):
                window.statusBar().showMessage(note)
