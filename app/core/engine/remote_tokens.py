"""Token counts from an inference server: its own tokenizer over HTTP (:class:`ServerTokenizer`),
exact counts for planning, several requests at once (:class:`RemoteCounter`), the texts prompts
were made from for servers that take text only (:class:`TextMemo`), and where a local GGUF's
encoding and the server's disagree (:func:`same_tokens`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from app.core.engine.remote_http import Client, ServerError
from app.core.tokens import TiktokenCounter, probe_text, scrub

COUNT_WORKERS = 8  # token counts asked of the server at once


def _map_in_daemons(count: Callable[[str], int], texts: Sequence[str], workers: int) -> list[int]:
    """``count`` over ``texts`` on up to ``workers`` daemon threads, in order; the first error
    is raised. Not a ThreadPoolExecutor: its threads are joined when the interpreter exits, so a
    request left waiting on a hung server held a finished batch's exit for its whole reply
    timeout."""
    results: list[int] = [0] * len(texts)
    errors: list[BaseException] = []
    next_index = iter(range(len(texts)))
    lock = threading.Lock()

    def work() -> None:
        while not errors:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            try:
                results[i] = count(texts[i])
            except BaseException as exc:  # handed to the caller's thread
                errors.append(exc)

    threads = [threading.Thread(target=work, name="remote-count", daemon=True)
               for _ in range(min(workers, len(texts)))]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


class ServerTokenizer:
    """The server's own tokenizer over HTTP (exact by definition)."""

    def __init__(self, client: Client, kind: str, model: str) -> None:
        self._client, self._kind, self._model = client, kind, model
        # what the model puts in front of a prompt (its BOS, for models that add one)
        self.bos: tuple[int, ...] = ()

    def probe(self) -> bool:
        """Whether the endpoint answers; learns the tokens the model adds to an empty text."""
        try:
            self.bos = tuple(self._call("", True, add_special=True))
        except ServerError:
            return False
        return True

    @property
    def endpoint(self) -> str:
        return "/extras/tokenize" if self._kind == "llama-cpp-python" else "/tokenize"

    def _call(self, text: str, special: bool, *, add_special: bool = False) -> list[int]:
        if self._kind == "llama-cpp-python":  # always adds the BOS and parses special tokens
            body: dict[str, Any] = {"input": text, "model": self._model}
        elif self._kind == "vllm":
            body = {"model": self._model, "prompt": text, "add_special_tokens": add_special}
        else:
            body = {"content": text, "add_special": add_special, "parse_special": special}
        data = self._client.post_json(self.endpoint, body, "a request to count tokens")
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ServerError(f"{self._client.host} answered {self.endpoint} without token ids")
        return tokens

    def encode(self, text: str, special: bool) -> list[int]:
        """The tokens of ``text`` alone (no BOS)."""
        tokens = self._call(text, special)
        if (
            self._kind == "llama-cpp-python"
            and self.bos
            and tokens[: len(self.bos)] == list(self.bos)
        ):
            tokens = tokens[len(self.bos) :]
        return tokens

    def decode(self, ids: Sequence[int]) -> str:
        if self._kind == "llama-cpp-python":
            body = {"tokens": list(ids), "model": self._model}
            path, key = "/extras/detokenize", "text"
        elif self._kind == "vllm":
            path, body, key = "/detokenize", {"model": self._model, "tokens": list(ids)}, "prompt"
        else:
            path, body, key = "/detokenize", {"tokens": list(ids)}, "content"
        data = self._client.post_json(path, body, "a request to turn tokens into text")
        text = data.get(key) if isinstance(data, dict) else None
        if not isinstance(text, str):
            raise ServerError(f"{self._client.host} answered {path} without text")
        return text


class RemoteCounter:
    """Exact counts from the server's tokenizer, several requests at once (for planning)."""

    splits_at_spaces = False
    exact = True

    def __init__(self, tokenizer: ServerTokenizer, name: str) -> None:
        self._tokenizer = tokenizer
        self.name = name
        self.fingerprint: str | None = None  # the server's tokenizer may change: never cached

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(scrub(text), False)

    def count(self, text: str) -> int:
        return len(self.encode(text)) if text else 0

    def count_many(self, texts: Sequence[str]) -> list[int]:
        if len(texts) < 2:
            return [self.count(t) for t in texts]
        return _map_in_daemons(self.count, texts, COUNT_WORKERS)

    def count_special(self, text: str) -> int:
        return len(self._tokenizer.encode(scrub(text), True)) if text else 0


class TextMemo:
    """The text each token sequence was made from, for servers that take prompts as text only
    and whose detokenizer drops special tokens (llama-cpp-python's renders none): a prompt is
    put back together from the texts of the pieces it was built of, and only a stretch that
    matches none is asked of the server."""

    MAX_SEQUENCES = 200_000

    def __init__(self) -> None:
        self._by_first: dict[int, dict[tuple[int, ...], str]] = {}
        self._count = 0
        self._lock = threading.Lock()

    def remember(self, ids: Sequence[int], text: str) -> None:
        if not ids:
            return
        with self._lock:
            if self._count >= self.MAX_SEQUENCES:
                self._by_first.clear()
                self._count = 0
            known = self._by_first.setdefault(ids[0], {})
            if tuple(ids) not in known:
                known[tuple(ids)] = text
                self._count += 1

    def text(self, ids: Sequence[int], decode: Callable[[Sequence[int]], str]) -> str:
        """The text of ``ids``: remembered pieces, longest first, and ``decode`` between them."""
        parts: list[str] = []
        unknown_from = None
        i, n = 0, len(ids)
        with self._lock:
            snapshot = {k: sorted(v.items(), key=lambda kv: -len(kv[0]))
                        for k, v in self._by_first.items()}  # fmt: skip
        while i < n:
            match = None
            for seq, text in snapshot.get(ids[i], ()):
                if tuple(ids[i : i + len(seq)]) == seq:
                    match = (seq, text)
                    break
            if match is None:
                unknown_from = i if unknown_from is None else unknown_from
                i += 1
                continue
            if unknown_from is not None:
                parts.append(decode(ids[unknown_from:i]))
                unknown_from = None
            parts.append(match[1])
            i += len(match[0])
        if unknown_from is not None:
            parts.append(decode(ids[unknown_from:]))
        return "".join(parts)


def same_tokens(local: TiktokenCounter, server: ServerTokenizer) -> str | None:
    """Where the local GGUF's encoding and the server's tokenizer disagree, or None. Special
    tokens are parsed on both sides: servers parse them in the text of a prompt (llama-cpp-
    python's cannot do otherwise), so that is what a prompt sent as text becomes."""
    text = probe_text()
    for piece in [*text.splitlines(keepends=True)[:40], text]:
        mine, theirs = local.encode_special(piece), server.encode(piece, True)
        if mine != theirs:
            return f"on {piece[:40]!r}: {mine[:12]} here, {theirs[:12]} on the server"
    return None
