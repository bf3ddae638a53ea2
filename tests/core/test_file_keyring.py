"""The tests' file keyring (tests/file_keyring.py) reaches no test that did not choose it."""

from __future__ import annotations

import os
import subprocess
import sys

from app.core.credentials import ENV_KEY


def _without_keys() -> dict[str, str]:
    """This environment less any keyring or key the suite's runner was given."""
    held = ("CONTEXTLENS_TEST_KEYRING", "PYTHON_KEYRING_BACKEND", ENV_KEY)
    return {k: v for k, v in os.environ.items() if k not in held}


def test_the_file_keyring_stays_out_of_the_chain_of_a_process_that_imported_it() -> None:
    """Importing tests/file_keyring.py registers its class with keyring; a later test of the same
    worker that reads a key through the default chain (a pool's batch) must get no key, not a
    KeyError for the file's missing variable (a CI run failed so, by the order of its tests)."""
    script = ("import tests.file_keyring\n"
              "from app.core.credentials import api_key\n"
              "print(api_key('http://127.0.0.1:9'))\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], env=_without_keys(),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


def test_the_keyring_in_use_before_the_file_is_the_one_after_it() -> None:
    """In a fresh process, keyring chooses its default on first use: choosing it inside the block
    would make the file's the default for every later test of that worker."""
    script = ("import keyring, pathlib, pytest\n"
              "from tests.file_keyring import chosen\n"
              "with pytest.MonkeyPatch.context() as mp, chosen(pathlib.Path('k'), mp):\n"
              "    pass\n"
              "print(type(keyring.get_keyring()).__name__)\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], env=_without_keys(),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() not in ("", "FileKeyring")
