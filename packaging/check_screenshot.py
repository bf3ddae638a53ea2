"""Check the screenshot the packaged app took: a real PNG of the window's size, not a blank one.

``make package-test`` runs the built app with ``--demo --screenshot FILE`` and then this script.
A build that starts but draws nothing (a missing Qt plugin, a missing font) still exits 0 and
saves a PNG; the colour checks catch that. Exit 0 when every check passes, else 1 and one line
per failed check.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GRID = 64  # colours are sampled on a GRID x GRID lattice


def problems(path: Path, width: int, height: int, min_colours: int) -> list[str]:
    """Everything wrong with the picture at ``path``; empty when it is a real screenshot."""
    try:
        head = path.read_bytes()[:8]
    except OSError as exc:
        return [f"{path} cannot be read: {exc.strerror or exc}"]
    if head != PNG_SIGNATURE:
        return [f"{path} is not a PNG file"]
    from PySide6.QtGui import QImage

    image = QImage(str(path))
    if image.isNull():
        return [f"{path} is a damaged PNG file (Qt cannot read it)"]
    found: list[str] = []
    if (image.width(), image.height()) != (width, height):
        found.append(f"{path} is {image.width()}x{image.height()}, the window is {width}x{height}")
    colours = Counter(
        image.pixel(x * (image.width() - 1) // (GRID - 1), y * (image.height() - 1) // (GRID - 1))
        for x in range(GRID)
        for y in range(GRID)
    )
    share = colours.most_common(1)[0][1] / GRID**2
    if len(colours) < min_colours or share > 0.95:
        found.append(
            f"{path} looks blank: {len(colours)} colours in {GRID * GRID} samples, "
            f"the commonest covers {share:.0%}"
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("png", type=Path)
    parser.add_argument("--size", default="1400x900", help="the window's size (default 1400x900)")
    parser.add_argument("--min-colours", type=int, default=16, help="fewer means blank")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    found = problems(args.png, width, height, args.min_colours)
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        print(f"{args.png}: a {width}x{height} PNG with real content")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
