"""GGUF fuzzing: every malformed file ends in one clear error, never a hang or a crash of the app.

The cases come from ``gguf_fuzz``: crafted per vulnerability class on the tiny model, and mutants
of the real default model. Each goes through ``inspect_model`` here, under a time limit. Each file
the validator accepts then goes to ``EngineHost.load`` (llama.cpp in its child process) and a first
tokenize, under a watchdog that kills a child that hangs. A few hundred cases run in the normal
suite, all of them with SLOW=1; the closing summary counts the cases tried by class and outcome.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.default_model import default_model_path
from app.core.engine import host as host_module
from app.core.engine.gguf import (
    CheckedFile,
    CheckedModel,
    FileIdentity,
    GGUFError,
    GGUFFile,
    inspect_model,
    read_gguf,
)
from app.core.engine.host import EngineHost
from app.core.engine.types import (
    EngineCrashedError,
    EngineError,
    LoadSettings,
    ModelLoadError,
)
from tests.core import gguf_cases as gc
from tests.core import gguf_fuzz as fz
from tests.fault_child import CrashingHost

VALIDATE_S = 5.0  # the real header takes about 0.25 s; a bounded read never comes near this
LOAD_S = 60.0  # llama.cpp loads the sparse real model in under a second
CASE_TIMEOUT_S = 2 * LOAD_S + 30
SETTINGS = LoadSettings(n_ctx=64, n_batch=64, n_ubatch=64, n_threads=2)

# Files the validator lets through although they abort llama.cpp. The host must still report
# them in one clear sentence; any other crash fails (and the validator should learn to refuse it).
KNOWN_LLAMA_CRASHES = {
    # The SentencePiece tokenizer over a vocabulary without <0xXX> byte tokens: llama.cpp throws
    # std::out_of_range on the first character the vocabulary lacks. Refusing such vocabularies
    # would also refuse models that work for most text, so here the host's report is the guard.
    "real/tokenizer/model 'llama'",
}


def _real_header() -> GGUFFile | None:
    path = default_model_path()
    return read_gguf(path, keep_arrays=("tokenizer.ggml.tokens",)) if path.is_file() else None


TINY_BASE, TINY_HEADER = fz.tiny()
REAL_HEADER = _real_header()
CASES = fz.fuzz_cases(TINY_HEADER, REAL_HEADER)
BY_NAME = {c.name: c for c in CASES}
PARAMS = [pytest.param(c, id=c.name, marks=() if c.fast else pytest.mark.slow) for c in CASES]


# --- Fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tally(pytestconfig: pytest.Config) -> fz.Tally:
    """Printed by the closing summary (tests/core/conftest.py)."""
    return pytestconfig.stash.setdefault(fz.TALLY_KEY, fz.Tally())


@pytest.fixture(scope="module")
def fuzz_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for every case: each writes its file, and removes it when done."""
    return tmp_path_factory.mktemp("fuzz")


def _base(case: fz.FuzzCase, request: pytest.FixtureRequest) -> fz.Base:
    if case.base == "tiny":
        return TINY_BASE
    return fz.real_base(request.getfixturevalue("model_path"))


# --- Checks ------------------------------------------------------------------------------------


def _assert_clear(message: str) -> None:
    """One sentence a person can read: not empty, one line, no traceback."""
    assert message and message == message.strip(), f"unclear message: {message!r}"
    assert "\n" not in message and "\r" not in message, f"the message spans lines: {message!r}"
    assert "Traceback" not in message, f"the message carries a traceback: {message!r}"


def _validate(path: Path) -> str:
    """Either a model card or one GGUFError sentence, within VALIDATE_S; anything else fails."""
    start = time.perf_counter()
    try:
        info = inspect_model(path)
    except GGUFError as exc:
        outcome = "refused by the validator"
        _assert_clear(str(exc))
    else:
        outcome = "accepted"
        json.dumps(info.as_dict())
    seconds = time.perf_counter() - start
    assert seconds < VALIDATE_S, f"the validator took {seconds:.1f} s"
    return outcome


@contextmanager
def _watchdog(host: EngineHost, seconds: float) -> Iterator[threading.Event]:
    """Kills the engine child if the block outlives ``seconds``; the event says it did."""
    if not host.alive:
        host.start()
    pid = host.pid
    assert pid is not None
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        os.kill(pid, signal.SIGKILL)

    timer = threading.Timer(seconds, kill)
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


def _load(host: EngineHost, path: Path, case: fz.FuzzCase) -> str:
    """Load and tokenize once: a model or one EngineError sentence; a hang or else fails."""
    with _watchdog(host, LOAD_S) as fired:
        try:
            host.load(path, SETTINGS)
            host.tokenize("Hello, world. 你好")
        except EngineCrashedError as exc:
            assert not fired.is_set(), f"llama.cpp hung for {LOAD_S:.0f} s on {case.name}"
            _assert_clear(str(exc))
            assert "the engine process died" in str(exc)
            assert case.name in KNOWN_LLAMA_CRASHES, f"llama.cpp crashed: {exc}"
            return "crashed llama.cpp (reported)"
        except ModelLoadError as exc:
            _assert_clear(str(exc))
            assert path.name in str(exc), f"the message does not name the file: {exc}"
            return "refused by llama.cpp"
        except EngineError as exc:  # e.g. not enough memory for what the header claims
            _assert_clear(str(exc))
            return "refused by the engine host"
    return "loaded"


# --- The cases ---------------------------------------------------------------------------------


@pytest.mark.timeout(CASE_TIMEOUT_S)
@pytest.mark.parametrize("case", PARAMS)
def test_malformed_file_ends_in_a_clear_error(
    case: fz.FuzzCase,
    fuzz_folder: Path,
    idle_host: EngineHost,
    tally: fz.Tally,
    request: pytest.FixtureRequest,
) -> None:
    path = fuzz_folder / "fuzz.gguf"
    _base(case, request).image(case).write(path)
    try:
        outcome = _validate(path)
        if outcome == "accepted":
            outcome = _load(idle_host, path, case)
    finally:
        path.unlink()
    tally.add(case.kind, outcome)


# Files this fuzzing found to abort llama.cpp or to stall the engine, now refused by the validator
# before llama.cpp sees them (what went wrong in the comment).
REGRESSIONS = {
    # GGML_ASSERT(hparams.n_layer_all > 0 && hparams.n_layer_all <= LLAMA_MAX_LAYERS)
    "tiny/hparams/block_count=513": "a model has 1 to 512 layers",
    "real/hparams/block_count=4096": "a model has 1 to 512 layers",
    # GGML_ASSERT((uintptr_t)ptr % TENSOR_ALIGNMENT == 0 && "buffer pointer must be aligned")
    "real/alignment/u32 16": "off the 32-byte boundary llama.cpp needs",
    "real/alignment/u32 1": "off the 32-byte boundary llama.cpp needs",
    # GGML_ASSERT(id_to_token.size() == token_to_id.size())
    "real/tokenizer/tokens all the same": "the vocabulary lists 'a' twice",
    "tiny/tokenizer/tokens all empty": "the vocabulary lists '' twice",
    # llama-cpp-python sizes a token buffer by it: ValueError for 2**31, 8 GiB for 2**31-1
    "real/hparams/context_length=2**31": "a model is trained on 1 to 268,435,456 tokens",
    "real/hparams/context_length=2**31-1": "a model is trained on 1 to 268,435,456 tokens",
    # a 1 MiB template took 20 s to compile in llama-cpp-python while loading
    "real/tokenizer/chat template of 1 MiB": "more than the limit of 131,072",
}


@pytest.mark.unit
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "expected"), REGRESSIONS.items(), ids=list(REGRESSIONS))
def test_files_that_broke_the_engine_are_refused(
    name: str, expected: str, fuzz_folder: Path, request: pytest.FixtureRequest
) -> None:
    case = BY_NAME[name]
    path = fuzz_folder / "regression.gguf"
    _base(case, request).image(case).write(path)
    try:
        with pytest.raises(GGUFError) as err:
            inspect_model(path)
    finally:
        path.unlink()
    _assert_clear(str(err.value))
    assert expected in str(err.value)


# Files the validator passes and llama.cpp refuses: the refusal must give llama.cpp's reason.
LLAMA_REASONS = {
    "real/alignment/u64 32": "key 'general.alignment' must be of type u32 but is u64",
    "real/string/tensor 0:name of 64 chars": "tensor name 0 is too long: 64 >= 64",
    "real/tokenizer/token_type x1": "Index out of array bounds for toktypes (1 < 49152)",
    "real/tokenizer/chat template broken": "its chat template is not valid Jinja (Expected an",
    "real/tokenizer/chat template nested 5000 deep": "its chat template is nested too deeply",
}


@pytest.mark.timeout(CASE_TIMEOUT_S)
@pytest.mark.parametrize(("name", "expected"), LLAMA_REASONS.items(), ids=list(LLAMA_REASONS))
def test_llama_cpp_refusals_say_why(
    name: str, expected: str, fuzz_folder: Path, idle_host: EngineHost,
    request: pytest.FixtureRequest,
) -> None:
    path = fuzz_folder / "refused.gguf"
    _base(BY_NAME[name], request).image(BY_NAME[name]).write(path)
    try:
        inspect_model(path)
        with pytest.raises(ModelLoadError) as err:
            idle_host.load(path, SETTINGS)
    finally:
        path.unlink()
    message = str(err.value)
    _assert_clear(message)
    assert message.startswith("llama.cpp could not load refused.gguf: ")
    assert expected in message


@pytest.mark.timeout(CASE_TIMEOUT_S)
def test_a_file_that_kills_llama_cpp_is_reported_clearly(
    fuzz_folder: Path, model_path: Path, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """Should the validator miss a file that aborts llama.cpp, the host still says what happened:
    one line naming the file, without advice to load it again; and the next load works."""
    case = BY_NAME["real/hparams/block_count=513"]
    path = fuzz_folder / "aborts.gguf"
    _base(case, request).image(case).write(path)
    card = inspect_model(model_path)

    def gap(given: Path) -> CheckedModel:  # a validator gap: the file passes as it is
        return CheckedModel(card, (CheckedFile(str(given), FileIdentity.of(given.stat())),))

    monkeypatch.setattr(host_module, "check_parts", gap)
    with EngineHost() as h:
        try:
            with pytest.raises(EngineCrashedError) as err:
                h.load(path, SETTINGS)
        finally:
            path.unlink()
        message = str(err.value)
        _assert_clear(message)
        assert "while loading aborts.gguf: SIGABRT" in message
        assert "llama.cpp cannot load this file as it is" in message
        assert "load the model again" not in message
        assert h.load(model_path, SETTINGS).n_vocab == card.vocab_size


@pytest.mark.timeout(CASE_TIMEOUT_S)
def test_a_crash_report_quotes_only_the_request_that_crashed(model_path: Path) -> None:
    """An earlier request's error in the child's log must not pass for the crash's cause."""
    with CrashingHost() as h:
        h.load(model_path, SETTINGS)
        with pytest.raises(EngineError, match="TypeError"):  # logs a traceback in the child
            h.detokenize(["not a token id"])  # type: ignore[list-item]
        with pytest.raises(EngineCrashedError) as err:
            h.crash("abort")
    assert "TypeError" not in str(err.value)
    assert "load the model again" in str(err.value)


# --- The generator itself ----------------------------------------------------------------------


@pytest.mark.unit
def test_enough_cases_in_every_class() -> None:
    fast = [c for c in CASES if c.fast]
    assert len(fast) >= 250, "the normal run should try a few hundred cases"
    assert len(CASES) - len(fast) >= 1000, "SLOW=1 should try over a thousand more"
    for base in ("tiny", "real"):
        kinds = collections.Counter(c.kind for c in fast if c.base == base)
        assert set(kinds) == set(fz.KINDS), f"{base}: classes missing from the normal run"


@pytest.mark.unit
def test_the_real_model_is_fuzzed(model_path: Path) -> None:
    """Without the default model only the tiny cases would run; that must not pass unnoticed."""
    assert REAL_HEADER is not None
    assert sum(c.base == "real" for c in CASES) >= 500


@pytest.mark.unit
def test_cases_are_deterministic() -> None:
    again = fz.fuzz_cases(TINY_HEADER, REAL_HEADER)
    assert [(c.name, c.edits, c.cut, c.fast) for c in again] == [
        (c.name, c.edits, c.cut, c.fast) for c in CASES
    ]


@pytest.mark.unit
def test_every_case_changes_its_base(request: pytest.FixtureRequest) -> None:
    """A case that writes the valid base unchanged would test nothing."""
    for case in CASES:
        base = _base(case, request)
        valid = base.image(fz.FuzzCase("valid", "none", base.name))
        image = base.image(case)
        assert (image.head, image.size) != (valid.head, valid.size), case.name


@pytest.mark.unit
@pytest.mark.parametrize("base_name", ["tiny", "real"])
def test_layout_points_at_the_fields(base_name: str, request: pytest.FixtureRequest) -> None:
    """The field positions from the ``gguf`` reader agree with what the validator reads there."""
    case = fz.FuzzCase("valid", "none", base_name)
    base = _base(case, request)
    header = TINY_HEADER if base_name == "tiny" else REAL_HEADER
    assert header is not None
    head, lay = base.head, base.layout

    def field(ref: fz.Ref) -> bytes:
        start, end = lay.span(ref)
        return head[start:end]

    def number(ref: fz.Ref) -> int:
        return int.from_bytes(field(ref), "little")

    assert number(("n_kv",)) == len(header.metadata)
    assert number(("n_tensors",)) == len(header.tensors)
    assert lay.data_offset == header.data_offset
    for key, value in header.metadata.items():
        assert field(("key", key)) == key.encode()
        assert number(("key_len", key)) == len(key.encode())
        if isinstance(value, str):
            assert field(("value", key)) == gc.gstr(value)
    tokens = header.get("tokenizer.ggml.tokens")
    assert number(("count", "tokenizer.ggml.tokens")) == tokens.count
    for t, info in enumerate(header.tensors):
        assert field(("name", t)) == info.name.encode()
        assert number(("n_dims", t)) == len(info.shape)
        assert tuple(number(("dim", t, j)) for j in range(len(info.shape))) == info.shape
        assert number(("ggml_type", t)) == info.ggml_type
        assert number(("offset", t)) == info.offset


# --- Hypothesis: any overwrite of any integer field of the tiny model --------------------------

TINY_FIELDS: list[tuple[fz.Ref, int]] = [
    (("n_kv",), 8),
    (("n_tensors",), 8),
    *[((part, key), width) for key in TINY_HEADER.metadata
      for part, width in (("key_len", 8), ("type", 4))],
    *[((part, t), width) for t in range(len(TINY_HEADER.tensors))
      for part, width in (("name_len", 8), ("n_dims", 4), ("ggml_type", 4), ("offset", 8))],
]  # fmt: skip


@st.composite
def _overwrites(draw: st.DrawFn) -> fz.FuzzCase:
    fields = draw(st.lists(st.sampled_from(TINY_FIELDS), min_size=1, max_size=3, unique=True))
    edits = []
    for ref, width in fields:
        edge = st.sampled_from(fz.EDGES64 if width == 8 else fz.EDGES32)
        edits.append(fz.SetField(ref, draw(st.one_of(edge, st.integers(0, 2 ** (8 * width) - 1)))))
    return fz.FuzzCase("hypothesis", "random", "tiny", tuple(edits))


@pytest.mark.unit
@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(case=_overwrites())
def test_any_field_overwrite_gives_a_card_or_one_sentence(
    case: fz.FuzzCase, fuzz_folder: Path, tally: fz.Tally
) -> None:
    path = fuzz_folder / "hypothesis.gguf"
    TINY_BASE.image(case).write(path)
    try:
        tally.add("hypothesis", _validate(path))
    finally:
        path.unlink()
