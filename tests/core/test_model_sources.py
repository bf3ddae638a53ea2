"""Finding the GGUF models a person already has (app/core/model_sources.py), in a home laid out
as LM Studio, Ollama, the Hugging Face cache and llama.cpp leave it (tests/model_homes.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core import model_folders
from app.core.config import Config
from app.core.gguf_splits import group_files, split_name
from app.core.model_cards import CardCache
from app.core.model_sources import (
    OLLAMA_SERVICE_STORE,
    Discovery,
    FoundModel,
    Source,
    discover,
    gpt4all_roots,
    hf_cache_roots,
    jan_roots,
    llama_cpp_cache_roots,
    lm_studio_roots,
    ollama_roots,
    watch_folders,
)
from app.core.ollama_store import display_name
from tests.model_homes import PARAMS, TEMPLATE, TINY_PARAMS, Home, write_tiny_gguf

pytestmark = pytest.mark.unit


def find(home: Home, cards: CardCache | None = None) -> Discovery:
    return discover(home.own, [home.added], home=home.home, env=Config(), platform="linux",
                    cards=cards or CardCache())  # fmt: skip


def by_name(found: Discovery) -> dict[str, FoundModel]:
    names = [m.name for m in found.models]
    assert len(names) == len(set(names)), names
    return {m.name: m for m in found.models}


def test_each_model_is_found_once_with_its_source_name_and_card(layout: Home) -> None:
    found = find(layout)
    models = by_name(found)
    assert [(m.source, m.name) for m in found.models] == [
        (Source.LM_STUDIO, "bartowski/SmolLM2-GGUF/SmolLM2-135M-Instruct-Q4_1.gguf"),
        (Source.OLLAMA, "gemma3:270m"),
        (Source.HF_CACHE, "tiny-org/Tiny-GGUF/tiny-f32.gguf"),
        (Source.LLAMA_CPP_CACHE, "tiny-org_Tiny_cache.gguf"),
        (Source.ADDED, "big-00001-of-00003.gguf"),
        (Source.ADDED, "half/half-00001-of-00003.gguf"),
    ]
    smol = models["bartowski/SmolLM2-GGUF/SmolLM2-135M-Instruct-Q4_1.gguf"]
    assert (smol.family, smol.parameters, smol.quantization, smol.n_ctx_train) == (
        "llama", 134_515_008, "Q4_1", 8192)  # fmt: skip
    assert smol.path == layout.lm_studio_file
    assert smol.as_json()["found_in"] == str(layout.home / ".lmstudio" / "models")
    assert smol.file_size == layout.lm_studio_file.stat().st_size
    # the link to it in the added folder is the same file: listed once, under the first source
    assert smol.also_named == ("same-as-lm-studio.gguf",)
    cached = models["tiny-org_Tiny_cache.gguf"]
    assert (cached.family, cached.parameters, cached.quantization, cached.n_ctx_train) == (
        "llama", TINY_PARAMS, "F32", 4096)  # fmt: skip


def test_an_ollama_model_is_its_blob_with_the_manifests_template_and_parameters(
    layout: Home,
) -> None:
    gemma = by_name(find(layout))["gemma3:270m"]
    assert gemma.path == layout.ollama_blob and gemma.path.suffix == ""  # no .gguf: still loads
    assert (gemma.family, gemma.quantization, gemma.n_ctx_train) == ("gemma3", "Q4_K_M", 32768)
    assert gemma.ollama is not None
    assert gemma.ollama.template == TEMPLATE and gemma.ollama.parameters == PARAMS
    as_json = json.loads(json.dumps(gemma.as_json()))
    assert as_json["ollama_template"] == TEMPLATE and as_json["ollama_parameters"] == PARAMS


def test_ollama_names_are_shown_as_ollama_shows_them() -> None:
    assert display_name("registry.ollama.ai", "library", "llama3.2", "3b") == "llama3.2:3b"
    assert display_name("registry.ollama.ai", "jmorgan", "tiny", "latest") == "jmorgan/tiny:latest"
    assert display_name("hf.co", "bartowski", "x-GGUF", "Q4_K_M") == "hf.co/bartowski/x-GGUF:Q4_K_M"


def test_a_file_in_two_snapshots_of_the_hf_cache_is_listed_once(layout: Home) -> None:
    tiny = by_name(find(layout))["tiny-org/Tiny-GGUF/tiny-f32.gguf"]
    assert tiny.path.parent.name == "2222"  # the snapshot refs/main names comes first
    assert tiny.path.resolve() == layout.hf_blob.resolve() and tiny.also_named == ()


def test_a_split_is_one_model_and_one_with_a_part_missing_says_so(layout: Home) -> None:
    models = by_name(find(layout))
    split = models["big-00001-of-00003.gguf"]
    assert split.path == layout.split_first
    assert (split.parts, split.parts_present, split.loadable, split.note) == (3, 3, True, "")
    assert split.parameters == 3 * TINY_PARAMS
    parts = sorted(layout.added.glob("big-*.gguf"))
    assert split.file_size == sum(p.stat().st_size for p in parts)
    half = models["half/half-00001-of-00003.gguf"]
    assert (half.parts, half.parts_present, half.loadable) == (3, 2, False)
    assert half.note == "2 of 3 parts present"
    assert half.as_json()["note"] == "2 of 3 parts present"


def test_split_names_follow_llama_cpp() -> None:
    assert split_name(Path("m-00002-of-00010.gguf")) is not None
    assert split_name(Path("m-00000-of-00002.gguf")) is None  # parts count from 1
    assert split_name(Path("m-00003-of-00002.gguf")) is None
    assert split_name(Path("m.gguf")) is None
    groups = group_files([Path("a-00002-of-00002.gguf"), Path("b.gguf"),
                          Path("a-00001-of-00002.gguf")])  # fmt: skip
    assert [(g.first.name, g.count, g.complete) for g in groups] == [
        ("a-00001-of-00002.gguf", 2, True), ("b.gguf", 1, True)]  # fmt: skip


def test_a_file_that_is_not_a_gguf_is_one_sentence_and_nothing_else(layout: Home) -> None:
    found = find(layout)
    assert [p.path for p in found.problems] == [layout.bad_file]
    sentence = found.problems[0].sentence
    assert sentence.startswith(f"Skipped {layout.bad_file}: not a GGUF file")
    assert sentence.endswith(".") and "\n" not in sentence


def test_a_link_loop_is_walked_once(layout: Home) -> None:
    found = find(layout)
    assert not any("loop" in m.path.parts for m in found.models)
    assert sum(f.resolve() == layout.added.resolve() for f in found.folders) == 1


def test_headers_are_read_once_per_file_and_again_when_it_changes(
    layout: Home, tmp_path: Path
) -> None:
    cards = CardCache(tmp_path / "cards")
    find(layout, cards)
    first = cards.headers_read
    find(layout, cards)
    assert cards.headers_read == first  # all from memory
    fresh = CardCache(tmp_path / "cards")
    find(layout, fresh)
    assert fresh.headers_read == 0  # all from disk, in another process's place
    write_tiny_gguf(layout.llama_cache_file, "Tiny cached again", n_ctx=8192)
    again = by_name(find(layout, fresh))["tiny-org_Tiny_cache.gguf"]
    assert fresh.headers_read == 1 and again.n_ctx_train == 8192


def test_adapters_projectors_and_vocabularies_are_not_models(tmp_path: Path) -> None:
    folder = tmp_path / "added"
    write_tiny_gguf(folder / "model.gguf", "A model")
    from gguf import GGUFWriter  # noqa: PLC0415 (only this test writes such files)

    for name, general_type in (("lora.gguf", "adapter"), ("mmproj.gguf", "mmproj")):
        writer = GGUFWriter(str(folder / name), "llama")
        writer.add_type(general_type)
        writer.add_tensor("x.weight", __import__("numpy").ones((4, 8), "float32"))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    found = discover(tmp_path / "none", [folder], home=tmp_path / "home", env=Config(),
                     platform="linux", cards=CardCache())  # fmt: skip
    assert [m.name for m in found.models] == ["model.gguf"] and found.problems == ()


def test_nothing_found_is_an_empty_list_that_says_where_it_looked(tmp_path: Path) -> None:
    found = discover(tmp_path / "models", home=tmp_path, env=Config(), platform="linux",
                     cards=CardCache())  # fmt: skip
    assert found.models == () and found.problems == ()
    assert {p.source for p in found.places} == set(Source) - {Source.ADDED}


def test_watch_folders_are_the_places_there_and_the_folders_read(layout: Home) -> None:
    found = find(layout)
    watched = watch_folders(found)
    assert watched[0] == layout.own  # the places first
    assert layout.lm_studio_file.parent in watched  # where LM Studio puts a repo's next file
    assert layout.ollama_store / "manifests" / "registry.ollama.ai" / "library" in watched
    assert layout.hf_cache / "models--tiny-org--Tiny-GGUF" / "snapshots" in watched  # a new rev
    assert len(watch_folders(found, limit=3)) == 3


def test_each_platform_looks_where_its_programs_keep_models(tmp_path: Path) -> None:
    home = tmp_path
    none = Config()
    assert lm_studio_roots(home, none, "win32") == [home / ".lmstudio" / "models",
                                                    home / ".cache" / "lm-studio" / "models"]
    (home / ".lmstudio-home-pointer").write_text(str(tmp_path / "elsewhere") + "\n")
    assert lm_studio_roots(home, none, "linux")[0] == tmp_path / "elsewhere" / "models"
    assert ollama_roots(home, none, "linux") == [home / ".ollama" / "models",
                                                 OLLAMA_SERVICE_STORE]  # fmt: skip
    assert ollama_roots(home, none, "darwin") == [home / ".ollama" / "models"]
    assert ollama_roots(home, Config(ollama_models=tmp_path / "o"), "linux") == [tmp_path / "o"]
    assert hf_cache_roots(home, none, "darwin") == [home / ".cache" / "huggingface" / "hub"]
    assert hf_cache_roots(home, Config(hf_home=tmp_path / "h"), "linux") == [tmp_path / "h" / "hub"]
    assert hf_cache_roots(home, Config(hf_home=tmp_path / "h", hf_hub_cache=tmp_path / "c"),
                          "linux") == [tmp_path / "c"]  # fmt: skip
    assert hf_cache_roots(home, Config(xdg_cache_home=tmp_path / "x"), "linux") == [
        tmp_path / "x" / "huggingface" / "hub"]  # fmt: skip
    assert llama_cpp_cache_roots(home, none, "linux") == [home / ".cache" / "llama.cpp"]
    assert llama_cpp_cache_roots(home, none, "darwin") == [home / "Library/Caches/llama.cpp"]
    assert llama_cpp_cache_roots(home, Config(local_app_data=tmp_path / "L"), "win32") == [
        tmp_path / "L" / "llama.cpp"]  # fmt: skip
    assert llama_cpp_cache_roots(home, Config(llama_cache=tmp_path / "lc"), "darwin") == [
        tmp_path / "lc"]  # fmt: skip
    assert gpt4all_roots(home, none, "linux") == [home / ".local/share/nomic.ai/GPT4All"]
    assert gpt4all_roots(home, none, "darwin") == [
        home / "Library/Application Support/nomic.ai/GPT4All"]  # fmt: skip
    assert gpt4all_roots(home, Config(local_app_data=tmp_path / "L"), "win32") == [
        tmp_path / "L" / "nomic.ai" / "GPT4All"]  # fmt: skip
    assert jan_roots(home, Config(app_data=tmp_path / "R"), "win32")[0] == (
        tmp_path / "R" / "Jan" / "data" / "llamacpp" / "models")  # fmt: skip
    assert jan_roots(home, none, "linux")[-1] == home / "jan" / "models"


def test_gpt4all_and_jan_models_are_found_in_their_folders(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_tiny_gguf(home / ".local/share/nomic.ai/GPT4All/tiny-chat.gguf", "GPT4All tiny")
    write_tiny_gguf(home / ".local/share/Jan/data/llamacpp/models/org/tiny/model.gguf", "Jan")
    found = discover(tmp_path / "models", home=home, env=Config(), platform="linux",
                     cards=CardCache())  # fmt: skip
    assert [(m.source, m.name) for m in found.models] == [
        (Source.GPT4ALL, "tiny-chat.gguf"), (Source.JAN, "org/tiny")]  # fmt: skip


def test_added_folders_are_remembered_in_a_small_file(tmp_path: Path) -> None:
    file = tmp_path / "cfg" / "model-folders.json"
    assert model_folders.load_folders(file) == []
    model_folders.add_folder(tmp_path / "a", file)
    model_folders.add_folder(tmp_path / "b", file)
    assert model_folders.add_folder(tmp_path / "a", file) == [tmp_path / "a", tmp_path / "b"]
    assert model_folders.remove_folder(tmp_path / "a", file) == [tmp_path / "b"]
    file.write_text("{not json")
    assert model_folders.load_folders(file) == []  # a bad file is no folders, not a crash
