"""Positions removed from the engine child's KV cache, and the cells moved to the front after a
large hole (:meth:`Compaction.remove`): what the ring's evictions and a full context's shift do.
"""

from __future__ import annotations

import time

from app.core.engine.kv_state_io import KVStateIO
from app.core.engine.types import KVEdit

# A removal of at least this many cells moves the rest to the front of the cache (remove's
# compact). llama.cpp's attention spans the cells in blocks of 256; a smaller hole saves
# little, and the state's copy costs a few milliseconds per thousand cells of a small model.
COMPACT_MIN = 256


class Compaction(KVStateIO):
    """Removing positions, with or without moving the cells behind them."""

    def remove(self, start: int, end: int, *, compact: bool = True) -> KVEdit:
        """Remove KV positions ``[start, end)``; what follows moves down so positions stay
        contiguous. Where llama.cpp cannot shift this cache, what follows is evaluated again.

        ``compact``: after a hole of at least :data:`COMPACT_MIN` cells on the CPU, the cells
        are also moved to the front of the cache (:meth:`_compact`). llama.cpp moves positions,
        not cells: the text behind the hole keeps its high cells, and every later decode
        attends over the cache up to the highest cell in use: the next window after a removal
        took 1.39x as long (tests/benchmarks/bench_kv.py). False leaves them (the benchmark's
        baseline).
        """
        self._require()
        lc = self._lc
        if not 0 <= start < end <= len(self.tokens):
            held = f"0..{len(self.tokens) - 1}" if self.tokens else "nothing"
            raise ValueError(
                f"cannot remove positions {start}..{end - 1}; the context holds {held}"
            )
        t0 = time.perf_counter()
        mem = self._mem
        rest = self.tokens[end:]
        reevaluated = 0
        compacted = False
        if not rest or lc.llama_memory_can_shift(mem):
            lc.llama_memory_seq_rm(mem, 0, start, end)
            if rest:
                lc.llama_memory_seq_add(mem, 0, end, -1, start - end)
            del self.tokens[start:end]
            assert self.settings is not None  # set with the model
            if (rest and compact and end - start >= COMPACT_MIN
                    and self.settings.n_gpu_layers == 0):  # fmt: skip
                compacted = self._compact()
        else:
            lc.llama_memory_seq_rm(mem, 0, start, -1)
            del self.tokens[start:]
            self._decode(rest, abortable=False)
            reevaluated = len(rest)
        # Without compaction llama.cpp applies the position change to the cached keys itself
        # at the next decode.
        return KVEdit(end - start, len(rest), reevaluated, time.perf_counter() - t0,
                      len(self.tokens), compacted)  # fmt: skip

    def _compact(self) -> bool:
        """Move the sequence's cells to the front of the cache, in the order they are in.

        llama.cpp rotates the shifted keys at the next decode, so the last token is decoded
        again first (its keys and values come out as a fresh evaluation's); the sequence's state
        is then read out, the cache cleared and the state put back, which llama.cpp writes into
        contiguous cells from the first. The state is byte for byte the one the removal left
        in place would have (tests/core/test_kv_compaction.py); only the cells' places change,
        and with them the order of float sums over them. False where llama.cpp refused to take
        the state back: the cache is then evaluated again from its tokens."""
        llm = self._require()
        lc = self._lc
        last = self.tokens.pop()
        lc.llama_memory_seq_rm(self._mem, 0, len(self.tokens), -1)
        self._decode([last], abortable=False)
        buf, n = self._state_out()
        lc.llama_memory_seq_rm(self._mem, 0, -1, -1)
        if n and lc.llama_state_seq_set_data(llm.ctx, buf, n, 0) == n \
                and lc.llama_memory_seq_pos_max(self._mem, 0) == len(self.tokens) - 1:  # fmt: skip
            return True
        lc.llama_memory_seq_rm(self._mem, 0, -1, -1)  # not expected; nothing is lost either way
        tokens, self.tokens = self.tokens, []
        self._decode(tokens, abortable=False)
        return False

