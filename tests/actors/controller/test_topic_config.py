"""A topic's config changed while it is in use reaches every replica of it, live.

`Cluster.alter_topic_config` (and `rafka topics alter --config`) writes `/config/topics/<t>`;
the controller tells the brokers holding the topic's replicas, and a broker that was down meanwhile
hears of it in its next LeaderAndIsr.
"""

from __future__ import annotations

import pytest

from rafka import Cluster
from rafka.common.config import InvalidConfigError
from rafka.logstore.errors import RecordTooLargeError
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until

TOPIC = "reconfigured"


def test_altered_retention_and_max_message_bytes_apply_to_every_replica(
        cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3,
                         config={"segment.bytes": 2048})
    producer = cluster.producer(acks="all", linger_ms=0)
    values = [f"record-{i:04d}-".encode() + b"x" * 100 for i in range(300)]
    for future in [producer.send(TOPIC, value=value) for value in values]:
        future.result(timeout=60)
    big = b"b" * 4000
    producer.send(TOPIC, value=big).result(timeout=60)  # the default allows 1 MiB
    replicas = cluster.describe_topic(TOPIC)["partitions"][0]["replicas"]
    wait_until(lambda: all(ReplicaOnHost(cluster, TOPIC, 0, b).describe()["log_end_offset"] == 301
                           for b in replicas), 60, "every replica to hold all 301 records")
    assert cluster.offset_bounds(TOPIC)[0] == (0, 301)

    # One replica's broker is down while the config changes: it must learn it on return.
    absent = replicas[-1]
    cluster.stop_broker(absent)
    cluster.alter_topic_config(TOPIC, {"retention.bytes": 4096, "max.message.bytes": 1000})

    # The leader refuses what the new max.message.bytes does not allow...
    def refused() -> bool:
        try:
            producer.send(TOPIC, value=big).result(timeout=60)
        except RecordTooLargeError:
            return True
        return False

    wait_until(refused, 30, "the leader to refuse a record over max.message.bytes=1000")
    # ...and every live replica drops the segments beyond retention.bytes.
    live = replicas[:-1]
    wait_until(lambda: all(ReplicaOnHost(cluster, TOPIC, 0, b).describe()["log_start_offset"] > 0
                           for b in live), 30, "retention.bytes to apply on the live replicas")
    cluster.start_broker(absent)

    def retained_on_absent() -> bool:
        try:
            return ReplicaOnHost(cluster, TOPIC, 0, absent).describe()["log_start_offset"] > 0
        except (ValueError, LookupError):  # its hosts and replica are still being created
            return False

    wait_until(retained_on_absent, 60,
               f"retention.bytes to apply on broker {absent}, down during the change")

    start, end = cluster.offset_bounds(TOPIC)[0]
    assert 0 < start < end
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([(TOPIC, 0)])
    kept: list[bytes] = []
    wait_until(lambda: (kept.extend(r.value for r in consumer.poll(timeout_ms=500))
                        or len(kept) >= end - start), 60, "the records retention kept")
    consumer.close()
    # What retention kept is the tail of what was written, whole and in order.
    written = [*values, *([big] * (end - len(values)))]
    assert kept == written[start:end]
    producer.close()


def test_a_config_a_replica_would_refuse_is_refused_before_it_is_written(
        cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=1, replication_factor=1)
    with pytest.raises(InvalidConfigError, match=r"retention\.bytes"):
        cluster.alter_topic_config(TOPIC, {"retention.bytes": "lots"})
    assert "retention.bytes" not in cluster.describe_topic(TOPIC)["config"]
