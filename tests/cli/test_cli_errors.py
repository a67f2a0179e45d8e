"""The usual mistakes, made as a user makes them: one clear message, an exit code, no traceback.

None of these needs a cluster; the ones that would start something check first and start nothing,
and an `up` that fails half-way stops what it had started.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rafka.actors.cluster import Cluster
from rafka.actors.stack import session_members
from rafka.coordination.embedded import wait_for_exit
from tests.support.cli import exit_code_in_process


def test_help_lists_every_command(rafka) -> None:
    # The console script next to this Python, as installed by `pip install -e .`.
    script = Path(sys.executable).with_name("rafka")
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True,
                            timeout=60, env=rafka.env, check=False)
    assert result.returncode == 0, result.stderr
    for command in ("up", "down", "status", "topics", "produce", "consume", "groups", "bench",
                    "demo"):
        assert f"    {command}" in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["topics"], "ACTION"),
        (["produce", "--name", "nothing-here"], "which topic?"),
        (["consume", "t", "--offset", "3"], "--offset needs --partition"),
        (["topics", "create", "t", "--config", "no-equals-sign"], "key=value"),
        (["up", "--name", "bad name"], "not allowed"),
        (["produce", "t", "--property", "parse.keys=true"], "unknown --property parse.keys"),
        (["up", "--zk", "nonsense"], "is not 'host:port'"),
        (["up", "--listeners", "SSL://127.0.0.1:0"], "set ssl.keystore.location"),
        (["up", "--listeners", "SASL_SSL://127.0.0.1:0"], "set ssl.keystore.location"),
        (["up", "--listeners", "EXTERNAL://127.0.0.1:0"], "listener.security.protocol.map"),
        (["up", "--listeners", "PLAINTEXT://h:1,PLAINTEXT://h:2"], "PLAINTEXT repeats"),
        (["up", "--listeners", "PLAINTEXT://h:65535", "--brokers", "2"], "leave room"),
        (["up", "--kafka-port", "0", "--listeners", "PLAINTEXT://h:0"], "give one"),
        # Topic names and numbers a cluster would refuse are refused before connecting to one.
        (["topics", "create", "../etc"], "contains '/'"),
        (["topics", "create", "ok", "--partitions", "0"], "--partitions must be at least 1"),
        (["topics", "create", "ok", "--replication-factor", "-1"], "--replication-factor"),
        (["topics", "create", "ok", "--partitions", "many"], "invalid int value: 'many'"),
        (["topics", "describe", ".."], "must not be '.' or '..'"),
        (["topics", "delete", "x" * 250], "is 250 characters long"),
        (["topics", "alter", "a\\b", "--partitions", "3"], "contains '\\\\'"),
        (["produce", "caf\u00e9"], "contains"),
        (["produce", "ok", "--partition", "-1"], "--partition must be at least 0"),
        (["consume", ""], "must not be empty"),
        (["consume", "a b"], "contains ' '"),
        (["consume", "ok", "--partition", "-3"], "--partition must be at least 0"),
        (["consume", "ok", "--max-messages", "-1"], "--max-messages must be at least 0"),
        (["consume", "ok", "--timeout-ms", "-5"], "--timeout-ms must be at least 0"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # In this process (they fail before any connection): argparse's own exit, or our code 2.
    monkeypatch.setenv("RAFKA_HOME", str(tmp_path))
    assert exit_code_in_process(argv) == 2
    assert needle in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "a usage error starts nothing"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["topics", "create", "../../etc/passwd"], "a topic name is 1 to 249 characters"),
        (["produce", "orders/2024", "--partition", "0"], "contains '/'"),
        (["consume", "orders", "--partition", "-1"], "--partition must be at least 0"),
        (["users", "create", "--user", "alice", "--password", "p", "--iterations", "10"],
         "iterations must be between 4096 and 16384"),
    ],
)
def test_bad_names_and_numbers_as_a_user_types_them(rafka, argv: list[str], needle: str) -> None:
    # As a subprocess, with no cluster anywhere: one line that says what is allowed, exit 2.
    result = rafka(*argv, input="a record\n")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rafka: error:"), result.stderr
    assert needle in lines[0], result.stderr
    assert not any(rafka.root.rglob("cluster.json")), "nothing must be started"


def test_no_java_names_the_package_to_install(rafka, expect_error) -> None:
    env = {"PATH": "/nonexistent", "JAVA_HOME": ""}
    result = rafka("up", "--brokers", "1", env=env)
    expect_error(result, 1, "default-jre-headless", "JAVA_HOME")
    assert not any(rafka.root.rglob("cluster.json")), "nothing must be started"


def test_unreachable_zookeeper(rafka, expect_error) -> None:
    expect_error(rafka("up", "--zk", "127.0.0.1:1"), 1, "ZooKeeper does not answer at 127.0.0.1:1")
    expect_error(rafka("topics", "list", "--zk", "127.0.0.1:1"), 1, "ZooKeeper does not answer")


def test_no_ray_at_address(rafka, expect_error) -> None:
    result = rafka("up", "--address", "127.0.0.1:1")
    expect_error(result, 1, "no Ray cluster answers at 127.0.0.1:1", "ray start --head")
    assert not any(rafka.root.rglob("cluster.json")), "nothing must be started"


def test_commands_without_a_cluster(rafka, expect_error) -> None:
    down = rafka("down")
    assert down.returncode == 0, down.stderr
    assert "nothing to stop" in down.stderr
    expect_error(rafka("status"), 1, "no rafka cluster named 'rafka' is up", "rafka up")
    expect_error(rafka("topics", "list", "--name", "other"), 1, "'other'")


def test_broker_placement_needs_cluster_support(rafka, expect_error) -> None:
    result = rafka("up", "--broker-resource", "rafka_broker", "--address", "127.0.0.1:1")
    if "broker_resources" in inspect.signature(Cluster.start).parameters:
        expect_error(result, 1, "no Ray cluster answers")  # supported: the next check fails
    else:
        expect_error(result, 2, "broker_resources")


@pytest.mark.cluster  # it starts ZooKeeper and a Ray head, then stops them
def test_a_failed_up_leaves_nothing_running(rafka, expect_error) -> None:
    data_dir = rafka.root / "data"
    result = rafka("up", "--brokers", "1", "--timeout", "0.01", "--data-dir", str(data_dir),
                   timeout=240)
    expect_error(result, 1, "did not start within 0.01 s", "stopped what this `rafka up`")
    pids = [int(pid) for pid in re.findall(r"\(pid (\d+)\)", result.stderr)]
    assert len(pids) == 2, result.stderr  # ZooKeeper's and the Ray head's
    for pid in pids:
        assert wait_for_exit(pid, 30), f"pid {pid} started by the failed up is still running"
    assert session_members(pids[1]) == []
    assert not (data_dir / "cluster.json").exists()
    assert rafka("down").stderr.count("nothing to stop") == 1
