"""``contextlens-cli models``: every model of a home laid out as other tools leave it, once, with
its source (tests/model_homes.py); a folder that is not there is one sentence and exit code 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK
from app.core import model_folders
from tests.cli.runner import assert_one_line_error, run
from tests.model_homes import PARAMS, TEMPLATE, Home, live_in, write_tiny_gguf

pytestmark = pytest.mark.unit


# what the models listing finds in the built home, in order: (source, name)
LISTED = [
    ("LM Studio", "bartowski/SmolLM2-GGUF/SmolLM2-135M-Instruct-Q4_1.gguf"),
    ("Ollama", "gemma3:270m"),
    ("Hugging Face cache", "tiny-org/Tiny-GGUF/tiny-f32.gguf"),
    ("llama.cpp cache", "tiny-org_Tiny_cache.gguf"),
    ("Added folder", "big-00001-of-00003.gguf"),
    ("Added folder", "half/half-00001-of-00003.gguf"),
]


@pytest.fixture
def cli_home(layout: Home, monkeypatch: pytest.MonkeyPatch) -> Home:
    """The layout as this test's home, with ContextLens's own models folder in
    CONTEXTLENS_MODELS: what the command line finds."""
    home = live_in(layout, monkeypatch)
    monkeypatch.setenv("CONTEXTLENS_MODELS", str(home.own))
    return home


def test_json_lists_each_model_once_with_its_source(cli_home: Home) -> None:
    proc = run("models", "--json", "--folder", str(cli_home.added))
    assert proc.returncode == EXIT_OK, proc.stderr
    models = json.loads(proc.stdout)
    assert [(m["source"], m["name"]) for m in models] == LISTED
    for model in models:
        assert {"path", "family", "parameters", "quantization", "file_size", "n_ctx_train",
                "parts", "ollama_template", "ollama_parameters"} <= model.keys()  # fmt: skip
    gemma = models[1]
    assert gemma["path"] == str(cli_home.ollama_blob) and gemma["family"] == "gemma3"
    assert (gemma["ollama_template"], gemma["ollama_parameters"]) == (TEMPLATE, PARAMS)
    assert models[0]["ollama_template"] is None
    assert (models[5]["parts"], models[5]["parts_present"], models[5]["loadable"]) == (3, 2, False)
    # the file that is not a GGUF: one sentence on stderr, not in the list
    assert proc.stderr.strip() == (
        f"Skipped {cli_home.bad_file}: not a GGUF file (the first four bytes are not "
        "'GGUF').")  # fmt: skip


def make_hostile(layout: Home) -> list[str]:
    """Every small file of the stores made hostile (issue 47, rows 3, 4, 7): a manifest of
    200,000 ``[``, a FIFO as a model's template, 15 links from ``manifests/`` back to itself,
    ``refs/main`` a link to /dev/zero, a FIFO as LM Studio's pointer and as the folder list.
    The sentences the listing should print for them, beside the bad file's."""
    manifests = layout.ollama_store / "manifests"
    deep = manifests / "registry.ollama.ai" / "library" / "deep" / "latest"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(b"[" * 200_000)
    blobs = layout.ollama_store / "blobs"
    write_tiny_gguf(blobs / f"sha256-{'cd' * 32}", "Tiny Ollama")
    os.mkfifo(blobs / f"sha256-{'ef' * 32}")
    tiny = manifests / "registry.ollama.ai" / "library" / "tiny" / "latest"
    tiny.parent.mkdir(parents=True)
    tiny.write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{'cd' * 32}"},
        {"mediaType": "application/vnd.ollama.image.template", "digest": f"sha256:{'ef' * 32}"},
    ]}))  # fmt: skip
    for i in range(15):
        (manifests / f"l{i:02d}").symlink_to(".")
    refs_main = layout.hf_cache / "models--tiny-org--Tiny-GGUF" / "refs" / "main"
    refs_main.unlink()
    refs_main.symlink_to("/dev/zero")
    os.mkfifo(layout.home / ".lmstudio-home-pointer")
    folders = model_folders.folders_file()
    folders.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folders)
    return [
        f"Ollama manifest {deep}: is JSON nested too deeply to read.",
        f"Ollama manifest {tiny}: its template blob sha256-{'ef' * 32} is a FIFO, not a "
        "regular file, so it is listed without its template.",
        f"Skipped {layout.bad_file}: not a GGUF file (the first four bytes are not 'GGUF').",
    ]


@pytest.mark.timeout(60)  # a FIFO read with a blocking open would hang here
def test_a_hostile_store_is_one_sentence_per_bad_entry_and_the_rest_is_listed(
    cli_home: Home,
) -> None:
    sentences = make_hostile(cli_home)
    proc = run("models", "--json", "--folder", str(cli_home.added))
    assert proc.returncode == EXIT_OK, proc.stderr
    models = json.loads(proc.stdout)
    assert [(m["source"], m["name"]) for m in models] == [
        *LISTED[:2], ("Ollama", "tiny:latest"), *LISTED[2:]]  # the home's, and the new model
    assert (models[1]["ollama_template"], models[1]["ollama_parameters"]) == (TEMPLATE, PARAMS)
    assert models[2]["ollama_template"] is None
    assert sorted(proc.stderr.splitlines()) == sorted(sentences)


def test_text_groups_the_models_by_source(cli_home: Home) -> None:
    proc = run("models")
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = proc.stdout.splitlines()
    headers = [line for line in lines if not line.startswith(" ")]
    assert headers == ["LM Studio (1)", "Ollama (1)", "Hugging Face cache (1)",
                       "llama.cpp cache (1)"]  # fmt: skip
    assert "      gemma3 · 268 M parameters · Q4_K_M · 241.4 MiB · trained context 32,768" in lines


def test_nothing_found_says_where_it_looked(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("CONTEXTLENS_MODELS", str(tmp_path / "models"))
    proc = run("models")
    assert proc.returncode == EXIT_OK and proc.stderr == ""
    assert proc.stdout.startswith("No GGUF models found. Looked in:\n")
    assert f"  Ollama: {tmp_path / 'ollama'} (not there)" in proc.stdout
    assert json.loads(run("models", "--json").stdout) == []


def test_a_folder_that_is_not_there_is_one_sentence(tmp_path: Path) -> None:
    proc = run("models", "--folder", str(tmp_path / "nowhere"))
    assert proc.returncode == EXIT_BAD_INPUT
    assert_one_line_error(proc)
    assert proc.stderr == f"error: {tmp_path / 'nowhere'} is not a folder\n"
