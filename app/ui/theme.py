"""Light and dark themes: the platform's own look, or the Fusion style with an explicit palette.

The platform decides by default (a desktop in dark mode gives a dark palette, and every panel
follows palette changes). Light and Dark are there for platforms that have no dark mode and for
a person who wants the other one; the choice is remembered with the window's settings.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

THEMES = ("system", "light", "dark")
_APPLIED = "contextlens-theme"  # the application property that names the theme in use

_platform: dict[str, tuple[str, QPalette]] = {}  # the look before any theme was applied

_DARK = {
    QPalette.ColorRole.Window: "#2d2d30",
    QPalette.ColorRole.WindowText: "#e6e6e6",
    QPalette.ColorRole.Base: "#1e1e1e",
    QPalette.ColorRole.AlternateBase: "#262629",
    QPalette.ColorRole.ToolTipBase: "#3a3a3d",
    QPalette.ColorRole.ToolTipText: "#e6e6e6",
    QPalette.ColorRole.PlaceholderText: "#8c8c8c",
    QPalette.ColorRole.Text: "#e6e6e6",
    QPalette.ColorRole.Button: "#3a3a3d",
    QPalette.ColorRole.ButtonText: "#e6e6e6",
    QPalette.ColorRole.BrightText: "#ff6b6b",
    QPalette.ColorRole.Link: "#5aa9f0",
    QPalette.ColorRole.Highlight: "#3478c6",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.Light: "#505054",
    QPalette.ColorRole.Midlight: "#434346",
    QPalette.ColorRole.Mid: "#2a2a2c",
    QPalette.ColorRole.Dark: "#1a1a1b",
    QPalette.ColorRole.Shadow: "#0a0a0a",
}
_DARK_DISABLED = ("#7a7a7a", "#7a7a7a", "#7a7a7a")  # window text, text, button text


def dark_palette() -> QPalette:
    palette = QPalette()
    for role, colour in _DARK.items():
        palette.setColor(role, QColor(colour))
    disabled = QPalette.ColorGroup.Disabled
    roles = (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText)
    for role, colour in zip(roles, _DARK_DISABLED, strict=True):
        palette.setColor(disabled, role, QColor(colour))
    return palette


def light_palette() -> QPalette:
    style = QStyleFactory.create("Fusion")
    return style.standardPalette()


def apply_theme(app: QApplication, name: str) -> None:
    """Switch the whole app to theme ``name`` (one of THEMES); unknown names mean "system"."""
    if "look" not in _platform:
        _platform["look"] = (app.style().name(), QPalette(app.palette()))
    if name in {"light", "dark"}:
        app.setStyle("Fusion")
        app.setPalette(dark_palette() if name == "dark" else light_palette())
    else:
        style, palette = _platform["look"]
        app.setStyle(style)
        app.setPalette(palette)
    app.setProperty(_APPLIED, name if name in THEMES else "system")


def current_theme(app: QApplication, default: str = "system") -> str:
    """The theme :func:`apply_theme` last applied, else ``default``."""
    applied = app.property(_APPLIED)
    return str(applied) if applied in THEMES else default
