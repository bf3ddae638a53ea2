"""Getting a GGUF from the Hugging Face Hub by name, with the real ``huggingface_hub`` client
against a loopback Hub (tests/hub_server.py) and a temporary Hugging Face cache.

References are parsed and files chosen as llama.cpp's ``-hf`` does; the download resumes with a
range request (within a fetch after a cut, and in the next fetch after a failure or a cancel);
a cancel stops within a second and leaves only the ``.incomplete`` file; a token goes only to the
endpoint; every refusal is one sentence.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

from app.core import credentials
from app.core.cancelled import Cancelled
from app.core.default_model import ModelFetchError
from app.core.hub_fetch import fetch_hub_model
from app.core.hub_refs import HubRef, HubReferenceError, choose_files, parse_reference
from tests.hub_server import COMMIT, TOKEN, hub, keyring_file, sha256

__all__ = ["hub", "keyring_file"]  # fixtures

pytestmark = pytest.mark.unit

EP = "https://huggingface.co"
BIG = "big/ggml-vocab-qwen2-F16.gguf"
Q4KM = "ggml-vocab-llama-spm-Q4_K_M.gguf"


def one_sentence(message: str) -> bool:
    return (bool(message) and "\n" not in message and "Traceback" not in message
            and re.search(r"[.!?]\s+[A-Z]", message) is None)  # fmt: skip


def cache_of(tmp_path: Path) -> Path:
    return tmp_path / "hf-home" / "hub"


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and ".locks" not in p.parts)


# references --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "ref"), [
    ("org/repo:Q4_K_M", HubRef("org/repo", quant="Q4_K_M")),
    ("  bartowski/Qwen2.5-0.5B-Instruct-GGUF:q8_0 ",
     HubRef("bartowski/Qwen2.5-0.5B-Instruct-GGUF", quant="q8_0")),
    ("org/repo", HubRef("org/repo")),
    ("org/repo:latest", HubRef("org/repo")),
    ("org/repo:UD-Q4_K_XL", HubRef("org/repo", quant="UD-Q4_K_XL")),
    ("org/repo:sub/Model-Q8_0.gguf", HubRef("org/repo", filename="sub/Model-Q8_0.gguf")),
    ("org/repo:README.md", HubRef("org/repo", filename="README.md")),
    ("hf.co/org/repo:Q4_K_M", HubRef("org/repo", quant="Q4_K_M")),
    ("huggingface.co/org/repo", HubRef("org/repo")),
    ("https://huggingface.co/org/repo/resolve/main/x-Q4_K_M.gguf?download=true",
     HubRef("org/repo", revision="main", filename="x-Q4_K_M.gguf")),
    ("https://huggingface.co/org/repo/blob/refs%2Fpr%2F3/dir/x.gguf",
     HubRef("org/repo", revision="refs/pr/3", filename="dir/x.gguf")),
    ("https://hf.co/org/repo", HubRef("org/repo")),
    ("https://huggingface.co/org/repo/tree/dev", HubRef("org/repo", revision="dev")),
    ("http://127.0.0.1:9/mirror/org/repo/resolve/abc/x.gguf",
     HubRef("org/repo", revision="abc", filename="x.gguf")),
])  # fmt: skip
def test_a_reference_names_a_repository_and_a_file_or_tag(text: str, ref: HubRef) -> None:
    assert parse_reference(text, "http://127.0.0.1:9/mirror") == ref


@pytest.mark.parametrize(("text", "says"), [
    ("", "no model given"),
    ("   ", "no model given"),
    ("org", "does not name a model"),
    ("org/", "does not name a model"),
    ("/repo", "does not name a model"),
    ("org/repo/extra", "does not name a model"),
    ("org/re po:Q4_K_M", "does not name a model"),
    ("-org/repo", "does not name a model"),
    ("org--x/repo", "does not name a model"),
    ("org/repo:Q4 K M", "does not name a model"),
    ("org/repo:../x.gguf", "does not name a model"),
    ("https://example.com/org/repo/resolve/main/x.gguf", "is not a Hugging Face link"),
    ("ftp://huggingface.co/org/repo", "is not a Hugging Face link"),
    ("https://huggingface.co/datasets/org/data", "is a dataset, not a model repository"),
    ("https://huggingface.co/org/repo/discussions/1", "does not point at a file"),
    ("https://huggingface.co/org", "does not name a model"),
])  # fmt: skip
def test_a_bad_reference_is_refused_in_one_sentence(text: str, says: str) -> None:
    with pytest.raises(HubReferenceError) as caught:
        parse_reference(text, EP)
    assert says in str(caught.value)
    assert one_sentence(str(caught.value))


REPO = [
    "README.md", "Model-Q4_K_M.gguf", "Model-Q4_K.gguf", "Model-Q8_0.gguf",
    "mmproj-Model-Q4_K_M.gguf", "split/Big-Q6_K-00001-of-00003.gguf",
    "split/Big-Q6_K-00002-of-00003.gguf", "split/Big-Q6_K-00003-of-00003.gguf",
]  # fmt: skip


@pytest.mark.parametrize(("ref", "files"), [
    (HubRef("o/r", quant="Q4_K_M"), ["Model-Q4_K_M.gguf"]),  # not the projector
    (HubRef("o/r", quant="q4_k_m"), ["Model-Q4_K_M.gguf"]),  # case does not matter
    (HubRef("o/r", quant="Q4_K"), ["Model-Q4_K.gguf"]),  # the exact token wins over Q4_K_M
    (HubRef("o/r", quant="Q8_0"), ["Model-Q8_0.gguf"]),
    (HubRef("o/r", quant="Q6_K"), [f"split/Big-Q6_K-0000{k}-of-00003.gguf" for k in (1, 2, 3)]),
    (HubRef("o/r"), ["Model-Q4_K_M.gguf"]),  # the default quantization
    (HubRef("o/r", filename="split/Big-Q6_K-00002-of-00003.gguf"),
     [f"split/Big-Q6_K-0000{k}-of-00003.gguf" for k in (1, 2, 3)]),  # every part, first first
    (HubRef("o/r", filename="Model-Q8_0.gguf"), ["Model-Q8_0.gguf"]),
])  # fmt: skip
def test_the_files_are_chosen_as_llama_cpp_chooses_them(ref: HubRef, files: list[str]) -> None:
    assert choose_files(ref, REPO) == files


def test_a_repository_without_q4_k_m_offers_its_only_model() -> None:
    assert choose_files(HubRef("o/r"), ["a.md", "Only-Q8_0.gguf"]) == ["Only-Q8_0.gguf"]


@pytest.mark.parametrize(("ref", "files", "says"), [
    (HubRef("o/r", quant="Q5_K_M"), REPO,
     "o/r has no Q5_K_M file; its quantizations are Q4_K, Q4_K_M, Q8_0, Q6_K"),
    (HubRef("o/r"), ["A-Q8_0.gguf", "A-F16.gguf"],
     "o/r has no Q4_K_M file; its quantizations are F16, Q8_0: add one as o/r:TAG"),
    (HubRef("o/r", quant="Q4"), ["A-Q4_0.gguf", "A-Q4_1.gguf"], "several models in o/r match Q4"),
    (HubRef("o/r", filename="Nope.gguf"), REPO, "o/r has no file Nope.gguf; its GGUF files are"),
    (HubRef("o/r", filename="README.md"), REPO, "README.md is not a GGUF file"),
    (HubRef("o/r", quant="Q6_K"), REPO[:-1], "holds only 2 of the 3 parts"),
    (HubRef("o/r"), ["config.json", "model.safetensors"], "o/r has no GGUF files"),
])  # fmt: skip
def test_no_fitting_file_is_said_in_one_sentence(ref: HubRef, files: list[str], says: str) -> None:
    with pytest.raises(HubReferenceError) as caught:
        choose_files(ref, files)
    assert says in str(caught.value)
    assert one_sentence(str(caught.value))


# downloads ---------------------------------------------------------------------------------


def test_a_quantization_is_fetched_into_the_hugging_face_cache(hub, tmp_path: Path) -> None:
    state, endpoint = hub
    assert endpoint != constants.ENDPOINT  # set after the client was imported: passed anyway
    seen: list[tuple[int, int]] = []
    path = fetch_hub_model("test-org/vocab-GGUF:q4_k_m", progress=lambda d, t: seen.append((d, t)))
    served = state.repos["test-org/vocab-GGUF"][Q4KM]
    cache = cache_of(tmp_path)
    assert path == cache / "models--test-org--vocab-GGUF" / "snapshots" / COMMIT / Q4KM
    assert path.is_symlink() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256(served)
    assert (cache / "models--test-org--vocab-GGUF" / "refs" / "main").read_text() == COMMIT
    assert seen[-1] == (len(served), len(served))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and len(seen) >= 3
    assert [r.path.rsplit("/", 1)[-1] for r in state.log if r.method == "GET"] == [
        "vocab-GGUF", Q4KM]  # the listing and the one file: not the projector
    assert all(r.authorization is None for r in state.log)  # no token, none sent
    again = fetch_hub_model("test-org/vocab-GGUF:Q4_K_M")
    assert again == path and len(state.gets(Q4KM)) == 1  # already there: not fetched again


def test_a_split_gguf_is_fetched_whole(hub, tmp_path: Path) -> None:
    state, _ = hub
    path = fetch_hub_model("test-org/split-GGUF:Q8_0")
    parts = sorted(n for n in state.repos["test-org/split-GGUF"] if n.endswith(".gguf"))
    assert path.name == parts[0]
    for name in parts:
        assert (path.parent / name).read_bytes() == state.repos["test-org/split-GGUF"][name]


def test_a_file_goes_into_a_folder_when_one_is_given(hub, tmp_path: Path) -> None:
    state, endpoint = hub
    folder = tmp_path / "models"
    path = fetch_hub_model(f"{endpoint}/test-org/vocab-GGUF/blob/main/{BIG}", folder)
    assert path == folder / BIG
    assert path.read_bytes() == state.repos["test-org/vocab-GGUF"][BIG]
    assert not cache_of(tmp_path).exists() or not files_under(cache_of(tmp_path))
    assert fetch_hub_model(f"test-org/vocab-GGUF:{BIG}", folder) == path
    assert len(state.gets(BIG)) == 1


def test_a_cut_connection_resumes_with_a_range_request(hub) -> None:
    state, _ = hub
    state.cut_at, state.cuts = 1_000_000, 1
    path = fetch_hub_model(f"test-org/vocab-GGUF:{BIG}")
    first, second = state.gets(BIG)
    assert first.range is None
    have = int(re.fullmatch(r"bytes=(\d+)-", second.range or "")[1])
    assert 0 < have <= 1_000_000
    assert sha256(path.read_bytes()) == sha256(state.repos["test-org/vocab-GGUF"][BIG])


def test_a_failed_fetch_resumes_in_the_next_one(hub, tmp_path: Path) -> None:
    state, _ = hub
    state.cut_at, state.cuts = 1_000_000, 99  # every transfer breaks there
    with pytest.raises(ModelFetchError) as caught:
        fetch_hub_model(f"test-org/vocab-GGUF:{BIG}")
    assert "broke after" in str(caught.value) and "fetching again resumes" in str(caught.value)
    assert one_sentence(str(caught.value))
    blobs = cache_of(tmp_path) / "models--test-org--vocab-GGUF" / "blobs"
    (partial,) = blobs.iterdir()
    assert partial.name.endswith(".incomplete") and partial.stat().st_size == 1_000_000
    assert not (blobs.parent / "snapshots").exists()
    state.cuts = 0
    path = fetch_hub_model(f"test-org/vocab-GGUF:{BIG}")
    assert state.gets(BIG)[-1].range == "bytes=1000000-"
    assert sha256(path.read_bytes()) == sha256(state.repos["test-org/vocab-GGUF"][BIG])
    assert not partial.exists()


def test_a_partial_file_longer_than_the_file_is_started_over(hub, tmp_path: Path) -> None:
    state, _ = hub
    data = state.repos["test-org/vocab-GGUF"][Q4KM]
    blobs = cache_of(tmp_path) / "models--test-org--vocab-GGUF" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{sha256(data)}.incomplete").write_bytes(b"x" * (len(data) + 1))
    path = fetch_hub_model(f"test-org/vocab-GGUF:{Q4KM}")
    assert path.read_bytes() == data and state.gets(Q4KM)[-1].range is None


def test_a_resumed_file_that_is_not_the_hubs_is_deleted(hub, tmp_path: Path) -> None:
    state, _ = hub
    data = state.repos["test-org/vocab-GGUF"][Q4KM]
    blobs = cache_of(tmp_path) / "models--test-org--vocab-GGUF" / "blobs"
    blobs.mkdir(parents=True)
    partial = blobs / f"{sha256(data)}.incomplete"
    partial.write_bytes(b"y" * 1000)  # not the file's first bytes
    with pytest.raises(ModelFetchError) as caught:
        fetch_hub_model(f"test-org/vocab-GGUF:{Q4KM}")
    assert "is not the Hub's file (its SHA-256 differs from the Hub's)" in str(caught.value)
    assert one_sentence(str(caught.value)) and not partial.exists()
    assert state.gets(Q4KM)[-1].range == "bytes=1000-"
    assert fetch_hub_model(f"test-org/vocab-GGUF:{Q4KM}").read_bytes() == data


def test_a_cancel_stops_within_a_second_and_leaves_only_the_incomplete_file(
    hub, tmp_path: Path
) -> None:
    state, _ = hub
    state.trickle_at = 600_000  # slow from there on, so the cancel lands mid-transfer
    cancel = threading.Event()
    asked: list[float] = []

    def progress(done: int, total: int) -> None:
        if done > 700_000 and not cancel.is_set():
            asked.append(time.monotonic())
            cancel.set()

    with pytest.raises(Cancelled) as caught:
        fetch_hub_model(f"test-org/vocab-GGUF:{BIG}", progress=progress, cancel=cancel)
    assert time.monotonic() - asked[0] < 1.0
    assert one_sentence(str(caught.value))
    left = files_under(cache_of(tmp_path))
    assert left and all(p.name.endswith(".incomplete") for p in left)
    state.trickle_at = None
    path = fetch_hub_model(f"test-org/vocab-GGUF:{BIG}")
    assert (state.gets(BIG)[-1].range or "").startswith("bytes=")
    assert sha256(path.read_bytes()) == sha256(state.repos["test-org/vocab-GGUF"][BIG])


def test_a_gated_model_without_a_token_asks_for_one(hub) -> None:
    state, _ = hub
    state.gated.add("test-org/gated-GGUF")
    with pytest.raises(ModelFetchError) as caught:
        fetch_hub_model("test-org/gated-GGUF:Q4_K_M")
    message = str(caught.value)
    assert message.startswith("this model needs a Hugging Face token: ") and one_sentence(message)
    assert all(r.authorization is None for r in state.log)


def test_the_keyring_token_goes_to_the_endpoint_only(hub) -> None:
    state, endpoint = hub
    state.gated.add("test-org/gated-GGUF")
    state.cdn = True  # the bytes come from another origin, as from the Hub's storage
    credentials.save_hub_token(endpoint, TOKEN)
    credentials.save_hub_token("https://huggingface.co", "hf_another_hubs_token")
    path = fetch_hub_model("test-org/gated-GGUF:Q4_K_M")
    assert path.read_bytes() == state.repos["test-org/gated-GGUF"]["gated-Q4_K_M.gguf"]
    on_endpoint = [r for r in state.log if r.host.startswith("127.0.0.1")]
    elsewhere = [r for r in state.log if r.host.startswith("localhost")]
    assert on_endpoint and all(r.authorization == f"Bearer {TOKEN}" for r in on_endpoint)
    assert elsewhere and all(r.authorization is None for r in elsewhere)


def test_hf_token_comes_before_the_keyring(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    state, endpoint = hub
    state.gated.add("test-org/gated-GGUF")
    credentials.save_hub_token(endpoint, "hf_a_stale_token")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    fetch_hub_model("test-org/gated-GGUF")
    assert {r.authorization for r in state.log} == {f"Bearer {TOKEN}"}


def test_a_refused_token_is_said(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    state, _ = hub
    state.gated.add("test-org/gated-GGUF")
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(ModelFetchError, match="needs a Hugging Face token that may read it"):
        fetch_hub_model("test-org/gated-GGUF:Q4_K_M")


@pytest.mark.parametrize(("reference", "says"), [
    ("test-org/nope:Q4_K_M", "has no model test-org/nope"),
    ("test-org/vocab-GGUF:Nope-Q4_K_M.gguf", "test-org/vocab-GGUF has no file Nope-Q4_K_M.gguf"),
    ("test-org/vocab-GGUF:Q2_K", "has no Q2_K file; its quantizations are"),
    ("https://huggingface.co/test-org/vocab-GGUF/resolve/v9/x.gguf", "has no revision v9"),
    ("test-org/safetensors-only", "has no GGUF files"),
    ("test-org/vocab-GGUF:README.md", "README.md is not a GGUF file"),
])  # fmt: skip
def test_what_is_not_there_is_said_in_one_sentence(hub, reference: str, says: str) -> None:
    with pytest.raises(ModelFetchError) as caught:
        fetch_hub_model(reference)
    assert says in str(caught.value) and one_sentence(str(caught.value))


def test_a_repository_hidden_from_anonymous_requests_asks_to_check_the_name_or_a_token(
    hub,
) -> None:
    state, _ = hub
    state.missing_status = 401  # as the Hub answers for a private or a missing repository
    with pytest.raises(ModelFetchError) as caught:
        fetch_hub_model("test-org/private-GGUF:Q4_K_M")
    assert "has no public model test-org/private-GGUF: check the name, or, if it is private, it " \
        "needs a Hugging Face token" in str(caught.value)
    assert one_sentence(str(caught.value))


def test_a_file_that_is_not_a_gguf_is_refused_and_removed(hub, tmp_path: Path) -> None:
    with pytest.raises(ModelFetchError) as caught:
        fetch_hub_model("test-org/broken-GGUF")
    assert "is not a GGUF model that ContextLens can read" in str(caught.value)
    assert one_sentence(str(caught.value))
    repo = cache_of(tmp_path) / "models--test-org--broken-GGUF"
    assert not files_under(repo / "blobs") and not files_under(repo / "snapshots")


def test_no_network_is_one_sentence(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ModelFetchError) as caught:
        fetch_hub_model("test-org/vocab-GGUF:Q4_K_M")
    assert str(caught.value).startswith("cannot reach 127.0.0.1:9")
    assert one_sentence(str(caught.value)) and time.monotonic() - started < 5


def test_a_full_disk_is_said_before_downloading(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    state, _ = hub

    class Usage:
        free = 1000

    monkeypatch.setattr("app.core.hub_fetch.shutil.disk_usage", lambda _path: Usage)
    with pytest.raises(ModelFetchError, match="not enough free space") as caught:
        fetch_hub_model(f"test-org/vocab-GGUF:{BIG}")
    assert one_sentence(str(caught.value)) and not state.gets(BIG)


def test_hf_hub_offline_is_respected(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelFetchError, match="HF_HUB_OFFLINE is set"):
        fetch_hub_model("test-org/vocab-GGUF:Q4_K_M")

