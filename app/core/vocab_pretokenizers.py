"""llama.cpp's BPE pre-tokenizers (src/llama-vocab.cpp), one per ``tokenizer.ggml.pre``.

Apart from the tokenizer (``vocab_tokenizer.py``) because it is a table copied from llama.cpp and
kept in step with it: each entry is the cascade of regular expressions llama.cpp applies, each
splitting the pieces of the one before (``Split(..., "isolated")`` in ``tokenizers``), with
GPT-2's byte map unless the family uses raw UTF-8, and ``ignore_merges`` where llama.cpp sets it.
"""

from __future__ import annotations

from dataclasses import dataclass

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
_QWEN35 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Written with escapes: the ranges hold look-alikes of ASCII letters (KELVIN SIGN, OHM SIGN).
_DEEPSEEK_LLM_LETTERS = (
    "A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370"
    "-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-"
    "\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd"
    "\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18"
    "-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-"
    "\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-"
    "\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124"
    "\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183"
    "\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21"
    "-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
    "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943"
)
_CJK_HANGUL = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK3 = (
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_PORO = r" ?[^(\s|.,!?…。，、।۔،)]+"
_TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
    r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O = (
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + _CONTRACTIONS + "?"
    r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _CONTRACTIONS + "?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class PreTokenizer:
    """One of llama.cpp's BPE pre-tokenizers."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False
    byte_encode: bool = True  # GPT-2's byte map; False: merges on raw UTF-8
    escape_whitespace: bool = False  # spaces become "▁" first (SPM-style BPE)


def _pre(*regexes: str, **kw: bool) -> PreTokenizer:
    return PreTokenizer(tuple(regexes), **kw)


# Not here: llama.cpp's "default" pre-tokenizer (files without tokenizer.ggml.pre: Falcon, Aquila,
# GPT-NeoX) and "falcon". Both start with "[\p{P}\$\+<=>\^~\|]+", which llama.cpp's own regex
# engine applies to a "collapsed" text (unicode.cpp) and which there keeps "`," as one piece
# where Unicode's \p{P} splits it (seen on Python source). Until that is reproduced, llama.cpp
# counts them.

# tokenizer.ggml.pre -> llama.cpp's pre-tokenizer (names as llama-vocab.cpp reads them)
BPE_PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
         "lfm2", "jina-v5-nano"),
        _pre(_LLAMA3, ignore_merges=True),
    ),
    **dict.fromkeys(("dbrx", "smaug-bpe"), _pre(_LLAMA3)),
    "deepseek-llm": _pre(
        "[\r\n]", rf"\s?[{_DEEPSEEK_LLM_LETTERS}]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        r"\s+$", _CJK_HANGUL, r"\p{N}+",
    ),
    "deepseek-coder": _pre("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_HANGUL, r"\p{N}"),
    **dict.fromkeys(
        ("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"),
        _pre(r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", _DEEPSEEK3),
    ),
    **dict.fromkeys(
        ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
         "mellum2"),
        _pre(r"\p{N}", _GPT2),
    ),
    **dict.fromkeys(
        ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
         "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling",
         "exaone4", "jina-v1-en", "jina-v2-code", "roberta-bpe"),
        _pre(_GPT2),
    ),
    **dict.fromkeys(
        ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open",
         "megrez", "grok-2"),
        _pre(_QWEN2),
    ),
    "qwen35": _pre(_QWEN35),
    "chatglm-bpe": _pre(_LLAMA3),
    **dict.fromkeys(("glm4", "glm5"), _pre(_LLAMA3, ignore_merges=True)),
    **dict.fromkeys(("poro-chat", "bloom", "gpt3-finnish"), _pre(_PORO)),
    "viking": _pre(_PORO, r"\p{N}"),
    "tekken": _pre(_TEKKEN, ignore_merges=True),
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), _pre(_GPT4O)),
    **dict.fromkeys(
        ("gemma4", "granite-embed-multi-311m"),
        _pre(r"[^\n]+|[\n]+", byte_encode=False, escape_whitespace=True),
    ),
}
