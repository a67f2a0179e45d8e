"""A consumer in one rack reading from replicas in its rack (KIP-392), against reading from the
leaders.

    python bench/follower_fetching.py [--partitions 6] [--records 20000] [--rate 200]
                                      [--seconds 10] [--rounds 1]

Three brokers in three racks (``zone-a``, ``zone-b``, ``zone-c``; embedded ZooKeeper, local Ray),
a topic of ``--partitions`` partitions (RF 3, ``min.insync.replicas=2``) whose leaders are
spread over the three, and confluent-kafka consumers with ``client.rack=zone-b``. Each round
runs twice, on a cluster of its own: with ``replica.selector.class`` Kafka's
RackAwareReplicaSelector (``follower_reads``) and without (``leader_reads``), ABBA across
rounds. Each run measures:

* ``backlog``: ``--records`` records of 1 KiB written first, then read whole by a consumer
  from the beginning: the bytes it received from brokers outside its rack
  (``cross_rack_mb``, from librdkafka's statistics) and from the one in it, and its rate;
* ``live``: a producer sends a record every 1/``--rate`` s for ``--seconds``, each stamped with
  when it was due, while a consumer reads from the end: the latency from due time to the
  consumer's poll (p50, p99), which a follower adds to by the replication round in which it
  learns the high watermark.

Prints one JSON object: every run, and per setting the median over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import confluent_kafka

from bench.common import abba_runs, with_medians
from rafka import Cluster

RACKS = {0: "zone-a", 1: "zone-b", 2: "zone-c"}
CLIENT_RACK = "zone-b"
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SETTINGS = {"follower_reads": SELECTOR, "leader_reads": None}
DUE = struct.Struct(">d")


class BrokerBytes:
    """librdkafka's statistics: bytes received from each broker, by node id."""

    def __init__(self) -> None:
        self.received: dict[int, int] = {}

    def __call__(self, raw: str) -> None:
        for broker in json.loads(raw)["brokers"].values():
            if broker["nodeid"] >= 0:
                self.received[broker["nodeid"]] = broker["rxbytes"]


def consumer(cluster: Cluster, stats: BrokerBytes, **extra: Any) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers(), "group.id": f"bench-{uuid.uuid4()}",
        "enable.auto.commit": False, "client.rack": CLIENT_RACK, "fetch.wait.max.ms": 100,
        "statistics.interval.ms": 100, "stats_cb": stats, **extra})


def backlog(cluster: Cluster, topic: str, args: argparse.Namespace) -> dict[str, float]:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers(),
                                         "acks": "all", "linger.ms": 5})
    value = b"x" * 1024
    for index in range(args.records):
        producer.produce(topic, value=value, partition=index % args.partitions)
        producer.poll(0)
    assert producer.flush(120) == 0
    time.sleep(1)  # the followers learn the last high watermark
    stats = BrokerBytes()
    reader = consumer(cluster, stats, **{"auto.offset.reset": "earliest"})
    reader.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(args.partitions)])
    read, started = 0, time.perf_counter()
    while read < args.records:
        message = reader.poll(1.0)
        if message is not None and message.error() is None:
            read += 1
    elapsed = time.perf_counter() - started
    time.sleep(0.3)  # a last round of statistics
    reader.poll(0.1)
    reader.close()
    in_rack = next(b for b, rack in RACKS.items() if rack == CLIENT_RACK)
    cross = sum(n for broker, n in stats.received.items() if broker != in_rack)
    return {"cross_rack_mb": round(cross / 1e6, 2),
            "in_rack_mb": round(stats.received.get(in_rack, 0) / 1e6, 2),
            "records_per_s": round(read / elapsed)}


def live(cluster: Cluster, topic: str, args: argparse.Namespace) -> dict[str, float]:
    stats = BrokerBytes()
    reader = consumer(cluster, stats, **{"auto.offset.reset": "latest"})
    reader.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_END)
                   for p in range(args.partitions)])
    for _ in range(20):  # positions found, the preferred replicas learnt
        reader.poll(0.1)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers(),
                                         "acks": "all", "linger.ms": 0})
    latencies: list[float] = []
    count = int(args.seconds * args.rate)
    started = time.perf_counter()
    sent = 0
    while len(latencies) < count and time.perf_counter() - started < args.seconds + 30:
        now = time.perf_counter()
        while sent < count and started + sent / args.rate <= now:
            due = started + sent / args.rate
            producer.produce(topic, value=DUE.pack(due), partition=sent % args.partitions)
            sent += 1
        producer.poll(0)
        message = reader.poll(0.001)
        if message is not None and message.error() is None:
            latencies.append(time.perf_counter() - DUE.unpack(message.value())[0])
    producer.flush(30)
    reader.close()
    ordered = sorted(latencies)
    return {"p50_ms": round(1000 * statistics.median(ordered), 2),
            "p99_ms": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 2),
            "records_read": len(ordered)}


def one_run(args: argparse.Namespace, selector: str | None) -> dict[str, Any]:
    config = {} if selector is None else {"replica.selector.class": selector}
    cluster = Cluster.start(
        brokers=3, name=f"follower-bench-{os.getpid()}-{selector is not None}",
        kafka_listeners="PLAINTEXT://127.0.0.1:0", broker_config=config,
        broker_overrides={broker: {"broker.rack": rack} for broker, rack in RACKS.items()})
    try:
        cluster.create_topic("backlog", partitions=args.partitions, replication_factor=3,
                             config={"min.insync.replicas": "2"})
        cluster.create_topic("live", partitions=args.partitions, replication_factor=3,
                             config={"min.insync.replicas": "2"})
        return {"backlog": backlog(cluster, "backlog", args),
                "live": live(cluster, "live", args)}
    finally:
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=200, help="live records a second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    runs = abba_runs(args.rounds, SETTINGS, lambda selector: one_run(args, selector))
    print(json.dumps(with_medians(args, runs), indent=2))


if __name__ == "__main__":
    main()
