"""Fetching by name from a Hub that lies (tests/hub_server.py's hostile switches): what it says of
a file never becomes a path outside the cache or the folder, a download stops at the size it
announced, and a Hub on another machine is spoken to over https only (docs/reliability.md, the
fourth round). Each test reproduced the attack against the code before the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.default_model import ModelFetchError
from app.core.hub_fetch import fetch_hub_model
from app.core.hub_refs import HubReferenceError
from tests.cli.runner import assert_one_line_error, run_here
from tests.hub_server import hub, keyring_file

__all__ = ["hub", "keyring_file"]  # fixtures

pytestmark = pytest.mark.unit

REPO = "test-org/vocab-GGUF"
Q4KM = "ggml-vocab-llama-spm-Q4_K_M.gguf"
BIG = "big/ggml-vocab-qwen2-F16.gguf"
# from <cache>/models--test-org--vocab-GGUF/blobs/ up to the test's folder, then into a home
TRAVERSAL = "../../../../home/.ssh/authorized_keys"


def _home(tmp_path: Path) -> Path:
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    keys.parent.mkdir(parents=True)
    keys.write_text("ssh-ed25519 AAAA... the owner\n")
    return keys


def _written(tmp_path: Path) -> list[Path]:
    """Every file under the test's folder outside the Hugging Face home and the keyring."""
    return sorted(p for p in tmp_path.rglob("*")
                  if p.is_file() and "hf-home" not in p.parts and p.name != "keyring.json")


@pytest.mark.parametrize("etag", [TRAVERSAL, "/tmp/x", "abc", "A" * 64, "0" * 63])
def test_an_etag_that_is_not_a_hash_writes_nothing(hub, tmp_path: Path, etag: str) -> None:
    """An ETag of "../../../../../.ssh/authorized_keys" replaced the key file with the served
    GGUF (exit 0): the ETag named the cache's blob unchecked."""
    state, _ = hub
    keys = _home(tmp_path)
    before = _written(tmp_path)
    state.etags[Q4KM] = etag
    with pytest.raises(ModelFetchError, match="is not a hash; nothing was written"):
        fetch_hub_model(f"{REPO}:Q4_K_M")
    assert keys.read_text() == "ssh-ed25519 AAAA... the owner\n"
    assert _written(tmp_path) == before
    assert not state.gets(Q4KM)  # refused before a byte was asked for


def test_a_commit_that_is_not_a_hash_writes_nothing(hub, tmp_path: Path) -> None:
    state, _ = hub
    state.commit = "../../../../outside"
    with pytest.raises(ModelFetchError, match="is not a hash"):
        fetch_hub_model(f"{REPO}:Q4_K_M")
    assert not (tmp_path / "outside").exists() and not state.gets(Q4KM)


def test_a_hub_that_sends_more_than_it_announced_is_stopped_there(hub, tmp_path: Path) -> None:
    """256 bytes announced and the whole file sent: 209.7 MB were written before the size was
    compared; now the transfer stops at the first piece past the announced size."""
    state, _ = hub
    state.sizes[BIG] = 256
    seen: list[int] = []
    with pytest.raises(ModelFetchError, match=r"sent more than the 0\.0 MB it announced"):
        fetch_hub_model(f"{REPO}:{BIG}", progress=lambda done, _total: seen.append(done))
    assert max(seen, default=0) <= 256  # nothing past the announced size was kept
    leftovers = [p for p in (tmp_path / "hf-home").rglob("*") if p.is_file()]
    assert not [p for p in leftovers if p.stat().st_size > 256]


def test_a_file_whose_size_is_not_said_is_not_fetched(hub, tmp_path: Path) -> None:
    """With no size announced the free-space check counted 0 and the whole body was written."""
    state, _ = hub
    state.sizes[BIG] = None
    with pytest.raises(ModelFetchError, match="did not say how large"):
        fetch_hub_model(f"{REPO}:{BIG}")
    assert not state.gets(BIG)


def test_a_listed_name_outside_the_repository_is_one_sentence(hub, tmp_path: Path) -> None:
    """A listing holding ../../../escape-Q4_K_M.gguf: huggingface_hub refused it, but the CLI
    printed a ValueError traceback."""
    state, _ = hub
    state.repos["test-org/escape-GGUF"] = {"../../../escape-Q4_K_M.gguf": b""}
    state.anything = state.repos[REPO][Q4KM]  # the client's request, its dots resolved
    done = run_here("fetch-model", "test-org/escape-GGUF:Q4_K_M")
    assert done.returncode == 2, done.stderr
    assert_one_line_error(done)
    assert "is not a name inside the repository" in done.stderr
    assert not (tmp_path.parent / "escape-Q4_K_M.gguf").exists()


def test_a_revision_that_climbs_out_of_the_refs_is_refused(hub) -> None:
    _, endpoint = hub
    link = f"{endpoint}/{REPO}/resolve/..%2F..%2F..%2Fescape/{Q4KM}"
    with pytest.raises(HubReferenceError, match="is not a revision name"):
        fetch_hub_model(link)


def test_an_http_endpoint_on_another_machine_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:  # fmt: skip
    """Over http:// anyone on the way answers as the Hub (and sends the ETag they like)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.example.org")
    with pytest.raises(ModelFetchError, match="is not https"):
        fetch_hub_model(f"{REPO}:Q4_K_M")


def test_a_download_sent_over_http_from_another_machine_is_refused(hub) -> None:
    """The Hub's answer says where the bytes come from: an http:// address elsewhere is not
    asked (loopback storage is: tests/core/test_hub_fetch.py's ``cdn`` on localhost)."""
    state, _ = hub
    state.cdn, state.cdn_origin = True, "http://storage.example.org"
    with pytest.raises(ModelFetchError, match=r"sends .* from http://storage\.example\.org"):
        fetch_hub_model(f"{REPO}:Q4_K_M")
    assert not state.gets(Q4KM)


@pytest.mark.parametrize("into_folder", [False, True], ids=["cache", "folder"])
def test_the_hub_is_asked_about_a_file_once(hub, tmp_path: Path, into_folder: bool) -> None:
    """Each answer is checked once: huggingface_hub's ``hf_hub_download`` asked again after the
    download, and an ETag clean the first time and hostile the second deleted a file through
    the link it made. The file is now filed from what was checked."""
    state, _ = hub
    path = fetch_hub_model(f"{REPO}:Q4_K_M", tmp_path / "models" if into_folder else None)
    heads = [r for r in state.log if r.method == "HEAD" and r.path.endswith("/" + Q4KM)]
    assert len(heads) == 1 and path.read_bytes() == state.repos[REPO][Q4KM]


def test_a_split_whose_second_part_is_hostile_is_removed_whole(hub, tmp_path: Path) -> None:
    """Only the first part was checked: a second part claiming a 1 TiB key reached the model
    folder as a model, for llama.cpp's own parser to read."""
    from tests.core import gguf_cases as gc  # noqa: PLC0415

    state, _ = hub
    files = state.repos["test-org/split-GGUF"]
    second = sorted(n for n in files if n.endswith(".gguf"))[1]
    files[second] = gc.header(0, 1) + gc.u64(1 << 40) + b"split.no"
    folder = tmp_path / "models"
    with pytest.raises(ModelFetchError, match=r"part 2 of 2 .* it was removed"):
        fetch_hub_model("test-org/split-GGUF:Q8_0", folder)
    assert not [p for p in folder.rglob("*.gguf")]
