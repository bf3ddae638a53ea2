"""The engine child's vocabulary: a model's or one loaded alone (``vocab_only``, for counting),
text to tokens (one text, several on every core, or as a continuation of a prompt without a
SentencePiece space prefix), tokens to text whole, the tokens' attributes, and the model's chat
template rendered."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.core.engine.chat_template import ChatTemplateError, render_chat_template
from app.core.engine.gguf import CheckedFile, adds_space_prefix, read_gguf
from app.core.engine.llama_base import LlamaBase, plain_reason
from app.core.engine.reply_text import token_bytes
from app.core.engine.types import ModelLoadError
from app.core.textutil import utf8


class Vocabulary(LlamaBase):
    """Tokens and text, and the chat template (requests of the parent, each a method)."""

    def load_vocab(self, path: str, files: Sequence[CheckedFile] = ()) -> int:
        """Load only the vocabulary (llama.cpp's ``vocab_only``): counting needs no weights, and
        a vocabulary-only GGUF has none. Replaces a loaded model; returns the vocabulary size.
        With ``files`` (what the parent checked), llama.cpp reads that very file or none
        (model_files.py), as for a model."""
        self.unload()
        try:
            opened = self._hold(path, files)
            self.vocab_model = self._vocab_only(opened)
        except BaseException:
            self.unload()
            raise
        self.tokenizer_path = opened
        return int(self.vocab_model.n_vocab())

    def _vocab_only(self, path: str, overrides: dict[str, bool] | None = None) -> Any:
        """A vocabulary-only llama.cpp model of ``path``, with metadata ``overrides``."""
        from llama_cpp import _internals  # noqa: PLC0415 (llama.cpp: engine process only)

        lc = self._lc
        params = lc.llama_model_default_params()
        params.vocab_only = True
        keep: Any = None
        if overrides:
            keep = (lc.llama_model_kv_override * (len(overrides) + 1))()  # ends with a blank
            for i, (key, value) in enumerate(overrides.items()):
                keep[i].key = key.encode()
                keep[i].tag = lc.LLAMA_KV_OVERRIDE_TYPE_BOOL
                keep[i].value.val_bool = value
            params.kv_overrides = keep
        self.log.clear()
        self.first_error = ""
        try:
            return _internals.LlamaModel(path_model=path, params=params, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            reason = plain_reason(self.first_error or str(exc))
            raise ModelLoadError(
                f"llama.cpp could not read the vocabulary of {os.path.basename(path)}: {reason}"
            ) from None

    def _tokenizer(self) -> Any:
        """The llama.cpp model whose vocabulary tokenizes: the loaded one, or a vocabulary."""
        if self.llm is None and self.vocab_model is not None:
            return self.vocab_model
        return self._require()._model

    def _continuation(self) -> Any:
        """The tokenizer for text that continues a prompt: the vocabulary again with llama.cpp's
        space prefix switched off where the file asks for one. SentencePiece models such as
        Llama 2, Mistral and Phi-3 put '▁' before every text tokenized from its start, so a
        chunk tokenized on its own would reach the model as ' chunk' where the document says
        'chunk' (Gemma and every BPE model add none, and need no second vocabulary)."""
        model = self._tokenizer()
        if self.space_prefix is None:  # read once per file: a header holds the whole vocabulary
            path = self.tokenizer_path
            self.space_prefix = bool(path) and adds_space_prefix(read_gguf(path))
        if not self.space_prefix:
            return model
        if self.continuation_model is None:
            self.continuation_model = self._vocab_only(
                self.tokenizer_path, {"tokenizer.ggml.add_space_prefix": False}
            )
        return self.continuation_model

    def tokenize(
        self,
        text: str,
        add_special: bool = True,
        parse_special: bool = False,
        continuation: bool = False,
    ) -> list[int]:
        model = self._continuation() if continuation else self._tokenizer()
        ids: list[int] = model.tokenize(utf8(text), add_special, parse_special)
        return ids

    def tokenize_many(
        self, texts: list[str], parse_special: bool = False, continuation: bool = False
    ) -> list[list[int]]:
        """Several texts at once, on as many threads as there are cores: llama.cpp's tokenizer
        reads the vocabulary only, and ctypes lets go of the GIL during each call."""
        model = self._continuation() if continuation else self._tokenizer()
        if len(texts) < 2:
            return [model.tokenize(utf8(t), False, parse_special) for t in texts]
        workers = min(len(texts), os.cpu_count() or 1)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tokenize") as pool:
            return list(pool.map(lambda t: model.tokenize(utf8(t), False, parse_special), texts))

    def token_attrs(self) -> list[int]:
        """llama.cpp's attribute of every token (control, user-defined, lstrip, ...): what its
        tokenizer decides by, after the fixes it applies to what the file says."""
        vocab = self._tokenizer().vocab
        get = self._lc.llama_vocab_get_attr
        return [int(get(vocab, i)) for i in range(self._lc.llama_vocab_n_tokens(vocab))]

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        """The text of ``tokens``, every piece whole. llama-cpp-python's ``detokenize`` gives
        each piece a 32-byte buffer and silently drops longer ones (379 tokens of Gemma 3, a run
        of sixteen '─' among them; 47 of SmolLM2), so text rebuilt with it can lack what the
        model saw. A leading space after BOS is dropped, as llama-cpp-python does."""
        self._check_ids(tokens)
        lc = self._lc
        vocab = self._vocab()
        buf = ctypes.create_string_buffer(256)
        out = b"".join(token_bytes(lc, vocab, tok, buf, special) for tok in tokens)
        if tokens and tokens[0] == lc.llama_vocab_bos(vocab) and out[:1] == b" ":
            out = out[1:]
        return out.decode("utf-8", "replace")

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> str:
        llm = self._require()
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ChatTemplateError("this model has no chat template; send a plain prompt instead")
        vocab = self._vocab()
        lc = self._lc

        def text_of(tok: int) -> str:
            return llm._model.token_get_text(tok) if tok >= 0 else ""

        return render_chat_template(
            template,
            messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=text_of(lc.llama_vocab_bos(vocab)),
            eos_token=text_of(lc.llama_vocab_eos(vocab)),
            cancelled=self._stopped,
        )
