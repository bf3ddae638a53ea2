"""``contextlens-cli models``: the GGUF models this machine has, wherever they were put."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK, fail
from app.core.textutil import terminal_safe

JSON_HELP = """\
--json prints one JSON list, an object per model:
  source          where it was found: ContextLens, LM Studio, Ollama, Hugging Face cache,
                  llama.cpp cache, GPT4All, Jan, Added folder
  name            its name there (Ollama's llama3.2:3b; org/repo/file.gguf in the HF cache)
  path            the file llama.cpp opens (a split's first part; an Ollama blob has no
                  extension); pass it to --model
  family          general.architecture (llama, gemma3, qwen2 ...)
  parameters      the weights' element count (summed over a split's parts present)
  quantization    the file type (Q4_K_M ...)
  file_size       bytes (summed over a split's parts present)
  n_ctx_train     the context length it was trained on, or null
  parts           the files the model is made of (1, or a split's count)
  parts_present   how many of them are there
  loadable        false when parts are missing
  note            "2 of 3 parts present", or ""
  found_in        the folder it was found in (a models folder, an Ollama store, a cache)
  gguf_name       general.name, or null
  also_named      the same file's other names (another Ollama tag, a link elsewhere)
  ollama_template, ollama_parameters, ollama_system
                  Ollama only (else null): the manifest's Go chat template, its parameters
                  (a JSON object: stop, temperature ...) and its system prompt
Files that are not readable GGUF models are skipped, one sentence each on stderr.
Exit codes: 0 listed (even when nothing was found), 2 a --folder that is not a folder."""


def _describe(model: Any) -> str:
    from app.services.model_library import count_text, size_text

    parts = [model.family, f"{count_text(model.parameters)} parameters", model.quantization,
             size_text(model.file_size)]  # fmt: skip
    if model.n_ctx_train:
        parts.append(f"trained context {model.n_ctx_train:,}")
    if model.note:
        parts.append(f"{model.note}: cannot be loaded")
    return " · ".join(p for p in parts if p)


def _say(line: str) -> None:
    """One line of the listing: names, paths and header fields are someone else's words, so
    their control characters are escaped (a model's architecture set the terminal's title)."""
    print(terminal_safe(line))


def _print_text(found: Any) -> None:
    groups = found.by_source()
    if not groups:
        _say("No GGUF models found. Looked in:")
        for place in found.places:
            there = "" if place.folder.is_dir() else " (not there)"
            _say(f"  {place.source}: {place.folder}{there}")
        return
    for source, models in groups.items():
        _say(f"{source} ({len(models)})")
        for model in models:
            _say(f"  {model.name}")
            _say(f"      {_describe(model)}")
            _say(f"      {model.path}")
            if model.also_named:
                _say(f"      also named {', '.join(model.also_named)}")


def cmd_models(args: argparse.Namespace) -> int:
    from app.services.errors import BadRequest
    from app.services.model_library import find_models

    try:
        found = find_models(extra_folders=args.folder or ())
    except BadRequest as exc:
        return fail(EXIT_BAD_INPUT, str(exc), args.json)
    if args.json:
        print(json.dumps([m.as_json() for m in found.models], indent=2, ensure_ascii=False))
    else:
        _print_text(found)
    for problem in found.problems:
        print(terminal_safe(problem.sentence), file=sys.stderr)
    return EXIT_OK


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "models",
        help="list the GGUF models on this machine (ContextLens, LM Studio, Ollama, caches …)",
        description="List the GGUF models found in ContextLens's models folder, LM Studio, "
        "Ollama, the Hugging Face and llama.cpp caches, GPT4All, Jan and the folders added "
        "in the window. Nothing is copied or moved.",
        epilog=JSON_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print a JSON list (fields below)")
    p.add_argument("--folder", action="append", metavar="DIR",
                   help="look in DIR too (repeatable; for this listing only)")  # fmt: skip
    p.set_defaults(func=cmd_models)
