"""The engine as the main window's panels show it: a model loaded, a server connected, none.

A load or a connection is asked for in the model panel, the no-model banner, a later launch or
a test, and reaches the session model from here with the panel's choices (tuned settings or
not, the local model beside a server). What comes back is shown across the panels: the model
panel's state, the KV stage's sliding window, the gauges' engine process, context and threads
(and a pool's servers, each in a row), and the banner that says what to do first while there is
no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QSettings
from PySide6.QtWidgets import QDockWidget

from app.core import calibrate
from app.core.engine.gguf import ModelInfo
from app.core.engine.remote import ServerInfo
from app.core.engine.types import EngineCapabilities, LoadedModel, LoadSettings
from app.services.job_engine import ServerSpec
from app.ui.buffer_panel import BufferPanel
from app.ui.gauges import GaugesPanel
from app.ui.model_panel import ModelPanel
from app.ui.no_model_banner import NoModelBanner
from app.ui.session_model import SessionModel

USE_TUNED_KEY = "model/use_tuned"


class WindowEngine(QObject):
    """Answers the requests of ``model_panel`` and the ``no_model`` banner, and shows what
    ``session`` says of the engine in them, in ``buffers`` and in ``gauges``; whether loads use
    the tuned settings is kept in ``settings``."""

    def __init__(self, session: SessionModel, settings: QSettings, model_panel: ModelPanel, *,
                 no_model: NoModelBanner, buffers: BufferPanel, gauges: GaugesPanel,
                 parent: QObject | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self._session, self._model_panel, self._no_model = session, model_panel, no_model
        self._buffers, self._gauges = buffers, gauges
        p, s = model_panel, session
        p.load_requested.connect(self.load_model)
        p.model_fetched.connect(self.load_fetched)
        p.models_listed.connect(self.show_models_listed)
        p.server.connect_requested.connect(self.connect_server)
        p.server.pool_requested.connect(self.connect_pool)
        p.server.disconnect_requested.connect(s.unload)
        p.calibrate_requested.connect(self.calibrate_model)
        p.calibration_cancel_requested.connect(s.cancel_calibration)
        p.unload_requested.connect(s.unload)
        no_model.fetch_requested.connect(p.get_default_model)
        no_model.choose_requested.connect(self.choose_model)
        use_tuned = p.tuning.use_tuned  # the choice is kept from one start to the next
        use_tuned.setChecked(bool(settings.value(USE_TUNED_KEY, True, type=bool)))
        use_tuned.toggled.connect(lambda on: settings.setValue(USE_TUNED_KEY, on))
        s.model_loaded.connect(self.show_loaded)
        s.server_connected.connect(self.show_server)
        s.server_failed.connect(p.server.show_error)
        s.pool_changed.connect(gauges.servers.set_servers)
        s.running_changed.connect(gauges.servers.set_running)
        s.model_unloaded.connect(self.show_unloaded)
        s.calibration_progress.connect(p.show_calibrating)
        s.calibrated.connect(self.show_calibrated)
        s.calibration_stopped.connect(p.show_calibration_stopped)
        s.background_calibration.connect(p.show_background_calibration)
        s.calibration_offered.connect(p.offer_calibration)
        s.background_calibration_stopped.connect(p.show_background_stopped)

    # ----- requests -----

    def load_model(self, path: Path, settings: LoadSettings, *, fresh: bool = False) -> None:
        """Load ``path``, with the settings tuned for this machine when the panel says so
        (measured now when there are none yet, or when ``fresh``)."""
        panel = self._model_panel
        if self._session.server is not None:  # the engine lets the server go before it loads
            panel.server.show_disconnected()
        panel.n_ctx.setValue(settings.n_ctx)
        panel.set_busy(True)
        self._session.load_model(Path(path), settings, tuned=panel.use_tuned(), fresh=fresh)

    def connect_server(self, spec: ServerSpec, use_local_model: bool = False) -> None:
        """Run jobs on the server ``spec`` names; with ``use_local_model`` the GGUF selected in
        the model panel (the same model) gives exact counts and its chat template."""
        local = self._model_panel.selected_model() if use_local_model else None
        self._session.connect_server(spec, local)

    def connect_pool(self, specs: Sequence[ServerSpec], smallest_context: bool = False,
                     use_local_model: bool = False) -> None:  # fmt: skip
        """Run jobs on a pool of the servers ``specs`` name (the same model on each);
        ``smallest_context``: plan for the smallest context when they report different ones."""
        local = self._model_panel.selected_model() if use_local_model else None
        self._session.connect_pool(tuple(specs), smallest_context, local)

    def calibrate_model(self, path: Path, settings: LoadSettings) -> None:
        """Measure the candidates anew ("Calibrate again"), then load the fastest."""
        self.load_model(path, settings, fresh=True)

    def load_fetched(self, path: Path) -> None:
        """The model fetched from the banner (or the panel) loads at once when none is."""
        if self._session.model_path is None and self._session.server is None:
            self.load_model(path, self._model_panel.settings())

    def choose_model(self) -> None:
        """The banner's Choose a Model: the model panel, shown and with the list in focus."""
        dock = self._model_panel.parentWidget()
        while dock is not None and not isinstance(dock, QDockWidget):
            dock = dock.parentWidget()
        if dock is not None:
            dock.show()
            dock.raise_()
        self._model_panel.models.setFocus()

    # ----- what the panels show -----

    def show_loaded(self, info: ModelInfo, loaded: LoadedModel,
                    caps: EngineCapabilities | None) -> None:  # fmt: skip
        if not self._session.running:  # the KV stage shows the context just loaded, not 4,096
            self._buffers.reset(loaded.n_ctx)
        self._buffers.set_sliding_window(
            loaded.sliding_window if info.swa_layers else 0, len(info.swa_layers),
            info.n_layers or len(info.kv_heads_per_layer),
        )  # fmt: skip
        self._no_model.hide()
        panel = self._model_panel
        panel.set_busy(False)
        panel.show_loaded(loaded)
        if caps is not None:
            panel.set_capabilities(caps)
        self._gauges.set_engine_pid(self._session.engine.driver.engine_pid)
        self._gauges.servers.set_servers([])  # the pool, if any, is let go
        self._gauges.set_n_ctx(loaded.n_ctx)
        self._gauges.set_threads(max(loaded.n_threads, loaded.n_threads_batch))

    def show_server(self, info: ServerInfo) -> None:
        self._no_model.hide()
        self._model_panel.show_server(info)
        self._buffers.set_sliding_window(0, 0, 0)  # a server does not say
        self._gauges.set_engine_pid(None)
        self._gauges.set_n_ctx(info.n_ctx)
        self._gauges.set_threads(0)  # the server's own

    def show_unloaded(self) -> None:
        self.show_no_model()
        self._model_panel.show_unloaded()
        self._buffers.set_sliding_window(0, 0, 0)
        self._gauges.set_engine_pid(None)
        self._gauges.servers.set_servers([])
        self._gauges.set_n_ctx(0)
        self._gauges.set_threads(0)

    def show_no_model(self) -> None:
        """The banner says what to do first: choose a model found here, or get the default."""
        self._no_model.set_found(self._model_panel.model_count())
        self._no_model.show()

    def show_models_listed(self, count: int) -> None:
        """The search for models answered: the banner, while shown, counts what it found."""
        if not self._no_model.isHidden():
            self._no_model.set_found(count)

    def show_calibrated(self, calibration: calibrate.Calibration, measured_now: bool) -> None:
        path = self._session.model_path
        if path is not None:
            self._model_panel.show_calibration(path, calibration, measured_now)
