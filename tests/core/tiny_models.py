"""Tiny llama.cpp models with a real vocabulary: a one-layer Llama of random weights around one
of llama.cpp's vocabulary-only test files (models/vocab/ggml-vocab-*.gguf).

Their replies are noise, but llama.cpp loads them, evaluates prompts into a real KV cache and
samples from them as from any model, in milliseconds: the jobs and the audit can run end to end
on tokenizer families that no small model on the package registry has (Llama 2 and Mistral's
SentencePiece with a space prefix, Llama 3, Qwen, ...)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from tests.conftest import DATA

VOCABS = DATA.parent.parent / "models" / "vocab"


def vocab_file(family: str) -> Path:
    """llama.cpp's vocabulary-only test file for ``family`` (``llama-spm``, ``llama-bpe``, ...)."""
    return VOCABS / f"ggml-vocab-{family}.gguf"


def tiny_model(vocab: Path, out: Path, *, n_ctx: int = 4096, seed: int = 0) -> Path:
    """Write a one-layer Llama (64-wide, random weights) with ``vocab``'s tokenizer to ``out``."""
    n_embd, n_head, n_ff = 64, 2, 128
    reader = gguf.GGUFReader(vocab)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(f"tiny {vocab.stem}")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        sub = field.types[1] if kind == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    ones = np.ones(n_embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", weights(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("blk.0.attn_norm.weight", ones)
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(f"blk.0.{name}.weight", weights(n_embd, n_embd))
    w.add_tensor("blk.0.ffn_norm.weight", ones)
    w.add_tensor("blk.0.ffn_gate.weight", weights(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_up.weight", weights(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_down.weight", weights(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
