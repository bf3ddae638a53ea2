"""Render the app icon's PNG sizes from resources/icons/contextlens.svg.

Desktops that cannot read SVG icons (and the window icon at small sizes) need PNGs; they are made
from the one SVG with Qt's own SVG renderer, offscreen, and committed. Run it again after editing
the SVG: ``.venv/bin/python packaging/render_icons.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

ICONS = Path(__file__).resolve().parents[1] / "resources" / "icons"
SVG = ICONS / "contextlens.svg"
SIZES = (16, 32, 48, 64, 128, 256, 512)


def png_path(size: int, folder: Path = ICONS) -> Path:
    return folder / f"contextlens-{size}.png"


def render(svg: Path, size: int) -> QImage:
    """The SVG drawn into a transparent ``size`` x ``size`` image, antialiased."""
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not a valid SVG image.")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(QColor(0, 0, 0, 0))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    return image.convertToFormat(QImage.Format.Format_ARGB32)


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    _app = QGuiApplication(sys.argv[:1])  # QPainter needs one
    for size in SIZES:
        target = png_path(size)
        if not render(SVG, size).save(str(target), "PNG"):
            print(f"could not write {target}", file=sys.stderr)
            return 1
        print(target.relative_to(ICONS.parents[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
