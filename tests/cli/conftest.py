"""Running `rafka` as a user does: a subprocess with its own HOME and RAFKA_HOME.

The pytest process may hold an in-process Ray of other tests (tests/conftest.py); these tests
never connect to it nor to the Ray heads they start: everything goes through subprocesses, whose
environment drops the RAY_ADDRESS that the in-process Ray exports.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

RAFKA = [sys.executable, "-m", "actors.cli"]
# What would point a subprocess at some other cluster than the test's own.
_DROPPED = ("RAY_ADDRESS", "RAFKA_CLUSTER", "RAFKA_ZK", "RAFKA_HOME", "RAY_AUTH_MODE")


class Rafka:
    """`rafka(*args, input=...)` runs the command line and returns the finished process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        home = root / "home"
        home.mkdir(parents=True, exist_ok=True)
        self.env = {key: value for key, value in os.environ.items() if key not in _DROPPED}
        self.env.update(HOME=str(home), RAFKA_HOME=str(root / "rafka-home"),
                        PYTHONUNBUFFERED="1")

    def __call__(self, *args: str, input: str | bytes | None = None, timeout: float = 120,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        text = not isinstance(input, bytes)
        result = subprocess.run(
            [*RAFKA, *args], input=input, capture_output=True, text=text, timeout=timeout,
            cwd=self.root, env={**self.env, **(env or {})},
        )
        if not text:
            result.stdout = result.stdout.decode("utf-8", "replace")
            result.stderr = result.stderr.decode("utf-8", "replace")
        return result


@pytest.fixture(scope="session")
def rafka_factory() -> Callable[[Path], Rafka]:
    return Rafka


@pytest.fixture
def rafka(tmp_path: Path) -> Rafka:
    return Rafka(tmp_path)


def assert_clean_error(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    """An expected error: its exit code, a message on stderr, and no Python traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


@pytest.fixture(scope="session")
def expect_error() -> Callable[..., None]:
    return assert_clean_error
