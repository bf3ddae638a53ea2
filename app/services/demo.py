"""The first run (``make run``, ``contextlens --demo``): what it runs on the sample.

Chosen by measurement (tests/benchmarks/bench_demo.py scores every one-pass strategy on
``summarize`` and ``ask`` by how much of each reply rests on the kept text and whether it names
the answer): the demo shows the product at its best, the plan first, then one question and a
follow-up, so the thread, the chunks kept resident in the KV cache and the answer's sources are
all on screen.
"""

from __future__ import annotations

DEMO_TASK = "ask"
DEMO_STRATEGY = "retrieve"
# The question, then the follow-up (asked in the same thread once the first answer is in).
DEMO_QUESTIONS = ("What is a hacker?", "What is the hacker ethic?")
# Greedy: the 135M model then keeps to the kept text's words (the hacker's definition, word for
# word); sampled at temperature 0.7 it paraphrased into things the text does not say.
DEMO_SAMPLING = "deterministic"
OLD_DEMO = ("summarize", "entropy")  # what the demo ran before it was measured
