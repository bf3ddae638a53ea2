"""The engine child's KV cache read out and put back: its figures, its tokens, and the state of
its sequence saved (to the reply or straight into a file) and restored (checked against its
tokens: a state llama.cpp does not read whole, or that ends elsewhere, is refused)."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os

from app.core.engine.llama_base import LlamaBase, nothing_pending
from app.core.engine.types import KVState, KVUsage

# The KV state is saved for sequence -1 (every sequence: this context has one) and restored into
# sequence 0. Saved for sequence 0, llama.cpp leaves out the cells of the sliding-window layers
# outside the window of the sequence's last position (Gemma 3: all but the last 512), so the
# restored cache could not serve a shorter prefix: a rollback's resumed reply differed from the
# job's, and the cache's first position read 888 instead of 0.
_STATE_SEQ = -1


class KVStateIO(LlamaBase):
    """The cache's contents and figures, and its state saved and restored (requests of the
    parent, each a method)."""

    def kv_tokens(self) -> list[int]:
        """The token ids at KV positions 0..n-1 of the sequence, as the engine put them there."""
        self._require()
        return list(self.tokens)

    def kv_usage(self) -> KVUsage:
        llm = self._require()
        lc = self._lc
        mem = self._mem
        pos_min = lc.llama_memory_seq_pos_min(mem, 0)
        pos_max = lc.llama_memory_seq_pos_max(mem, 0)
        used = pos_max - pos_min + 1 if pos_max >= 0 else 0
        return KVUsage(
            n_ctx=llm.n_ctx(),
            cells_used=used,
            pos_min=pos_min,
            pos_max=pos_max,
            state_bytes=lc.llama_state_seq_get_size(llm.ctx, _STATE_SEQ),
            can_shift=bool(lc.llama_memory_can_shift(mem)),
        )

    def _state_out(self) -> tuple[ctypes.Array[ctypes.c_uint8], int]:
        """The sequence's KV state in a buffer of its own, and how many of its bytes it fills."""
        ctx = self._require().ctx
        size = self._lc.llama_state_seq_get_size(ctx, _STATE_SEQ)
        buf = (ctypes.c_uint8 * size)()
        return buf, self._lc.llama_state_seq_get_data(ctx, buf, size, _STATE_SEQ)

    def save_state(self, path: str | None = None) -> KVState:
        """The sequence's KV state; with ``path`` the bytes go to that file, not the reply."""
        llm = self._require()
        lc = self._lc
        assert self.settings is not None
        data = b""
        if path is not None:  # llama.cpp writes straight into the mapped file
            size = lc.llama_state_seq_get_size(llm.ctx, _STATE_SEQ)
            with open(path, "w+b") as out:
                out.truncate(size)
                with mmap.mmap(out.fileno(), size) as view:
                    buf = (ctypes.c_uint8 * size).from_buffer(view)
                    n = lc.llama_state_seq_get_data(llm.ctx, buf, size, _STATE_SEQ)
                    del buf  # the mapping closes only once nothing exports it
                out.truncate(n)
        else:
            buf, n = self._state_out()
            data = bytes(memoryview(buf)[:n])
        if self._step_hook is not None:
            self._step_hook("save", nothing_pending)
        return KVState(
            tokens=tuple(self.tokens),
            data=data,
            n_ctx=llm.n_ctx(),
            kv_cache_type=self.settings.kv_cache_type,
            model_path=self.model_path or llm.model_path,
        )

    def restore_state(self, state: KVState, path: str | None = None) -> int:
        """Load a saved state; with ``path`` its bytes are read from that file."""
        llm = self._require()
        assert self.settings is not None
        if state.n_ctx != llm.n_ctx() or state.kv_cache_type != self.settings.kv_cache_type:
            raise ValueError(
                f"the saved KV state was made with n_ctx {state.n_ctx} and a {state.kv_cache_type} "
                f"cache; the loaded model has n_ctx {llm.n_ctx()} and a "
                f"{self.settings.kv_cache_type} cache"
            )
        if len(state.tokens) > llm.n_ctx():
            raise ValueError("the saved KV state holds more tokens than the context")
        lc = self._lc
        lc.llama_memory_seq_rm(self._mem, 0, -1, -1)
        self.tokens = []
        with contextlib.ExitStack() as stack:
            if path is not None:  # mapped, not copied: llama.cpp reads the pages directly
                src = stack.enter_context(open(path, "rb"))
                size = os.fstat(src.fileno()).st_size
                if size == 0:
                    raise ValueError("the saved KV state is empty")
                view = stack.enter_context(mmap.mmap(src.fileno(), size, access=mmap.ACCESS_COPY))
                buf = (ctypes.c_uint8 * size).from_buffer(view)
            else:
                size = len(state.data)
                buf = (ctypes.c_uint8 * size).from_buffer_copy(state.data)
            n = lc.llama_state_seq_set_data(llm.ctx, buf, size, 0)
            del buf  # the mapping closes only once nothing exports it
        if n == 0:
            lc.llama_memory_seq_rm(self._mem, 0, -1, -1)
            raise ValueError("llama.cpp rejected the saved KV state (made by another model?)")
        # llama.cpp ignores bytes after what it needs and restores the cells the state says:
        # a state that is not all read, or whose last position is not its last token's, is
        # not the state of its tokens (a damaged or crafted one)
        last = lc.llama_memory_seq_pos_max(self._mem, 0)
        if n != size or last != len(state.tokens) - 1:
            lc.llama_memory_seq_rm(self._mem, 0, -1, -1)
            raise ValueError(
                f"the saved KV state does not match its {len(state.tokens):,} tokens (llama.cpp "
                f"read {n:,} of its {size:,} bytes, up to position {last:,}); it was not restored"
            )
        self.tokens = list(state.tokens)
        return len(self.tokens)

