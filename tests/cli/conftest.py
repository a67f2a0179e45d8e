"""Fixtures of the command-line tests: `rafka` run as a user does, in a subprocess with its own
HOME and RAFKA_HOME (tests/support/cli.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import Rafka, assert_clean_error


@pytest.fixture(scope="session")
def rafka_factory() -> Callable[[Path], Rafka]:
    return Rafka


@pytest.fixture
def rafka(tmp_path: Path) -> Rafka:
    return Rafka(tmp_path)


@pytest.fixture(scope="session")
def expect_error() -> Callable[..., None]:
    return assert_clean_error
