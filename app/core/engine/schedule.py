"""What the engine does differently from a plain llama-cpp-python call, said in one place: the
settings it creates llama.cpp's model and context with, and the schedule of the decodes a reply
is computed in. The engine uses both (llama_engine.py, llama_base.py, generation.py, lanes.py);
a test that compares the engine with llama-cpp-python uses both too, so it compares like with
like (tests/core/test_engine_host.py).

Against ``Llama(path, n_ctx=N)`` followed by ``Llama.generate(prompt, temp=0)``:

- **Settings** (:func:`llama_kwargs`): ``n_threads`` is the physical cores this process may use
  and ``n_threads_batch`` the same (llama-cpp-python: half of ``cpu_count()``, and all of it);
  ``n_batch`` is at most ``n_ctx``; the sliding-window layers keep every position
  (``swa_full``); the KV cache type, flash attention and GPU layers are the load settings' (the
  defaults f16, off and none are llama-cpp-python's too); a calibration may choose other
  thread, batch and flash-attention settings for the machine (calibrate.py).
- **Threads while a job runs**: the count is lowered and raised between decodes
  (``llama_set_n_threads``, threads.py). It changes no number: every sum of ggml's CPU kernels
  is computed by one thread whatever the count (measured: logits identical to the bit with 1
  and 2 threads, and with the count changed between slices, on the native and the portable
  build, both test models).
- **The schedule** (:func:`prompt_slices`): the prompt after the prefix the cache already holds
  goes in slices of :func:`slice_tokens`, then its last token alone; each generated token alone.
  ``Llama.generate`` evaluates the prompt in ``n_batch`` batches with its last token inside the
  last one. The schedule is a pure function of the prompt's length and the settings, never of
  timing or of what the engine evaluated before, so a job run again from the same cache on the
  same machine computes the same numbers. (A prompt evaluated after a cached prefix starts its
  slices where the prefix ends: its numbers may differ in the last bits from the same prompt
  evaluated whole, as with any prefix cache.)
- **Sampling**: llama.cpp's sampler chain (sampler.py); at temperature 0 its greedy pick is the
  largest logit, as llama-cpp-python's is.

Why the schedule matters: llama.cpp's CPU kernels do not compute a token the same way in every
batch, and which way depends on the instruction set the build has. llamafile's sgemm takes a
product only for two rows or more, so a token decoded alone goes through other kernels; the
repacked Q4_0/Q4_K weights are multiplied four rows at a time and the rest one by one. On a
622-token prompt the last token evaluated alone or inside the prompt's batch gave logits up to
0.6 apart (SmolLM2, both builds); a first slice of 33 tokens instead of 32 changed Gemma 3's
greedy reply from its fifth token (portable build) or its ninth (native). On the development
machine's AVX-512 build the default model's short chat prompts happened to give the same greedy
reply either way; on an AVX2 build the reply to "Write a haiku about rivers." parted from
``Llama.generate``'s at its tenth token. With the same settings and this schedule,
llama-cpp-python gives the engine's tokens on either build.

What is therefore per machine: greedy text (other kernels round otherwise) and every timing.
What holds on any CPU: token counts, plans, what the audit checks, and a rollback that resumes a
run from its saved KV state (the state is restored byte for byte and its last prompt token
evaluated alone, as the run did).
"""

from __future__ import annotations

from typing import Any

from gguf.constants import GGMLQuantizationType

from app.core.engine.types import LoadSettings

# The tokens of one prompt slice on the CPU. The thread count is set between decodes, so a slice
# is how long the engine takes to follow a change in the machine's load: 128 tokens are 1-2 s
# of the default model on one or two slow cores. On two cores 1,900 prompt tokens went at the
# same speed in slices of 128, 256 or 512 tokens, 4% slower in 64.
PROMPT_SLICE = 128


def slice_tokens(n_batch: int, gpu_layers: int) -> int:
    """The tokens of each prompt slice for a model loaded with ``n_batch`` and ``gpu_layers``
    offloaded: :data:`PROMPT_SLICE` on the CPU (at most ``n_batch``); the whole batch where layers
    are on a GPU, which computes a large batch much faster than several small ones and needs no
    threads taken away."""
    return max(1, n_batch if gpu_layers else min(n_batch, PROMPT_SLICE))


def slices(n: int, size: int) -> list[int]:
    """``n`` tokens in decodes of ``size``, the last one shorter."""
    return [min(size, n - i) for i in range(0, n, size)]


def prompt_slices(n: int, size: int) -> list[int]:
    """The decodes a prompt of ``n`` tokens to evaluate goes in: all but the last in slices of
    ``size``, then the last alone, as a reply resumed from a saved state evaluates it (the state
    holds the prompt but its last token), so that the rollback and the run compute the same."""
    return [*slices(n - 1, size), 1] if n > 0 else []


def llama_kwargs(path: str, settings: LoadSettings, gpu_layers: int) -> dict[str, Any]:
    """The arguments of ``llama_cpp.Llama`` for ``settings``, with ``gpu_layers`` offloaded (0
    where the build cannot offload)."""
    cache_type = int(GGMLQuantizationType[settings.kv_cache_type.upper()])
    return dict(
        model_path=path,
        n_ctx=settings.n_ctx,
        n_batch=min(settings.n_batch, settings.n_ctx),
        n_ubatch=min(settings.n_ubatch, settings.n_batch, settings.n_ctx),
        n_threads=settings.n_threads,
        n_threads_batch=settings.n_threads_batch or settings.n_threads,
        n_gpu_layers=gpu_layers,
        type_k=cache_type,
        type_v=cache_type,
        flash_attn=settings.flash_attn,
        seed=settings.seed,
        # llama.cpp's default, said here because the app relies on it: sliding-window layers
        # keep every position, so prefix reuse, rollback and the ring's shifts work on them as
        # on any layer (and ModelInfo.kv_bytes_per_token counts them).
        swa_full=True,
        verbose=False,
    )
