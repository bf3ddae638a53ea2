"""A reply that loops by construction, on any CPU: the prompt is one short line written sixteen
times, one a line, so greedy decoding of either test model writes it again, and keeps writing it.

Not a prompt that happens to make one build's greedy decoding loop ("Write a poem about hackers."
looped on the AVX-512 build and not on an AVX2 one): the next token of the line leads every other
by several logits at each step, and a build's other kernels move logits by far less than that.
:func:`leads_of` measures the lead on the build that runs, so a test checks its premise before it
relies on it (on the native and the portable build: at least 3.4 logits over 64 tokens on both
test models; the logits of the same prompt differ between kernels by 1.5 at the most measured).
"""

from __future__ import annotations

LOOP_LINE = "the cat sat on the mat,"
LOOP_TEXT = "\n".join([LOOP_LINE] * 16)
MIN_LEAD = 2.0  # the least lead of the chosen token (logits) a loop by construction must have
