"""Growing a topic while producers and a consumer group run (as Kafka promises it)."""

from __future__ import annotations

import threading
import time

import pytest

from rafka import Cluster
from rafka.coordination.errors import InvalidPartitionsError
from tests.support.waiting import wait_until


def test_added_partitions_reach_producers_and_groups_while_they_run(cluster: Cluster) -> None:
    cluster.create_topic("growing", partitions=2, replication_factor=2)
    stop = threading.Event()
    acknowledged: dict[tuple[int, int], bytes] = {}

    def produce() -> None:
        producer = cluster.producer(acks="all", metadata_max_age_ms=500, linger_ms=1)
        futures = []
        i = 0
        while not stop.is_set():
            value = f"v{i}".encode()
            futures.append((value, producer.send("growing", value=value)))
            i += 1
            if i % 50 == 0:
                time.sleep(0.02)
        producer.flush()
        for value, future in futures:
            meta = future.result(60)
            acknowledged[(meta.partition, meta.offset)] = value
        producer.close()

    group = [cluster.consumer(["growing"], group="growers", auto_offset_reset="earliest",
                              session_timeout_ms=4000) for _ in range(2)]
    read: dict[tuple[int, int], bytes] = {}
    writer = threading.Thread(target=produce)
    writer.start()

    def poll_all() -> None:
        for consumer in group:
            for record in consumer.poll(100):
                read[(record.partition, record.offset)] = record.value

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        poll_all()
    cluster.add_partitions("growing", 4)
    assert len(cluster.describe_topic("growing")["partitions"]) == 4

    def grown() -> bool:
        poll_all()
        owned = set().union(*(c.assignment() for c in group))
        return {tp.partition for tp in owned} == {0, 1, 2, 3} and {p for p, _o in read} >= {2, 3}

    wait_until(grown, 60, "producers and the group to use the new partitions")
    stop.set()
    writer.join(120)
    wait_until(lambda: (poll_all(), set(acknowledged) <= set(read))[1], 60,
               "the group to read every acknowledged record")
    assert all(read[key] == value for key, value in acknowledged.items())
    for consumer in group:
        consumer.close()

    with pytest.raises(InvalidPartitionsError, match="only grow"):
        cluster.add_partitions("growing", 3)
