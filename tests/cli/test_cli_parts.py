"""The command line's parts that need no cluster: the state files, the ZooKeeper credentials
file, the progress bar, tables."""

from __future__ import annotations

import io
import re
import stat
from pathlib import Path

import pytest

from rafka.cli.commands import state
from rafka.cli.commands.errors import CliError
from rafka.cli.commands.output import key_values, table
from rafka.cli.commands.progress import Progress, wait_with_spinner
from rafka.coordination.security import load_credentials_file
from tests.support.cli import exit_code_in_process


@pytest.fixture
def rafka_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAFKA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_state_is_found_by_name_and_by_data_dir(rafka_home: Path, tmp_path: Path) -> None:
    recorded = state.ClusterState(name="prod", zk="127.0.0.1:2181", ray_address="10.0.0.1:6379",
                                  data_dir=str(tmp_path / "data"), brokers=3,
                                  zookeeper={"pid": 1, "data_dir": "x"})
    path = recorded.save()
    assert path == tmp_path / "data" / "cluster.json"
    assert state.pointer_path("prod") == rafka_home / "clusters" / "prod.json"
    assert state.load("prod") == recorded
    assert state.load("anything", tmp_path / "data") == recorded
    assert state.load("other") is None
    recorded.remove()
    assert state.load("prod") is None
    assert not state.pointer_path("prod").exists()


def test_removing_a_state_keeps_another_clusters_pointer(rafka_home: Path, tmp_path: Path) -> None:
    old = state.ClusterState("c", "h:1", "a:1", str(tmp_path / "old"), 1)
    old.save()
    new = state.ClusterState("c", "h:2", "a:2", str(tmp_path / "new"), 1)
    new.save()  # the name now points at the new data dir
    old.remove()
    assert state.load("c") == new


def test_default_data_dir_is_under_rafka_home(rafka_home: Path) -> None:
    assert state.default_data_dir("x") == rafka_home / "x"


def test_which_zookeeper_credentials_file(rafka_home: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAFKA_ZK_CREDENTIALS_FILE", raising=False)
    assert state.zk_credentials_file(None) is None, "no file anywhere: no credentials"
    default = rafka_home / "zookeeper-credentials"
    default.parent.mkdir(parents=True)
    default.touch()
    assert state.zk_credentials_file(None) == default, "the default file, once it exists"
    monkeypatch.setenv("RAFKA_ZK_CREDENTIALS_FILE", "/etc/rafka/zk")
    assert state.zk_credentials_file(None) == Path("/etc/rafka/zk")
    assert state.zk_credentials_file(None, "/recorded") == Path("/recorded")
    assert state.zk_credentials_file("/given", "/recorded") == Path("/given")


def test_zookeeper_credentials_generate(rafka_home: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAFKA_ZK_CREDENTIALS_FILE", raising=False)
    assert exit_code_in_process(["zookeeper", "credentials", "--generate"]) == 0
    path = rafka_home / "zookeeper-credentials"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = load_credentials_file(path)
    assert first.user == "rafka"
    assert first.password not in capsys.readouterr().out, "the password is never printed"
    assert exit_code_in_process(["zookeeper", "credentials", "--generate"]) == 1
    assert "exists already" in capsys.readouterr().err and load_credentials_file(path) == first
    assert exit_code_in_process(["zookeeper", "credentials", "--generate", "--force"]) == 0
    assert load_credentials_file(path) != first
    other = rafka_home / "elsewhere" / "zk"
    assert exit_code_in_process(["zookeeper", "credentials", "--generate", "--file", str(other),
                                 "--user", "ops"]) == 0
    assert load_credentials_file(other).user == "ops"
    assert exit_code_in_process(["zookeeper", "credentials", "--file", str(other)]) == 0
    assert "user 'ops'" in capsys.readouterr().out
    other.chmod(0o644)
    assert exit_code_in_process(["zookeeper", "credentials", "--file", str(other)]) == 1
    assert f"chmod 600 {other}" in capsys.readouterr().err


def test_progress_bar_draws_on_the_stream_it_is_given() -> None:
    stream = io.StringIO()
    with Progress("producing", total=200, unit="records", enabled=True, stream=stream) as bar:
        bar.update(120)
        bar.update(80)
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())  # colours, cursor
    assert "producing" in drawn and "100%" in drawn
    assert "200/200 records" in drawn
    assert bar.count == 200


def test_progress_is_silent_off_a_terminal() -> None:
    stream = io.StringIO()  # isatty() is False
    with Progress("x", enabled=None, stream=stream) as bar:
        bar.update(5)
    assert stream.getvalue() == ""
    assert wait_with_spinner("waiting", lambda: 42, stream=stream) == 42
    assert stream.getvalue() == ""
    assert wait_with_spinner("waiting", lambda: 1, stream=stream, announce=True) == 1
    assert stream.getvalue() == "waiting ...\n"


def test_key_values_and_tables() -> None:
    assert key_values(["a=1", " b = x=y "], "--config") == {"a": "1", "b": "x=y"}
    with pytest.raises(CliError) as raised:
        key_values(["novalue"], "--config")
    assert raised.value.exit_code == 2
    assert table(["A", "BB"], [[1, [2, 3]], [None, "x"]]).splitlines() == [
        "A  BB", "1  2,3", "-  x"]
