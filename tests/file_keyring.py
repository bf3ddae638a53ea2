"""A keyring in a JSON file, for the CLI tests of `remote key` (no system keyring runs here).

Chosen by ``PYTHON_KEYRING_BACKEND=tests.file_keyring.FileKeyring`` with the file in
``$CONTEXTLENS_TEST_KEYRING``; it is registered nowhere else, so the app never picks it itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError


class FileKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    @property
    def _path(self) -> Path:
        return Path(os.environ["CONTEXTLENS_TEST_KEYRING"])

    def _entries(self) -> dict[str, str]:
        try:
            return json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._entries().get(f"{service}\n{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        entries = self._entries()
        entries[f"{service}\n{username}"] = password
        self._path.write_text(json.dumps(entries), encoding="utf-8")

    def delete_password(self, service: str, username: str) -> None:
        entries = self._entries()
        if entries.pop(f"{service}\n{username}", None) is None:
            raise PasswordDeleteError("no such password")
        self._path.write_text(json.dumps(entries), encoding="utf-8")
