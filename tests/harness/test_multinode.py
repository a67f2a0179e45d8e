"""rafka on three Ray nodes: brokers one per node, replicas on their broker's node, and the loss
of a whole node (its broker, its replicas, its raylet) without losing an acknowledged record.

The cluster runs in multinode_session.py, in a process of its own (this one holds the test
session's local Ray), once for the whole module; the tests judge what it wrote down.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.support.checker import Ack, Fault, History, Limits, Poll, check
from tests.support.processes import kill_marked, left_behind, run_marked

# Run as a module from the repo root (the test's own working directory), to import tests.support.
SESSION = "tests.harness.multinode_session"
# What would point the subprocess at another Ray than the one it starts.
_DROPPED = ("RAY_ADDRESS", "RAY_AUTH_MODE")


@pytest.fixture(scope="module")
def multinode() -> dict[str, Any]:
    # Short: Ray's Unix sockets live under RAY_TMPDIR, and a socket path has at most 107 bytes.
    # A Ray temp dir of its own also keeps its `ray_current_cluster` file from other Rays'.
    root = Path(tempfile.mkdtemp(prefix="rfk", dir="/tmp"))
    env = {key: value for key, value in os.environ.items() if key not in _DROPPED}
    env.update({"RAY_TMPDIR": str(root / "ray"), "PYTHONUNBUFFERED": "1"})
    result_path = root / "result.json"
    run = None
    try:
        run = run_marked([sys.executable, "-m", SESSION, str(root / "work"), str(result_path)],
                         env, root / "output.txt", timeout_s=420)
        tail = (root / "output.txt").read_text(errors="replace")[-4000:]
        assert run.returncode == 0, tail
        result = json.loads(result_path.read_text())
        result["seen"] = run.seen
        result["left_behind"] = left_behind(run.marker)
        print(json.dumps({"wall_s": round(run.seconds, 1),
                          "started_s": round(result["started_s"], 1)}))
        return result
    finally:
        if run is not None:
            kill_marked(run.marker)
        shutil.rmtree(root, ignore_errors=True)


def test_the_three_brokers_run_on_three_distinct_worker_nodes(multinode: dict) -> None:
    nodes = multinode["placement"]["brokers"]
    assert sorted(nodes) == ["0", "1", "2"]
    assert sorted(nodes.values()) == multinode["worker_nodes"], "one broker per worker node"
    assert multinode["head_node"] not in nodes.values()


def test_every_replica_runs_on_its_brokers_node(multinode: dict) -> None:
    brokers = multinode["placement"]["brokers"]
    replicas = multinode["placement"]["replicas"]
    # Replication factor 3 on 3 brokers: every broker holds a replica of every partition.
    assert sorted(replicas) == multinode["expected_replicas"]
    assert len(replicas) == 9
    for name, node in replicas.items():
        broker = name.rsplit("-", 1)[1]
        assert node == brokers[broker], f"{name} runs on {node}, its broker on {brokers[broker]}"


def _history(loss: dict) -> History:
    acks = [Ack(value.encode(), partition, offset, at)
            for value, partition, offset, at in loss["acks"]]
    final_log = {int(p): [(offset, value.encode()) for offset, value in records]
                 for p, records in loss["final_log"].items()}
    polls = [Poll("reader", at, tuple((p, o, v.encode()) for p, o, v in records))
             for at, records in loss["polls"]]
    return History(acks=acks, attempts=loss["attempts"], final_log=final_log, polls=polls,
                   faults=[Fault(loss["removed_at"], "remove_node", loss["victim_node"])],
                   end=loss["end"])


@pytest.mark.reliability
def test_losing_a_node_loses_no_acknowledged_record(multinode: dict) -> None:
    loss = multinode["node_loss"]
    verdict = check(_history(loss), Limits(default_resume_within_s=120))
    removed_at = loss["removed_at"]
    acked_after = [at for *_rest, at in loss["acks"] if at > removed_at]
    # How long each partition the lost broker led went without an acknowledged write: the
    # longest gap between two acks on it from the removal on.
    unavailable = {}
    for p in loss["orphaned_partitions"]:
        times = sorted(at for _v, partition, _o, at in loss["acks"] if partition == p)
        around = [at for at in times if at >= removed_at]
        before = [at for at in times if at < removed_at][-1:]
        marks = before + around
        unavailable[p] = round(max((b - a for a, b in pairwise(marks)), default=0.0), 2)
    print(json.dumps({
        **verdict.summary(),
        "records_acked_after_removal": len(acked_after),
        "lost_broker": loss["victim_broker"],
        "controller_before_after": [loss["controller_before"], loss["controller_after"]],
        "processes_gone_within_s": round(loss["processes_gone_s"], 2),
        "new_leaders_within_s": round(loss["recovered_s"], 2),
        "partitions_unavailable_s": unavailable,
        "client_errors": loss["client_error_count"],
    }, indent=2))
    assert verdict.acknowledged > 0
    assert sum(len(records) for records in loss["final_log"].values()) >= verdict.acknowledged
    assert verdict.ok, verdict.summary()


@pytest.mark.reliability
def test_new_leaders_take_over_the_lost_nodes_partitions_and_writes_resume(
        multinode: dict) -> None:
    loss = multinode["node_loss"]
    victim = loss["victim_broker"]
    before = {p["partition"]: p for p in loss["leaders_before"]}
    after = {p["partition"]: p for p in loss["leaders_after"]}
    assert before[0]["leader"] == victim
    assert 0 in loss["orphaned_partitions"]
    assert sorted(loss["live_brokers_after"]) == sorted({0, 1, 2} - {victim})
    for partition in loss["orphaned_partitions"]:
        assert after[partition]["leader"] not in (-1, victim)
        assert after[partition]["leader_epoch"] > before[partition]["leader_epoch"]
    for state in loss["leaders_final"]:
        assert victim not in state["isr"]
        assert state["leader"] in state["isr"]
    assert loss["controller_after"] in loss["live_brokers_after"]
    # Writes resumed: acknowledged after the removal, on every partition, the orphaned ones
    # (now led elsewhere) included.
    acked_after = {partition for _v, partition, _o, at in loss["acks"] if at > loss["removed_at"]}
    assert acked_after == {0, 1, 2}


def test_the_multinode_run_stops_everything_it_started(multinode: dict) -> None:
    commands = list(multinode["seen"].values())
    # While it ran: four raylets (a head, three workers), one GCS, the ZooKeeper JVM.
    assert sum("raylet" in command.split(" ", 1)[0] for command in commands) == 4, commands
    assert any("gcs_server" in command for command in commands)
    assert int(multinode["zookeeper_pid"]) in {int(pid) for pid in multinode["seen"]}
    assert multinode["left_behind"] == {}
