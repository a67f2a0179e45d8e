"""The ZooKeeper credentials file: one line `user:password`, mode 0600, refused otherwise with a
message that says what to do and never shows the password. Pure: files only, no ZooKeeper."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rafka.coordination.errors import CredentialsFileError
from rafka.coordination.security import (
    ClusterCredentials,
    generate_credentials,
    load_credentials_file,
    write_credentials_file,
)


def _file(tmp_path: Path, content: str, mode: int = 0o600) -> Path:
    path = tmp_path / "zookeeper-credentials"
    path.write_text(content)
    path.chmod(mode)
    return path


def test_a_private_file_of_one_line_loads(tmp_path: Path) -> None:
    path = _file(tmp_path, "rafka:pa:ss\n")
    assert load_credentials_file(path) == ClusterCredentials("rafka", "pa:ss")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_file_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = _file(tmp_path, "rafka:s3cret\n", mode)
    with pytest.raises(CredentialsFileError, match=f"chmod 600 {path}") as raised:
        load_credentials_file(path)
    assert f"mode {mode:04o}" in str(raised.value)
    assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "is empty"),
        ("\n  \n", "is empty"),
        ("rafka-s3cret\n", "user:password"),
        (":s3cret\n", "must be non-empty"),
        ("rafka:\n", "password must not be empty"),
        ("rafka:s3cret\nother:s3cret\n", "holds 2 lines"),
    ],
)
def test_an_empty_or_malformed_file_is_refused(tmp_path: Path, content: str, needle: str) -> None:
    path = _file(tmp_path, content)
    with pytest.raises(CredentialsFileError, match=needle) as raised:
        load_credentials_file(path)
    assert str(path) in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_a_missing_file_says_where_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(CredentialsFileError, match="rafka zookeeper credentials --generate"):
        load_credentials_file(tmp_path / "absent")


def test_written_files_are_private_from_the_start_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "home" / "zookeeper-credentials"
    first = generate_credentials()
    previous_umask = os.umask(0)  # the most permissive umask: the file must stay 0600
    try:
        write_credentials_file(path, first)
    finally:
        os.umask(previous_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_credentials_file(path) == first
    assert first.user == "rafka" and len(first.password) >= 40
    second = generate_credentials("ops")
    assert second.password != first.password
    with pytest.raises(FileExistsError):
        write_credentials_file(path, second)
    assert load_credentials_file(path) == first
    write_credentials_file(path, second, overwrite=True)
    assert load_credentials_file(path) == second
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [entry.name for entry in path.parent.iterdir()] == [path.name], "no temporary left"
