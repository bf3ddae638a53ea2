"""Hypothesis strategies for random structured documents (shared by chunking and plan tests)."""

from __future__ import annotations

from hypothesis import strategies as st

_WORD = st.one_of(
    st.sampled_from(["the", "context", "window", "model", "tokens", "ContextLens", "KV", "cache",
                     "llama.cpp", "e.g.", "U.S.", "3.14", "2026", "don't", "naïve", "—"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12),
    st.text(alphabet=st.characters(categories=["Lo", "Lu", "Nd", "So"]), min_size=1, max_size=6),
    st.sampled_from(["中文", "上下文窗口", "模型", "😀", "👨‍👩‍👧", "e\u0301", "🇨🇳",
                     "supercalifragilisticexpialidocious" * 3]),
)  # fmt: skip
_SENTENCE = st.builds(
    lambda words, seps, end: "".join(w + s for w, s in zip(words, seps, strict=False)) + end,
    st.lists(_WORD, min_size=1, max_size=25),
    st.lists(st.sampled_from([" ", " ", " ", ", ", "; ", ": ", "，", "、", "\t"]), min_size=25,
             max_size=25),
    st.sampled_from([".", "!", "?", "。", "！", "？", "；", "…", '."', ""]),
)  # fmt: skip
_PARAGRAPH = st.lists(_SENTENCE, min_size=1, max_size=6).map(" ".join)
_HEADING = st.builds(lambda lvl, s: "#" * lvl + " " + s.rstrip(".!?。！？；…\""),
                     st.integers(1, 4), _SENTENCE)  # fmt: skip
_CODE = st.lists(
    st.sampled_from(["def f(x):", "    return x * 2  # double it. Really!", "",
                     "for i in range(3):", "        print(i, 'a, b; c')",
                     "x = [1, 2, 3]; y = {'k': 'v'}"]),
    min_size=1, max_size=12,
).map(lambda lines: "```python\n" + "\n".join(lines) + "\n```")  # fmt: skip
_BLOCK = st.one_of(_PARAGRAPH, _PARAGRAPH, _HEADING, _CODE, st.sampled_from(["", "   ", "\n"]))


def markdown_documents(max_blocks: int = 12) -> st.SearchStrategy[str]:
    """Markdown-ish text: headings, paragraphs, code fences, odd whitespace."""
    return st.lists(_BLOCK, min_size=0, max_size=max_blocks).map("\n\n".join)
