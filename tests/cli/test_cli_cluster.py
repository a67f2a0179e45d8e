"""One cluster brought up with `rafka up` and taken down with `rafka down`, every command run
against it as a user runs it (a subprocess), checked by its output and exit code.

The cluster is local and the test's own: an embedded ZooKeeper, a Ray head on free ports, two
brokers (to save CPU), a temporary data dir, HOME and RAFKA_HOME. `rafka down` always runs; the
last test checks that the processes `up` started (their recorded PIDs) are gone.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rafka.actors.cluster import Cluster
from rafka.actors.stack import RayHead, session_members
from rafka.coordination.embedded import is_embedded_server, wait_for_exit
from tests.support.cli import RAFKA, rafka_up
from tests.support.waiting import wait_until

# `rafka up` starts an embedded ZooKeeper and a Ray head in subprocesses.
pytestmark = pytest.mark.cluster

NAME = "clitest"


@dataclass
class Up:
    rafka: Any
    state: dict[str, Any]
    data_dir: Path
    output: str


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, rafka_factory) -> Iterator[Up]:
    root = tmp_path_factory.mktemp("rafka-cli")
    rafka = rafka_factory(root)
    # A Ray temp dir of its own (short: Ray's socket paths must fit in 107 bytes), so that the
    # pointer `ray start` writes there is this test's alone to check.
    ray_temp = Path(tempfile.mkdtemp(prefix="rafka-ray-", dir="/tmp"))
    rafka.env["RAY_TMPDIR"] = str(ray_temp)
    try:
        with rafka_up(rafka, NAME, root / "data", 2, "--kafka-port", "0") as (result, state):
            yield Up(rafka, state, root / "data", result.stdout)
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)


def _ray_pointer(up: Up) -> Path:
    return Path(up.rafka.env["RAY_TMPDIR"]) / "ray" / "ray_current_cluster"


def test_up_leaves_a_cluster_that_outlives_it(up: Up) -> None:
    assert f"rafka cluster '{NAME}' is up: 2 broker(s)" in up.output
    # `up` has exited; what it started runs on, recorded for `down`.
    assert is_embedded_server(up.state["zookeeper"]["pid"], up.state["zookeeper"]["data_dir"])
    head = up.state["ray_head"]
    assert RayHead.is_head(head["pid"], head["address"])
    assert up.state["ray_address"] == head["address"]
    # `ray start` points this machine's ray.init() at the head while it runs, as Ray does.
    assert _ray_pointer(up).read_text().strip() == head["address"]
    pointer = Path(up.rafka.env["RAFKA_HOME"]) / "clusters" / f"{NAME}.json"
    assert json.loads(pointer.read_text())["data_dir"] == str(up.data_dir)


def test_a_second_up_under_the_same_name_is_refused(up: Up, expect_error) -> None:
    result = up.rafka("up", "--brokers", "1", "--data-dir", str(up.data_dir.parent / "other"))
    expect_error(result, 1, "is up already", "rafka down")


def test_status(up: Up) -> None:
    result = up.rafka("status")
    assert result.returncode == 0, result.stderr
    assert "brokers      2 live: 0@" in result.stdout
    assert "controller   0" in result.stdout or "controller   1" in result.stdout
    assert "under-replicated partitions: none" in result.stdout
    assert re.search(r"^kafka +0@127\.0\.0\.1:\d+, 1@127\.0\.0\.1:\d+$", result.stdout,
                     re.MULTILINE), result.stdout


def test_kcat_reaches_rafka_up_as_the_readme_shows(up: Up) -> None:
    status = up.rafka("status").stdout
    kafka_line = next(line for line in status.splitlines() if line.startswith("kafka "))
    servers = ",".join(re.findall(r"\d+@(127\.0\.0\.1:\d+)", kafka_line))
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed: apt-get install kcat (.ci/run installs it)"
    assert up.rafka("topics", "create", "--topic", "kcat-orders", "--partitions", "2",
                    "--replication-factor", "2").returncode == 0
    produced = subprocess.run([kcat, "-b", servers, "-P", "-t", "kcat-orders", "-K", ":",
                               "-X", "acks=all"], input="order-1:widget\norder-2:gadget\n",
                              capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([kcat, "-b", servers, "-G", "billing", "-X",
                               "auto.offset.reset=earliest", "-f", "%k %s\n", "-c", "2",
                               "kcat-orders"], capture_output=True, text=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == ["order-1 widget", "order-2 gadget"]
    # rafka's own consumer reads the same records.
    read = up.rafka("consume", "kcat-orders", "--from-beginning", "--max-messages", "2",
                    "--print-key", "--timeout-ms", "30000")
    assert sorted(read.stdout.splitlines()) == ["order-1\twidget", "order-2\tgadget"]


def test_topics_create_list_describe(up: Up) -> None:
    created = up.rafka("topics", "create", "--topic", "orders", "--partitions", "3",
                       "--replication-factor", "2", "--config", "min.insync.replicas=2")
    assert created.returncode == 0, created.stderr
    assert "orders" in up.rafka("topics", "list").stdout.split()
    described = up.rafka("topics", "describe", "orders")
    assert described.returncode == 0, described.stderr
    assert "PartitionCount: 3" in described.stdout
    assert re.search(r"TopicId: [A-Za-z0-9_-]{22}\t", described.stdout), described.stdout
    assert "min.insync.replicas=2" in described.stdout
    partitions = json.loads(up.rafka("topics", "describe", "orders", "--format", "json")
                            .stdout)[0]["partitions"]
    assert len(partitions) == 3
    assert all(len(p["replicas"]) == 2 and p["leader"] in p["isr"] for p in partitions)


def test_topics_describe_replicas_shows_each_replica_as_its_broker_sees_it(up: Up) -> None:
    """--replicas: each replica's role and offsets from its host; a leader's view of its
    follower, and the follower's of its fetching."""
    up.rafka("topics", "create", "--topic", "seen", "--partitions", "2",
             "--replication-factor", "2")
    up.rafka("produce", "seen", input="a\nb\nc\n")

    def described() -> dict:
        return json.loads(up.rafka("topics", "describe", "seen", "--replicas", "--format",
                                   "json").stdout)[0]

    def caught_up() -> dict | None:
        found = described()
        states = found["replica_states"]
        ends = {p["partition"]: p["high_watermark"] for p in found["partitions"]}
        if len(states) == 4 and sum(ends.values()) == 3 and all(
                s["log_end_offset"] == ends[s["partition"]] for s in states):
            return found
        return None

    found = wait_until(caught_up, 60, "both replicas of each partition holding its records")
    for partition in found["partitions"]:
        mine = {s["broker"]: s for s in found["replica_states"]
                if s["partition"] == partition["partition"]}
        assert sorted(mine) == sorted(partition["replicas"])
        leader, [follower] = mine[partition["leader"]], [
            s for broker, s in mine.items() if broker != partition["leader"]]
        assert leader["role"] == "leader" and follower["role"] == "follower"
        assert leader["followers"][str(follower["broker"])]["log_end_offset"] == (
            leader["log_end_offset"])
        fetching = follower["fetching"]
        assert fetching["fetcher_running"] and fetching["last_error"] is None, fetching
        assert fetching["fetched_s_ago"] is not None and fetching["fetched_s_ago"] < 60
    text = up.rafka("topics", "describe", "seen", "--replicas").stdout
    assert "FETCHING" in text and "fetched" in text, text


def test_a_topic_that_exists_already(up: Up, expect_error) -> None:
    expect_error(up.rafka("topics", "create", "orders"), 1, "exists already")
    assert up.rafka("topics", "create", "orders", "--if-not-exists").returncode == 0


def test_replication_factor_above_the_brokers(up: Up, expect_error) -> None:
    result = up.rafka("topics", "create", "wide", "--replication-factor", "3")
    expect_error(result, 1, "replication factor 3 is larger than the 2 live brokers")


def test_produce_with_keys_and_consume_raw_and_json(up: Up) -> None:
    produced = up.rafka("produce", "orders", "--key-separator", ":",
                        input="k1:v1\nk2:v2\nk1:v3\nk3:v:4\n")
    assert produced.returncode == 0, produced.stderr
    assert "produced 4 record(s)" in produced.stderr
    as_json = up.rafka("consume", "orders", "--from-beginning", "--max-messages", "4",
                       "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert sorted((r["key"], r["value"]) for r in records) == [
        ("k1", "v1"), ("k1", "v3"), ("k2", "v2"), ("k3", "v:4")]
    k1 = [r for r in records if r["key"] == "k1"]
    assert k1[0]["partition"] == k1[1]["partition"], "one key, one partition"
    assert [r["value"] for r in k1] == ["v1", "v3"], "in order within a partition"
    assert "processed a total of 4 message(s)" in as_json.stderr
    raw = up.rafka("consume", "orders", "--from-beginning", "--max-messages", "4",
                   "--property", "print.key=true", "--property", "key.separator==")
    assert sorted(raw.stdout.splitlines()) == ["k1=v1", "k1=v3", "k2=v2", "k3=v:4"]
    # Kafka's --partition/--offset: the second record of k1's partition.
    partition, offset = k1[1]["partition"], k1[1]["offset"]
    one = up.rafka("consume", "orders", "--partition", str(partition), "--offset", str(offset),
                   "--max-messages", "1")
    assert one.stdout == "v3\n", one.stderr


def test_consume_until_ctrl_c(up: Up) -> None:
    consumer = subprocess.Popen(
        [*RAFKA, "consume", "orders", "--from-beginning"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=up.rafka.root, env=up.rafka.env)
    try:
        assert consumer.stdout.readline()  # reading: now interrupt it, as Ctrl-C does
        consumer.send_signal(signal.SIGINT)
        assert consumer.wait(60) == 0
        # Some or all of the 4 records, depending on when the signal came.
        assert re.search(rb"processed a total of [1-4] message", consumer.stderr.read())
    finally:
        if consumer.poll() is None:
            consumer.kill()
        consumer.wait()


def test_produce_from_a_file_with_progress(up: Up, tmp_path: Path) -> None:
    source = tmp_path / "lines.txt"
    source.write_text("".join(f"line {n}\n" for n in range(500)))
    result = up.rafka("produce", "orders", "--file", str(source), "--progress", "--acks", "1")
    assert result.returncode == 0, result.stderr
    assert "100%" in result.stderr and "produced 500 record(s)" in result.stderr


def test_consume_stops_after_timeout_without_records(up: Up) -> None:
    result = up.rafka("consume", "orders", "--timeout-ms", "1500")  # from the end: nothing new
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "processed a total of 0 message(s)" in result.stderr


def test_a_line_without_the_key_separator(up: Up, expect_error) -> None:
    # kafka-console-producer's spelling of --key-separator
    result = up.rafka("produce", "orders", "--property", "parse.key=true",
                      "--property", "key.separator=:", input="a:1\nno key here\n")
    expect_error(result, 1, "line 2 has no key separator ':'", "1 earlier record(s) were sent")


def test_topics_alter_config(up: Up, expect_error) -> None:
    result = up.rafka("topics", "alter", "orders", "--config", "retention.ms=60000",
                      "--delete-config", "min.insync.replicas")
    assert result.returncode == 0, result.stderr
    config = json.loads(up.rafka("topics", "describe", "orders", "--format", "json")
                        .stdout)[0]["config"]
    assert config == {"retention.ms": "60000"}
    expect_error(up.rafka("topics", "alter", "orders", "--config", "no.such.key=1"), 1,
                 "no.such.key")


def test_topics_alter_partitions(up: Up, expect_error) -> None:
    result = up.rafka("topics", "alter", "orders", "--partitions", "4")
    if not hasattr(Cluster, "add_partitions"):
        expect_error(result, 2, "not available")
        return
    assert result.returncode == 0, result.stderr
    described = up.rafka("topics", "describe", "orders", "--format", "json").stdout
    assert len(json.loads(described)[0]["partitions"]) == 4


def test_groups(up: Up, expect_error) -> None:
    if not hasattr(Cluster, "list_groups"):
        expect_error(up.rafka("groups", "list"), 2, "not available")
        return
    consumed = up.rafka("consume", "orders", "--group", "billing", "--from-beginning",
                        "--max-messages", "4", "--timeout-ms", "30000")
    if consumed.returncode == 2:  # groups are listed but a group consumer is not there yet
        expect_error(consumed, 2, "not available")
        return
    assert consumed.returncode == 0, consumed.stderr
    assert len(consumed.stdout.splitlines()) == 4
    assert "billing" in up.rafka("groups", "list").stdout.split()
    described = up.rafka("groups", "describe", "billing")
    assert described.returncode == 0, described.stderr
    assert "orders" in described.stdout
    expect_error(up.rafka("groups", "describe", "nobody"), 1, "does not exist")


def test_bench_builtin(up: Up) -> None:
    result = up.rafka("bench", "--builtin", "--records", "500")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["records"] == 500
    assert figures["produce"]["records_per_s"] > 0 and figures["consume"]["records_per_s"] > 0


def test_topics_delete(up: Up, expect_error) -> None:
    result = up.rafka("topics", "delete", "orders")
    assert result.returncode == 0, result.stderr
    assert "orders" not in up.rafka("topics", "list").stdout.split()
    expect_error(up.rafka("topics", "delete", "orders"), 1, "does not exist")


def test_down_stops_what_up_started_and_nothing_else(up: Up) -> None:
    zk_pid = up.state["zookeeper"]["pid"]
    head_pid = up.state["ray_head"]["pid"]
    bystander = subprocess.Popen(["sleep", "120"])  # not `up`'s: must survive `down`
    try:
        result = up.rafka("down", timeout=180)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    assert result.returncode == 0, result.stderr
    assert f"rafka cluster '{NAME}' is down" in result.stdout
    assert "broker(s) 0, 1" in result.stdout, result.stdout + result.stderr
    assert wait_for_exit(zk_pid, 30), "the embedded ZooKeeper must be stopped"
    assert wait_for_exit(head_pid, 30), "the Ray head must be stopped"
    assert session_members(head_pid) == [], "every process of the Ray head's session is gone"
    # Ray is left as `up` found it: no pointer to the head that is gone, so that a user's next
    # Ray program starts a Ray of its own instead of waiting for that head.
    assert not _ray_pointer(up).exists()
    program = subprocess.run(
        [sys.executable, "-c", "import ray; ray.init(num_cpus=1); "
         "print(ray.get(ray.put(41)) + 1); ray.shutdown()"],
        capture_output=True, text=True, timeout=180, cwd=up.rafka.root,
        env={key: value for key, value in up.rafka.env.items() if key != "RAY_ADDRESS"})
    assert program.returncode == 0 and program.stdout.split()[-1] == "42", program.stderr[-2000:]
    assert not (up.data_dir / "cluster.json").exists()
    again = up.rafka("down")
    assert again.returncode == 0 and "nothing to stop" in again.stderr
