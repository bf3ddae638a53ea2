"""The list of models: the GGUF files on this computer, source by source (the models folder,
LM Studio, Ollama, the Hugging Face cache … and the folders the person added), files chosen by
hand, Browse… and Add Folder…, the files skipped and why, and the default model to download.

The models folder's own files are listed at once; every other place when the search off the GUI
thread answers (:mod:`app.ui.model_search`), and again when a watched folder changes. How a row
is drawn is :mod:`app.ui.model_list`'s. The chooser says which file is selected (``picked``);
reading it is the panel's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.core.default_model import default_model_path
from app.core.paths import list_models
from app.services import model_library
from app.services.errors import BadRequest
from app.services.model_library import Discovery, FoundModel, Source
from app.ui.i18n import FollowsLanguage
from app.ui.model_fetch_dialog import HubFetchDialog, ModelFetchDialog
from app.ui.model_list import DETAILS_ROLE, PATH_ROLE, SOURCE_ROLE, ModelList, ModelRowDelegate
from app.ui.model_search import ModelSearch
from app.ui.model_status import sentence
from app.ui.widgets import plain_label

D = TypeVar("D", ModelFetchDialog, HubFetchDialog)  # the dialogs that fetch a model

OWN = str(Source.CONTEXTLENS)  # the list's group of the models folder's own files
CHOSEN = "chosen"  # the list's group of files chosen by hand that no source lists
Row = tuple[Path, str | None, str]  # a model's path, its name (None: the file's), its details


class ModelChooser(FollowsLanguage, QWidget):
    """The models, Browse…, Add Folder…, the skipped files' note and Get the Default Model…."""

    picked = Signal(object)  # Path of the model to read (selected, or selected again), or None
    searched = Signal(int)  # the search answered: how many models the list offers
    fetched = Signal(object)  # Path of a model just downloaded, now selected
    failed = Signal(str)  # a folder could not be added: one sentence

    def __init__(self, models_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._models_dir = Path(models_dir)
        self.library: Discovery | None = None  # what the last search found
        self._chosen: list[Path] = []  # files chosen by hand (Browse…, a drop, --model)
        self.fetch_dialog: ModelFetchDialog | None = None
        self.hub_dialog: HubFetchDialog | None = None

        self.models = ModelList()
        self.models.setAlternatingRowColors(True)
        self.models.setItemDelegate(ModelRowDelegate(self.hover_text, self.models))
        self.models.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.models.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.models.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.models.customContextMenuRequested.connect(self._show_list_menu)
        self.models.currentItemChanged.connect(self._on_current_changed)
        self._models_label = QLabel()
        self._models_label.setBuddy(self.models)
        self.browse_button = QPushButton()
        self.browse_button.clicked.connect(self._browse)
        self.add_folder_button = QPushButton()
        self.add_folder_button.clicked.connect(self._add_folder)
        self.models_note = plain_label()  # the files skipped while looking for models
        self.models_note.setWordWrap(True)
        self.models_note.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.models_note.hide()
        self.get_default_button = QPushButton()
        self.get_default_button.clicked.connect(self.get_default_model)
        self._search = ModelSearch(self._models_dir, self)
        self._search.found.connect(self._on_found)

        top = QHBoxLayout()
        top.addWidget(self._models_label)
        top.addStretch(1)
        top.addWidget(self.browse_button)
        folders = QHBoxLayout()  # under the list: the dock is too narrow for both beside it
        folders.addWidget(self.add_folder_button)
        folders.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.models, 1)
        layout.addLayout(folders)
        layout.addWidget(self.models_note)
        layout.addWidget(self.get_default_button)
        self.retranslate()

    def retranslate(self) -> None:
        self._models_label.setText(self.tr("&Models:"))
        self.browse_button.setText(self.tr("Bro&wse…"))
        self.browse_button.setToolTip(self.tr("Choose a GGUF file anywhere on disk"))
        self.add_folder_button.setText(self.tr("Add Folder…"))
        self.add_folder_button.setToolTip(
            self.tr("List the GGUF models in a folder of yours too (they stay where they are)"))
        self._retitle()
        self._show_problems()
        self.get_default_button.setText(self.tr("Get the Default Model…"))
        self.get_default_button.setToolTip(
            self.tr("Download the default model (about 98 MB) and check it against its checksum")
        )

    # ----- choosing -----

    def refresh(self) -> None:
        """List the models again: the models folder's files at once, every other place when
        the search off the GUI thread answers (files chosen by hand stay)."""
        chosen = self.selected_model()
        self._show_rows()
        if chosen is not None:
            self.select_model(chosen)
        elif (row := self._first_model_row()) is not None:
            self.models.setCurrentRow(row)
        self.get_default_button.setVisible(not default_model_path(self._models_dir).exists())
        self._search.search()

    def stop_search(self) -> None:
        """The search for models under way, if any, ends at its next entry (the window closes:
        a walk of thousands of entries must not hold the process)."""
        self._search.stop()

    def selected_model(self) -> Path | None:
        item = self.models.currentItem()
        path = item.data(PATH_ROLE) if item is not None else None
        return Path(path) if path else None

    def select_model(self, path: Path | str) -> None:
        """Select ``path`` (adding it to the list when it is not there), to be read again when
        it is selected already. A relative path (``--model models/x.gguf``) is the listed file
        it names, not a second entry."""
        path = Path(path).expanduser().absolute()
        row = self._row_of(path)
        if row is None:  # chosen by hand: listed from now on, under "Chosen files"
            self._chosen.append(path)
            self._show_rows()
            row = self._row_of(path)
            assert row is not None
        if self.models.currentRow() == row:
            self.picked.emit(path)  # selected already: read again (the file may have changed)
        else:
            self.models.setCurrentRow(row)

    def _on_current_changed(self, current: QListWidgetItem | None, _previous: object) -> None:
        path = current.data(PATH_ROLE) if current is not None else None
        self.picked.emit(Path(path) if path else None)

    def _browse(self) -> None:
        name, _ = QFileDialog.getOpenFileName(
            self,
            self.tr("Choose a Model"),
            str(self._models_dir),
            self.tr("GGUF models (*.gguf);;All files (*)"),
        )
        if name:
            self.select_model(Path(name))

    def _add_folder(self) -> None:
        """Add a folder of the person's to the list, remembered for the command line too."""
        name = QFileDialog.getExistingDirectory(self, self.tr("Add a Folder of Models"),
                                                str(Path.home()))  # fmt: skip
        if not name:
            return
        try:
            model_library.add_folder(Path(name))
        except BadRequest as exc:
            self.failed.emit(sentence(str(exc)))
            return
        self._search.search()

    def _forget_folder(self, folder: Path) -> None:
        model_library.remove_folder(folder)
        self._search.search()

    # ----- getting a model -----

    def get_default_model(self) -> None:
        """Offer to download the default model into the models folder (asks first)."""
        self.fetch_dialog = self._open_fetch(
            self.fetch_dialog, lambda: ModelFetchDialog(self._models_dir, self))

    def get_hub_model(self) -> None:
        """Get a model from Hugging Face by name (into its cache, where the list finds it)."""
        self.hub_dialog = self._open_fetch(self.hub_dialog, lambda: HubFetchDialog(parent=self))

    def _open_fetch(self, dialog: D | None, make: Callable[[], D]) -> D:
        """``dialog`` raised when it is open, else a new one (the old one deleted), opened;
        the model it fetches is selected."""
        if dialog is not None and dialog.isVisible():
            dialog.raise_()
            dialog.activateWindow()
            return dialog
        if dialog is not None:
            dialog.deleteLater()
        dialog = make()
        dialog.fetched.connect(self._on_fetched)
        dialog.open()
        return dialog

    def _on_fetched(self, path: Path) -> None:
        self.refresh()
        self.select_model(path)
        self.fetched.emit(path)

    # ----- what the search found -----

    def _on_found(self, discovery: Discovery) -> None:
        """The search answered (at start, or after a watched folder changed): the list shows
        what it found, the selection kept where it still is."""
        self.library = discovery
        chosen = self.selected_model()
        self._show_rows()
        if chosen is None or self._row_of(chosen) is None:
            row = self._first_model_row()
            if row is not None:
                self.models.setCurrentRow(row)
            elif chosen is not None:
                self.picked.emit(None)
        self._show_problems()
        self.searched.emit(self.model_count())

    def parts_missing(self, path: Path) -> str:
        """Why ``path`` cannot be loaded when the search found it a split with parts missing;
        "" otherwise."""
        model = self._found(str(path))
        if model is None or model.loadable:
            return ""
        return self.tr("only {0} of its {1} parts are here, and llama.cpp needs them all").format(
            model.parts_present, model.parts)  # fmt: skip

    def model_count(self) -> int:
        """How many models the list offers (the window's no-model banner says so)."""
        return len(self.listed())

    def listed(self) -> list[Path]:
        """The models listed, in order (not the sources' titles)."""
        items = (self.models.item(i).data(PATH_ROLE) for i in range(self.models.count()))
        return [Path(path) for path in items if path]

    def _found(self, path: str) -> FoundModel | None:
        library = self.library
        return next((m for m in library.models if str(m.path) == path), None) if library else None

    # ----- the rows -----

    def _add_item(self, path: Path, text: str | None = None, details: str = "") -> None:
        """A row for ``path`` at the end of the list, named ``text`` (default: the file's name,
        and its folder when that is not the models folder)."""
        if text is None:
            in_own = path.parent.absolute() == self._models_dir.absolute()
            text = path.name if in_own else f"{path.name} ({path.parent})"
        item = QListWidgetItem(text)
        item.setData(PATH_ROLE, str(path))
        item.setData(DETAILS_ROLE, details)
        item.setToolTip(str(path))
        self.models.addItem(item)

    def _add_title(self, group: str) -> None:
        """A source's title: a row that cannot be selected or focused."""
        item = QListWidgetItem(self._source_titles().get(group, group))
        item.setFlags(Qt.ItemFlag.NoItemFlags)
        item.setData(SOURCE_ROLE, group)
        self.models.addItem(item)

    def _source_titles(self) -> dict[str, str]:
        return {
            str(Source.CONTEXTLENS): self.tr("ContextLens models folder"),
            str(Source.LM_STUDIO): self.tr("LM Studio"),
            str(Source.OLLAMA): self.tr("Ollama"),
            str(Source.HF_CACHE): self.tr("Hugging Face cache"),
            str(Source.LLAMA_CPP_CACHE): self.tr("llama.cpp cache"),
            str(Source.GPT4ALL): self.tr("GPT4All"),
            str(Source.JAN): self.tr("Jan"),
            str(Source.ADDED): self.tr("Added folders"),
            CHOSEN: self.tr("Chosen files"),
        }

    def _retitle(self) -> None:
        titles = self._source_titles()
        for i in range(self.models.count()):
            item = self.models.item(i)
            group = item.data(SOURCE_ROLE)
            if group:
                item.setText(titles.get(group, group))

    def _groups(self) -> list[tuple[str, list[Row]]]:
        """The rows to show, source by source."""
        library = self.library
        found = {m.path: m for m in library.models} if library is not None else {}
        problems = {p.path for p in library.problems} if library is not None else set()
        own = list_models(self._models_dir)
        groups: list[tuple[str, list[Row]]] = [
            (OWN, [(p, None, self._details(found.get(p), p in problems)) for p in own])]
        listed = {p.absolute() for p in own}
        if library is not None:
            for source, models in library.by_source().items():
                fresh = [m for m in models if m.path.absolute() not in listed]
                listed.update(m.path.absolute() for m in fresh)
                groups.append((str(source), [(m.path, m.name, self._details(m)) for m in fresh]))
        chosen = [p for p in self._chosen if p not in listed]
        groups.append((CHOSEN, [(p, None, self._details(found.get(p))) for p in chosen]))
        return [(group, rows) for group, rows in groups if rows]

    def _details(self, model: FoundModel | None, unreadable: bool = False) -> str:
        """A model's second line: parameters, quantization, size (and a split's parts)."""
        if model is None:
            return self.tr("not a GGUF model llama.cpp can read") if unreadable else ""
        parts = [model_library.count_text(model.parameters), model.quantization,
                 model_library.size_text(model.file_size)]
        if not model.loadable:
            parts.append(self.tr("{0} of {1} parts present").format(
                model.parts_present, model.parts))  # fmt: skip
        return " · ".join(p for p in parts if p)

    def _show_rows(self) -> None:
        """Lay the list out again, keeping the selected model selected without reading it
        again; when the rows are the same, only their second lines change."""
        groups = self._groups()
        wanted: list[tuple[str, str]] = []
        for group, rows in groups:  # each source titled, even alone: where its models are
            wanted.append((group, ""))
            wanted += [("", str(path)) for path, _name, _details in rows]
        shown = [(self.models.item(i).data(SOURCE_ROLE) or "",
                  self.models.item(i).data(PATH_ROLE) or "")
                 for i in range(self.models.count())]  # fmt: skip
        if wanted == shown:
            lines = {str(path): d for _g, rows in groups for path, _n, d in rows}
            for i in range(self.models.count()):
                item = self.models.item(i)
                if item.data(PATH_ROLE):
                    item.setData(DETAILS_ROLE, lines.get(item.data(PATH_ROLE), ""))
            self.models.doItemsLayout()
            self.models.updateGeometry()  # a second line makes a row taller
            return
        chosen = self.selected_model()
        self.models.blockSignals(True)
        self.models.clear()
        for group, rows in groups:
            self._add_title(group)
            for path, name, details in rows:
                self._add_item(path, name, details)
        row = self._row_of(chosen) if chosen is not None else None
        if row is not None:
            self.models.setCurrentRow(row)
        self.models.blockSignals(False)
        self.models.updateGeometry()  # as tall as its rows (model_list.ModelList)

    def _row_of(self, path: Path) -> int | None:
        path = path.absolute()
        for i in range(self.models.count()):
            listed = self.models.item(i).data(PATH_ROLE)
            if listed and Path(listed).absolute() == path:
                return i
        return None

    def _first_model_row(self) -> int | None:
        for i in range(self.models.count()):
            if self.models.item(i).data(PATH_ROLE):
                return i
        return None

    # ----- hover, menu and the files skipped -----

    def hover_text(self, path: str) -> str | None:
        """What resting on a model shows: its path, trained context and what else is known."""
        library = self.library
        if library is None:
            return None
        model = self._found(path)
        if model is None:
            problem = next((p for p in library.problems if str(p.path) == path), None)
            return f"{path}\n{problem.sentence}" if problem is not None else None
        lines = [path]
        if model.n_ctx_train:
            lines.append(self.tr("Trained context: {0:,} tokens").format(model.n_ctx_train))
        if model.family:
            lines.append(self.tr("Family: {0}").format(model.family))
        if not model.loadable:
            lines.append(self.tr("{0} of {1} parts present: it cannot be loaded").format(
                model.parts_present, model.parts))  # fmt: skip
        if model.also_named:
            lines.append(self.tr("Also found as: {0}").format(", ".join(model.also_named)))
        return "\n".join(lines)

    def _show_problems(self) -> None:
        """How many files were skipped outside the models folder (its own are listed, and
        say why when chosen), and why, on hover."""
        library = self.library
        skipped = [p for p in library.problems if p.source != Source.CONTEXTLENS] if library else []
        self.models_note.setVisible(bool(skipped))
        if skipped:
            self.models_note.setText(self.tr(
                "Skipped %n file(s) that are not GGUF models llama.cpp can read; hover to see "
                "why.", "", len(skipped)))  # fmt: skip
            self.models_note.setToolTip("\n".join(p.sentence for p in skipped))

    def list_menu(self, row: int) -> QMenu | None:
        """The menu of a model's row: copy its path; for a folder the person added, stop
        listing that folder (nothing in it is touched)."""
        item = self.models.item(row)
        path = item.data(PATH_ROLE) if item is not None else None
        if not path:
            return None
        menu = QMenu(self.models)
        copy = menu.addAction(self.tr("Copy Path"))
        copy.triggered.connect(lambda: QGuiApplication.clipboard().setText(path))
        model = self._found(path)
        if model is not None and model.source == Source.ADDED and model.folder is not None:
            folder = model.folder
            forget = menu.addAction(self.tr("Stop Listing {0}").format(folder))
            forget.triggered.connect(lambda: self._forget_folder(folder))
        return menu

    def _show_list_menu(self, pos: QPoint) -> None:
        menu = self.list_menu(self.models.indexAt(pos).row())
        if menu is not None:
            menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            menu.popup(self.models.viewport().mapToGlobal(pos))
