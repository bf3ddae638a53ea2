"""A text every chunking cuts inside something: long words, CJK and emoji with no space to cut
at, and runs of spaces and tabs (as in the sample's ASCII art), where the chunks' token counts
add up to another number than the whole text's (issue 49, row 8)."""

from __future__ import annotations

ART = "    .-.      " + " " * 300 + "JL/  |  \\JL\n" + "\t" * 50 + "|_/\\\n\n\n\n"
CUT_INSIDE = ("Überlänge" * 60 + " 漢字テキスト" * 40 + " " + ART + "🙂👍🏽" * 30 + "\n\n") * 6
