"""The engine's vocabulary: settings, results, streamed events and errors.

These plain dataclasses cross the process boundary between the app and the engine host child
(pickled over a pipe), so they hold only builtins. The same types are what the CLI prints and what
the GUI observes; nothing here knows about processes or llama.cpp.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from app.core.engine.kv_alloc import BufferAlloc, KVCacheAlloc
from app.core.engine.threads import change_figure, default_threads, describe_change

# "repetition": the reply ended in a loop and was stopped (app/core/engine/repetition.py)
FinishReason = Literal["stop", "length", "cancelled", "error", "repetition"]
FINISH_REASONS = ("stop", "length", "cancelled", "error", "repetition")
KV_CACHE_TYPE_NAMES = ("f16", "f32", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")


# The context a model loads with when none is asked for: the window (its --n-ctx, the model
# panel), the CLI's run, compare, batch, generate and calibrate, and LoadSettings agree on it.
# 4,096 holds a useful slice of a document and a reply, and its KV cache stays small on a laptop.
DEFAULT_N_CTX = 4096


def default_context(n_ctx_train: int | None) -> int:
    """DEFAULT_N_CTX, or the model's training context when that is smaller (0/None: unknown)."""
    return min(DEFAULT_N_CTX, n_ctx_train) if n_ctx_train else DEFAULT_N_CTX


@dataclass(frozen=True)
class LoadSettings:
    """How to create the llama.cpp model and context. Every field is explicit on purpose."""

    n_ctx: int = DEFAULT_N_CTX
    # The most threads llama.cpp computes with: physical cores by default (threads.py says why).
    n_threads: int = field(default_factory=default_threads)
    n_threads_batch: int | None = None  # None: same as n_threads
    # Fewer threads while other programs use the cores, and back when they stop (threads.py);
    # False computes with n_threads whatever else runs.
    adapt_threads: bool = True
    n_batch: int = 512
    n_ubatch: int = 512
    n_gpu_layers: int = 0
    kv_cache_type: str = "f16"
    flash_attn: bool = False
    seed: int = 0

    def validate(self) -> None:
        """Raise ValueError with one sentence for settings llama.cpp would reject or crash on."""
        if self.n_ctx < 16:
            raise ValueError(f"n_ctx must be at least 16 (got {self.n_ctx})")
        if self.n_threads < 1 or (self.n_threads_batch is not None and self.n_threads_batch < 1):
            raise ValueError("the number of threads must be at least 1")
        if self.n_batch < 1 or self.n_ubatch < 1:
            raise ValueError("batch sizes must be at least 1")
        if self.n_gpu_layers < -1:
            raise ValueError("n_gpu_layers must be -1 (all), 0 (none) or a positive count")
        if self.kv_cache_type not in KV_CACHE_TYPE_NAMES:
            raise ValueError(
                f"unknown KV cache type {self.kv_cache_type!r} "
                f"(choose one of {', '.join(KV_CACHE_TYPE_NAMES)})"
            )
        if self.kv_cache_type not in ("f16", "f32", "bf16") and not self.flash_attn:
            raise ValueError(
                f"a quantized KV cache ({self.kv_cache_type}) needs flash attention turned on"
            )


MAX_SEED = 2**32 - 2  # llama.cpp takes 2**32 - 1 (LLAMA_DEFAULT_SEED) as "pick one at random"


@dataclass(frozen=True)
class SamplingSettings:
    """How each next token is chosen: llama.cpp's sampler chain, field for field.

    Temperature 0 is greedy decoding and the default, so a job's reply is reproducible on the
    machine that ran it (a rollback gives it again); other kernels round otherwise, so another
    CPU, a server that batches the prompt its own way or several lanes at once may part from it
    at a near tie (engine/schedule.py). The top-k/top-p/min-p cut-offs only matter above it.
    The repetition penalty (llama.cpp's ``penalty_repeat`` over the last ``repeat_last_n``
    tokens) and DRY (``dry_*``, "don't repeat yourself": a penalty growing with the length of a
    repeated sequence) also apply to greedy decoding; 1.0 and 0.0 switch them off. The windows
    count the context's tokens (prompt and reply), as llama-server does; -1 means the whole
    context. ``seed`` makes a sampled reply reproducible.
    ``stop_on_repetition``: end a reply that loops (finish reason ``repetition``).
    """

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_last_n: int = -1
    seed: int = 0
    stop_on_repetition: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def problems(self) -> list[tuple[str, str]]:
        """(field, what it must be) for every value llama.cpp would reject or misread; each
        face names the field its own way (``--top-k``, "Top-k")."""
        checks = (
            ("temperature", math.isfinite(self.temperature) and 0 <= self.temperature <= 100,
             "must be between 0 (greedy) and 100"),
            ("top_k", self.top_k >= 0, "must be 0 (off) or more"),
            ("top_p", 0 < self.top_p <= 1, "must be above 0 and at most 1 (1 is off)"),
            ("min_p", 0 <= self.min_p <= 1, "must be between 0 (off) and 1"),
            ("repeat_penalty", math.isfinite(self.repeat_penalty) and 0 < self.repeat_penalty <= 10,
             "must be above 0 and at most 10 (1 is off)"),
            ("repeat_last_n", self.repeat_last_n >= -1,
             "must be -1 (the whole context), 0 (off) or more"),
            ("dry_multiplier", math.isfinite(self.dry_multiplier)
             and 0 <= self.dry_multiplier <= 100, "must be between 0 (off) and 100"),
            ("dry_base", math.isfinite(self.dry_base) and 1 <= self.dry_base <= 100,
             "must be between 1 and 100"),
            ("dry_allowed_length", self.dry_allowed_length >= 1, "must be at least 1"),
            ("dry_last_n", self.dry_last_n >= -1,
             "must be -1 (the whole context), 0 (off) or more"),
            ("seed", 0 <= self.seed <= MAX_SEED, f"must be between 0 and {MAX_SEED}"),
        )  # fmt: skip
        return [(name, rule) for name, ok, rule in checks if not ok]

    def validate(self) -> None:
        """Raise ValueError with one sentence for the first value llama.cpp would reject."""
        for name, rule in self.problems():
            label = name.replace("_", "-")
            raise ValueError(f"{label} {rule} (got {getattr(self, name)})")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SamplingSettings:
        """Settings as stored (a version's ``settings["sampling"]``); fields it lacks (older
        records, no record at all) take their defaults, unknown ones are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass(frozen=True)
class LoadedModel:
    """What the engine reports after a successful load."""

    path: str
    n_ctx: int
    n_ctx_train: int
    n_vocab: int
    n_threads: int
    n_threads_batch: int
    n_gpu_layers: int
    gpu_offload_supported: bool
    kv_cache_type: str
    flash_attn: bool
    load_seconds: float
    warnings: tuple[str, ...] = ()
    # Read back from llama.cpp after the load (the card's figures are tested against these):
    kv_caches: tuple[KVCacheAlloc, ...] = ()  # what it allocated, one entry per KV cache
    buffers: tuple[BufferAlloc, ...] = ()  # every buffer it allocated (weights, KV, compute …)
    can_shift: bool = True  # llama_memory_can_shift: KV positions can be moved (context shift)
    sliding_window: int = 0  # llama_model_n_swa: the attention window in tokens, 0 for none
    swa_full: bool = True  # the windowed layers keep a full-size cache (every position)
    is_base_model: bool = False  # no chat template, or named a base model: frame for completion
    base_model_reason: str = ""  # why (ModelInfo.base_model_reason)

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of KV cache llama.cpp allocated, all caches together (0 when not known)."""
        return sum(c.bytes for c in self.kv_caches)

    @property
    def allocated_bytes(self) -> int:
        """Bytes of every buffer llama.cpp allocated at load, on every device (0: not known)."""
        return sum(b.bytes for b in self.buffers)

    @property
    def kv_cells(self) -> int:
        """Cells of the full-attention cache: the context llama.cpp made (n_ctx, padded)."""
        return max((c.cells for c in self.kv_caches), default=0)

    @property
    def kv_devices(self) -> tuple[str, ...]:
        """The backend buffers holding the KV cache ("CPU"; "CUDA0" when it is on a GPU)."""
        return tuple(dict.fromkeys(d for c in self.kv_caches for d in c.devices))


_BACKEND_NAME = re.compile(r"(?:^|\|)\s*([A-Za-z][\w.-]*) : ")


def backends_of(system_info: str) -> tuple[str, ...]:
    """The ggml backends a llama.cpp build registered, in its order ("CUDA", "CPU"; "Metal", …).

    ``llama_print_system_info`` writes each backend as ``NAME : FEATURE = value | …``; the names
    are what tells a person whether the build uses their GPU at all.
    """
    return tuple(dict.fromkeys(_BACKEND_NAME.findall(system_info)))


@dataclass(frozen=True)
class EngineCapabilities:
    llama_cpp_python_version: str
    system_info: str
    gpu_offload_supported: bool
    pid: int

    @property
    def backends(self) -> tuple[str, ...]:
        return backends_of(self.system_info)

    def describe_backend(self) -> str:
        """One line for people: "CUDA + CPU (GPU offload available)" or "CPU only"."""
        names = [n for n in self.backends if n != "CPU"]
        if not names:
            return "CPU only"
        offload = "GPU offload available" if self.gpu_offload_supported else "no GPU offload"
        return f"{' + '.join([*names, 'CPU'])} ({offload})"


@dataclass(frozen=True)
class KVUsage:
    """KV cache figures, read from llama.cpp (not estimated)."""

    n_ctx: int
    cells_used: int  # tokens resident in sequence 0
    pos_min: int  # -1 when empty
    pos_max: int  # -1 when empty
    state_bytes: int  # llama_state_seq_get_size for sequence 0
    can_shift: bool
    # Where the figures come from: "llama.cpp" for the local engine, a server's endpoint
    # ("/slots", "/metrics"), or "" when the server does not report them (cells_used is then
    # what the last request held by the server's own token counts).
    reported_by: str = "llama.cpp"

    @property
    def fraction(self) -> float:
        return self.cells_used / self.n_ctx if self.n_ctx else 0.0


@dataclass(frozen=True)
class PromptProgress:
    """A prompt being evaluated, between two ``llama_decode`` calls: ``evaluated`` of the
    ``total`` tokens this request evaluates (a prefix found in the cache is not among them),
    and the cache as llama.cpp holds it right then. Streamed by ``generate`` a few times a
    second, so a long prompt is never a silent wait."""

    evaluated: int
    total: int
    seconds: float  # since the prompt's first token went to llama.cpp
    kv: KVUsage

    @property
    def tokens_per_s(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class KVState:
    """A saved KV cache for one sequence, with the tokens that produced it."""

    tokens: tuple[int, ...]
    data: bytes
    n_ctx: int
    kv_cache_type: str
    model_path: str


@dataclass(frozen=True)
class EvalResult:
    n_evaluated: int
    n_past: int
    seconds: float


@dataclass(frozen=True)
class KVEdit:
    """What removing KV positions cost: shifted in place, or re-evaluated where shifting is
    impossible (some cache types and architectures cannot shift)."""

    removed: int  # positions removed
    moved: int  # positions after them, now moved down
    reevaluated: int  # of those, how many had to be evaluated again
    seconds: float
    n_past: int
    compacted: bool = False  # the cells moved to the front of the cache (Compaction.remove)


# ----- streamed generation events -----


@dataclass(frozen=True)
class TextDelta:
    """New text; always whole characters (a multibyte character is held until complete)."""

    text: str
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class Shifted:
    """The context was full while generating: KV positions ``[start, end)`` were removed and
    everything after them moved down (the ring mirrors this with ``Ring.shift``)."""

    start: int
    end: int
    n_past: int  # positions held just before the removal (the reply so far included)
    # positions after ``end`` evaluated again because llama.cpp cannot move this model's cache
    # (LoadedModel.can_shift False: some sliding-window and recurrent models); 0 when shifted
    reevaluated: int = 0


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int  # tokens in the prompt
    prompt_eval_tokens: int  # tokens actually evaluated (the rest were reused from the KV cache)
    prompt_seconds: float
    completion_tokens: int
    gen_seconds: float
    finish_reason: FinishReason
    n_past: int  # KV positions in use at the end
    error: str | None = None
    threads: int = 0  # llama.cpp's thread count at the end (0: not known, a server's reply)

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.prompt_eval_tokens / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    @property
    def gen_tokens_per_s(self) -> float:
        return self.completion_tokens / self.gen_seconds if self.gen_seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["prompt_tokens_per_s"] = round(self.prompt_tokens_per_s, 2)
        d["gen_tokens_per_s"] = round(self.gen_tokens_per_s, 2)
        return d


@dataclass(frozen=True)
class ThreadsChanged:
    """The engine now computes with ``after`` threads instead of ``before``: ``cause`` "busy"
    (other programs took ``others`` cores' worth of CPU), "quiet" (they stopped) or "slow" (a
    decode ran far slower than the ones before it). See :mod:`app.core.engine.threads`."""

    before: int
    after: int
    cause: str
    reason: str  # the cause in words, English ("another program is using a core")
    others: float  # cores' worth of CPU other programs used over the last half second
    seconds: float  # since the request began (0.0: made before it, reported at its start)
    took_s: float = 0.0  # "slow": the decode's seconds, and the same work's at the recent pace
    expected_s: float = 0.0

    def describe(self) -> str:
        """The change and the figure behind it, in words (the CLI's note)."""
        figure = change_figure(self.cause, self.others, self.took_s, self.expected_s)
        return f"{describe_change(self.before, self.after, self.reason)} ({figure})"


@dataclass(frozen=True)
class Finished:
    stats: GenerationStats


# KVUsage is streamed too: the cache's figures while a reply is generated, a few times a second
GenerationEvent = TextDelta | Shifted | PromptProgress | KVUsage | ThreadsChanged | Finished


# ----- batched generation: several prompts as parallel sequences (lanes) -----


@dataclass(frozen=True)
class LanePrompt:
    """Prompt ``index`` going into sequence ``lane``: ``evaluated`` of its ``total`` tokens
    (the shared prefix counted for the first prompt only), after ``seconds``. Sent as it
    starts and after each slice, so a map phase's first replies are never a silent wait."""

    index: int
    lane: int
    evaluated: int
    total: int
    seconds: float


@dataclass(frozen=True)
class LaneStarted:
    """Prompt ``index`` is in the KV cache of sequence ``lane``; its reply begins."""

    index: int
    lane: int
    prompt_eval_tokens: int  # evaluated now (the shared prefix is evaluated once, for the first)
    n_past: int  # positions the lane holds: the prefix and the prompt's own tokens


@dataclass(frozen=True)
class LaneDelta:
    """New text of prompt ``index``'s reply; whole characters, as :class:`TextDelta`."""

    index: int
    lane: int
    text: str
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class LaneFinished:
    """Prompt ``index``'s reply is over; ``cells`` are the positions each lane's sequence held
    in llama.cpp right then (read from llama.cpp, the shared prefix counted in each)."""

    index: int
    lane: int
    stats: GenerationStats
    cells: tuple[int, ...]


@dataclass(frozen=True)
class LaneCells:
    """The positions each lane's sequence holds in llama.cpp right now (the shared prefix
    counted in each), sent a few times a second while the lanes generate."""

    cells: tuple[int, ...]


@dataclass(frozen=True)
class LanesFinished:
    """The last event of a batched request."""

    lanes: int
    n_cells: int  # the size of the lanes' KV cache, all streams together
    seconds: float
    setup_seconds: float  # creating the lanes' context
    finish_reason: FinishReason  # stop: every prompt got its reply; cancelled


LaneEvent = LanePrompt | LaneStarted | LaneDelta | LaneCells | LaneFinished | LanesFinished
OnFull = Literal["stop", "shift"]  # what generation does when the context is full


# ----- errors (each message is one sentence a person can act on) -----


class EngineError(RuntimeError):
    """Base class for everything the engine reports as a failure."""


class ModelLoadError(EngineError):
    """The model file was refused (by the GGUF check or by llama.cpp)."""


class ContextOverflowError(EngineError):
    """The request cannot fit the context window; nothing was evaluated."""

    def __init__(self, prompt_tokens: int, n_ctx: int, reserve: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
        self.reserve = reserve
        super().__init__(
            f"prompt needs {prompt_tokens:,} tokens, context is {n_ctx:,} "
            f"(reply reserve {reserve:,})"
        )


class InsufficientMemoryError(EngineError):
    """The context would not fit in free memory; refused before llama.cpp allocated anything."""


class EngineCrashedError(EngineError):
    """The engine child process died (native crash or killed); a new engine can be started."""

    def __init__(self, message: str, exitcode: int | None = None) -> None:
        self.exitcode = exitcode
        super().__init__(message)


class EngineNotLoadedError(EngineError):
    """An operation needs a model, and none is loaded."""


class CancelledError(EngineError):
    """The operation was cancelled by the person."""
