"""Disk faults: a broker comes back with the tail of its log damaged on disk.

A replica of a topic with replication factor 3 is stopped (the broker killed, as a machine that
dies), the tail of its active segment is damaged (bytes flipped in the last batch, or a torn
half batch after it), more records are written while it is down, and the broker is
started again. Opening the log truncates at the first bad batch; the replica then fetches the
rest from the leader, rejoins the ISR, and ends with a log byte-identical to the others'. For a
damaged *leader* the same holds: it comes back as a follower, and its damaged tail never comes
back as acknowledged data.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rafka import Cluster
from rafka.logstore import Log
from rafka.logstore.batch import decode_batches, iter_batches
from tests.support.cluster import log_bytes, module_cluster, partition_state
from tests.support.waiting import wait_until

pytestmark = pytest.mark.reliability


cluster = module_cluster("diskfaults")


def _partition_dir(cluster: Cluster, broker: int, topic: str) -> Path:
    # docs/storage.md: a partition is the directory <topic>-<partition> of its broker's data dir.
    return cluster.data_dir / f"broker-{broker}" / f"{topic}-0"


def _produce(cluster: Cluster, topic: str, values: list[bytes]) -> None:
    producer = cluster.producer(acks="all", linger_ms=0)
    try:
        futures = [producer.send(topic, value=value) for value in values]
        for future in futures:
            future.result(90)
    finally:
        producer.close()


def _damage(segment: Path, how: str) -> int:
    """Damage the tail of `segment`; return the offset its log must end at once recovered."""
    data = bytearray(segment.read_bytes())
    batches = [header for header, _ in iter_batches(data)]
    assert batches and sum(h.size for h in batches) == len(data), "a clean segment to start"
    last = batches[-1]
    last_start = len(data) - last.size
    if how == "flip":
        # Bytes in the records of the last batch: its CRC no longer matches, so it and
        # everything after it must go.
        for position in range(last_start + 61, len(data), 7):
            data[position] ^= 0xFF
        segment.write_bytes(data)
        return last.base_offset
    # "torn": a write that stopped half-way, the first half of a batch after the last whole
    # one (its length field promises more bytes than follow).
    segment.write_bytes(data + data[last_start : last_start + last.size // 2])
    return last.next_offset


@pytest.mark.parametrize(
    ("role", "how"),
    [("follower", "flip"), ("follower", "torn"), ("leader", "flip")],
)
def test_a_broker_with_a_damaged_log_tail_truncates_and_refetches(
    cluster: Cluster, tmp_path: Path, role: str, how: str
) -> None:
    topic = f"disk-{role}-{how}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    acknowledged = [b"first-%d" % i for i in range(30)]
    _produce(cluster, topic, acknowledged)
    state = partition_state(cluster, topic, 0)
    replicas = state["replicas"]
    dirs = {broker: _partition_dir(cluster, broker, topic) for broker in replicas}
    wait_until(lambda: len({log_bytes(d) for d in dirs.values()}) == 1, 30,
               "the three replicas to hold the same bytes")
    victim = state["leader"] if role == "leader" else next(
        b for b in replicas if b != state["leader"])

    cluster.kill_broker(victim)
    segment = max(dirs[victim].glob("*.log"))
    end_after_recovery = _damage(segment, how)
    # What opening the damaged log does, on a copy (the broker will do the same on restart).
    copy = tmp_path / "copy"
    shutil.copytree(dirs[victim], copy)
    with Log.open(copy) as recovered:
        assert recovered.log_end_offset == end_after_recovery
    assert log_bytes(copy) == log_bytes(next(d for b, d in dirs.items() if b != victim))[
        : len(log_bytes(copy))], "recovery keeps exactly the undamaged prefix"

    # Written while it is down: a new leader first, if the victim led.
    wait_until(lambda: victim not in {b["id"] for b in cluster.brokers()}, 30,
               f"broker {victim}'s session to expire")
    if role == "leader":
        wait_until(lambda: partition_state(cluster, topic, 0)["leader"] not in (victim, -1), 30,
                   "a new leader")
    more = [b"while-down-%d" % i for i in range(20)]
    _produce(cluster, topic, more)
    acknowledged += more

    cluster.start_broker(victim)
    wait_until(lambda: victim in partition_state(cluster, topic, 0)["isr"], 60,
               f"broker {victim} back in the ISR")
    wait_until(lambda: len({log_bytes(d) for d in dirs.values()}) == 1, 30,
               "byte-identical logs on the three replicas")
    values = [record.value for record in decode_batches(log_bytes(dirs[victim]))]
    assert values == acknowledged
