"""The model panel's Server box: connect the window to an OpenAI-compatible server instead of
loading a GGUF here (llama-server, ``python -m llama_cpp.server``, vLLM).

It only asks and shows; the engine thread connects (app/core/engine/remote.py). The address is
remembered in the window's settings; an API key only in the system keyring, and only when the
person asks for it (app/core/credentials.py). What the server reports, and what it does not, is
listed once connected.

More servers with the same model make a pool (app/ui/server_addresses.py holds their
addresses): one address connects as always, several go to the pool, which refuses servers that
disagree on the model, or on the context size unless the smallest is asked for. A typed key goes
to every server of the pool; otherwise each gets the one the keyring keeps for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from app.core.credentials import CredentialError, api_key, env_key_note, save_api_key
from app.core.engine.remote import ServerInfo
from app.core.engine.remote_http import key_in_clear, normalize_url
from app.ui.engine_thread import ServerSpec
from app.ui.i18n import FollowsLanguage
from app.ui.server_addresses import ServerAddresses
from app.ui.widgets import MessageLine, WrappingCheckBox, plain_label

URL_KEY = "server/url"
MORE_URLS_KEY = "server/more_urls"  # the pool's further addresses
MAX_CTX = 1 << 24


class ServerBox(FollowsLanguage, QGroupBox):
    connect_requested = Signal(object, bool)  # ServerSpec, count with the selected GGUF
    # several servers: tuple of ServerSpec, use the smallest context, count with the GGUF
    pool_requested = Signal(object, bool, bool)
    disconnect_requested = Signal()

    def __init__(self, settings: QSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings = settings
        self._connected = False
        self._key_notes: list[str] = []  # said before connecting, kept when connected
        self._key_kept = False  # the keyring keeps a key for the address typed
        self._info: ServerInfo | None = None  # the server last connected to, for its details
        self._pool: tuple[str, ...] = ()  # the addresses of the pool asked for (): one server
        self.url = QLineEdit(str(settings.value(URL_KEY, "")))
        self.url.setObjectName("serverAddress-1")
        self.url.textChanged.connect(self._on_url_changed)
        self.url.editingFinished.connect(self._show_kept_key)
        self.url.returnPressed.connect(self._request)
        self.more = ServerAddresses()
        self.more.set_texts(kept_addresses(settings))
        self.more.changed.connect(self._on_addresses_changed)
        self.more.submitted.connect(self._request)
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.returnPressed.connect(self._request)
        self.remember = WrappingCheckBox()
        self.model = QLineEdit()
        self.n_ctx = QSpinBox()
        self.n_ctx.setRange(0, MAX_CTX)
        self.n_ctx.setSingleStep(1024)
        self.use_local = WrappingCheckBox()
        self.smallest_context = WrappingCheckBox()  # shown with more than one address
        self.smallest_context.setObjectName("smallestContext")
        self.connect_button = QPushButton()
        self.connect_button.setObjectName("serverConnect")
        self.connect_button.clicked.connect(self._request)
        self.disconnect_button = QPushButton()
        self.disconnect_button.setObjectName("serverDisconnect")
        self.disconnect_button.clicked.connect(self.disconnect_requested)
        self.disconnect_button.setEnabled(False)
        self.details = plain_label()
        self.details.setWordWrap(True)
        self.details.hide()
        self.message = MessageLine()

        form = QFormLayout(self)

        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow: fields go under

        def row(field: QWidget) -> QLabel:
            label = QLabel()
            label.setBuddy(field)
            form.addRow(label, field)
            return label

        self._url_label = row(self.url)
        form.addRow("", self.more)
        self._key_label = row(self.key)
        form.addRow("", self.remember)
        self._model_label = row(self.model)
        self._ctx_label = row(self.n_ctx)
        form.addRow("", self.use_local)
        form.addRow("", self.smallest_context)
        buttons = QHBoxLayout()
        buttons.addWidget(self.connect_button)
        buttons.addWidget(self.disconnect_button)
        buttons.addStretch(1)
        form.addRow(buttons)
        form.addRow(self.details)
        form.addRow(self.message)
        self._on_url_changed(self.url.text())
        self._on_addresses_changed()
        self._show_kept_key()
        self.retranslate()

    def retranslate(self) -> None:
        """Every text of the box, and what the server last connected to reported, in the
        language in effect."""
        self.setTitle(self.tr("Server"))
        self.url.setPlaceholderText(self.tr("http://127.0.0.1:8080"))
        self.url.setToolTip(self.tr("An OpenAI-compatible server: llama-server, "
                                    "python -m llama_cpp.server or vLLM"))  # fmt: skip
        self.remember.setText(self.tr("Keep the key in the system keyring"))
        self.model.setPlaceholderText(self.tr("the first the server lists"))
        self.n_ctx.setSpecialValueText(self.tr("the server's"))
        self.n_ctx.setToolTip(self.tr("Needed only when the server does not report its context "
                                      "size (llama-cpp-python's server does not)"))  # fmt: skip
        self.use_local.setText(self.tr("Count with the selected GGUF (the same model)"))
        self.use_local.setToolTip(self.tr("Exact counts here and the model's own chat template; "
                                          "checked against the server's tokenizer"))  # fmt: skip
        self.smallest_context.setText(self.tr("Use the smallest context of the servers"))
        self.smallest_context.setToolTip(self.tr(
            "Servers that report different context sizes are refused unless every job is "
            "planned for the smallest of them"))  # fmt: skip
        self.connect_button.setText(self.tr("Connect"))
        self.disconnect_button.setText(self.tr("Disconnect"))
        self._url_label.setText(self.tr("Add&ress:"))
        self._key_label.setText(self.tr("API key:"))
        self._model_label.setText(self.tr("Model:"))
        self._ctx_label.setText(self.tr("Context size:"))
        self._show_key_placeholder()
        if self._info is not None:
            self._show_details(self._info)

    def _on_url_changed(self, text: str) -> None:
        self.connect_button.setEnabled(bool(text.strip()) and not self._connected)

    def _on_addresses_changed(self) -> None:
        """The smallest-context choice matters only for a pool: shown while there is one."""
        self.smallest_context.setVisible(bool(self.more.fields))

    def _show_kept_key(self) -> None:
        """Say whether a key is kept for this address (without showing it). Asked of the
        keyring when the address is done, not at every keystroke: a keyring read can be a
        round trip to the desktop's secret service."""
        text, kept = self.url.text(), False
        with contextlib.suppress(ValueError):  # not an address yet: nothing can be kept for it
            kept = bool(text.strip()) and api_key(text) is not None
        self._key_kept = kept
        self._show_key_placeholder()

    def _show_key_placeholder(self) -> None:
        self.key.setPlaceholderText(
            self.tr("kept in the system keyring") if self._key_kept else self.tr("none")
        )

    def connect_to(self, url: str, *, n_ctx: int | None = None, model: str | None = None,
                   more: Sequence[str] | None = None) -> None:  # fmt: skip
        """Connect to ``url`` (and the pool's ``more`` addresses; None: the further lines as
        they are, the pool last connected to, remembered in the settings) as if typed here
        (the last session brought back): the key is the one the keyring keeps for each."""
        self.url.setText(url)
        if more is not None:
            self.more.set_texts(list(more))
        self.n_ctx.setValue(n_ctx or 0)
        self.model.setText(model or "")
        self._show_kept_key()
        self._request()

    def _request(self) -> None:
        if self._connected or not self.connect_button.isEnabled():
            return  # Enter in a field while connected, or while connecting
        self.message.clear()
        urls = self._addresses()
        if not urls:
            return
        typed = self.key.text().strip()
        if typed and self.remember.isChecked():
            try:
                for url in urls:
                    save_api_key(url, typed)
            except CredentialError as exc:  # still connects, with the key for this time only
                self.message.show_message(str(exc))
        self._settings.setValue(URL_KEY, urls[0])
        keep_addresses(self._settings, urls[1:])
        keys = [typed or api_key(url) for url in urls]
        notes = [note for url, key in zip(urls, keys, strict=True)
                 for note in (key_in_clear(url, key),
                              None if typed else env_key_note(url))]  # fmt: skip
        self._key_notes = [note for note in notes if note]
        if self._key_notes:  # before the key goes anywhere; a warning's icon, not a note's
            self.message.show_message(" ".join([self.message.text(), *self._key_notes]).strip())
        n_ctx, model = self.n_ctx.value() or None, self.model.text().strip() or None
        specs = tuple(ServerSpec(url, key, n_ctx, model)
                      for url, key in zip(urls, keys, strict=True))  # fmt: skip
        self._pool = tuple(urls) if len(urls) > 1 else ()
        self.set_busy(True)
        if len(specs) == 1:
            self.connect_requested.emit(specs[0], self.use_local.isChecked())
        else:
            self.pool_requested.emit(specs, self.smallest_context.isChecked(),
                                     self.use_local.isChecked())  # fmt: skip

    def _addresses(self) -> list[str]:
        """Every address typed, checked; [] when one is not an address or comes twice (said
        in the message line)."""
        urls: list[str] = []
        for text in [self.url.text(), *self.more.texts()]:
            try:
                url = normalize_url(text)
            except ValueError as exc:
                self.message.show_message(str(exc))
                return []
            if url in urls:
                self.message.show_message(self.tr("{0} is listed twice").format(url))
                return []
            urls.append(url)
        return urls

    def set_busy(self, busy: bool) -> None:
        self.connect_button.setEnabled(not busy and not self._connected)
        self.url.setEnabled(not busy and not self._connected)
        self.more.set_editable(not busy and not self._connected)

    def show_connected(self, info: ServerInfo) -> None:
        self._connected = True
        self.key.clear()
        self._show_kept_key()  # the key, if one was kept, is in the keyring now
        self.set_busy(False)
        self.disconnect_button.setEnabled(True)
        self._info = info
        self._show_details(info)
        self.details.show()
        if self._key_notes or info.warnings:
            self.message.show_message(" ".join([*self._key_notes, *info.warnings]),
                                      error=bool(self._key_notes))  # fmt: skip

    def _show_details(self, info: ServerInfo) -> None:
        """What the server reported, and what it does not, in the language in effect."""
        unreported = self.tr("not reported by this server")
        pool = [self.tr("A pool of {0} servers; jobs run on the first that answers, and "
                        "the gauges show each").format(len(self._pool))
                ] if self._pool else []  # fmt: skip
        lines = [
            *pool,
            self.tr("{0} at {1}, model {2}").format(info.kind, info.url, info.model),
            self.tr("Context: {0:,} tokens ({1})").format(info.n_ctx, info.n_ctx_source),
            self.tr("Token counts: {0}").format(info.tokenizer) + (
                "" if info.exact_counts else self.tr(" (estimates)")),
            self.tr("KV figures: {0}").format(
                self.tr("from {0}").format(info.kv_source) if info.kv_source
                else unreported),
            self.tr("Parallel slots: {0}").format(info.slots or unreported),
            self.tr("Not over HTTP: saving KV states (instant rollback), shifting the cache, "
                    "the faithfulness audit"),
        ]  # fmt: skip
        self.details.setText("\n".join(lines))
        self.details.setToolTip("\n".join(info.unsupported.values()))

    def show_disconnected(self) -> None:
        self._connected = False
        self.details.hide()
        self.disconnect_button.setEnabled(False)
        self.set_busy(False)

    def show_error(self, message: str) -> None:
        self.set_busy(False)
        self.message.show_message(message)

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def pool(self) -> tuple[str, ...]:
        """The addresses of the pool asked for last (): one server)."""
        return self._pool


def kept_addresses(settings: QSettings) -> list[str]:
    """The pool's further addresses remembered in ``settings`` (an INI file gives one back as
    a string, none as nothing)."""
    value = settings.value(MORE_URLS_KEY, [])
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value] if isinstance(value, list) else []


def keep_addresses(settings: QSettings, urls: Sequence[str]) -> None:
    if urls:
        settings.setValue(MORE_URLS_KEY, list(urls))
    else:
        settings.remove(MORE_URLS_KEY)
