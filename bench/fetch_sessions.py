"""A consumer of many partitions, with and without incremental fetch sessions (KIP-227).

    python bench/fetch_sessions.py [--partitions 1000] [--active 10] [--rate 200] [--seconds 20]
                                   [--rounds 1]

One broker with a Kafka listener (embedded ZooKeeper, local Ray), a topic of ``--partitions``
partitions (RF 1), and kafka-python's consumer assigned all of them (it opens a fetch session
when the broker offers one). A producer writes ``--rate`` records/s of 100 bytes, spread over
``--active`` of the partitions, for ``--seconds``, while the consumer reads. Each round runs
twice on a cluster of its own: with sessions (``max.incremental.fetch.session.cache.slots``
1000, Kafka's default) and without (0: every fetch lists, and is answered about, every
partition, as rafka answered Kafka clients before). Prints one JSON object; per setting, the
median over rounds of:

* ``request_bytes_per_fetch`` and ``response_bytes_per_fetch``: what the consumer sent and
  received per request, over the measured stretch (it sends fetches only: no group);
* ``fetches_per_s``;
* ``broker_cpu_ms_per_fetch``: the CPU the broker's process (its Kafka listener) and its replica
  hosts used, per fetch, and ``broker_cores_busy``, the same per second of the run (a consumer
  whose fetches always find records fetches as often as the broker answers: cheaper fetches
  come more often);
* ``records_read``: that all were read (each round checks it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
import ray
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.metrics.measurable_stat import AbstractMeasurableStat

from rafka import Cluster

SETTINGS = {"sessions": 1000, "no_sessions": 0}


class Tally(AbstractMeasurableStat):
    """How many values a kafka-python sensor recorded, and their sum, since it was added."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0

    def record(self, config: Any, value: float, now: int) -> None:
        self.count += 1
        self.total += value

    def measure(self, config: Any, now: int) -> float:
        return self.total


def tallies(consumer: KafkaConsumer) -> tuple[Tally, Tally]:
    """(requests sent, responses received), tallied from now on."""
    metrics = consumer._metrics  # kafka-python's registry: its sensors take extra stats
    sent, received = Tally(), Tally()
    metrics.get_sensor("bytes-sent").add(metrics.metric_name("bench-sent", "bench"), sent)
    metrics.get_sensor("bytes-received").add(
        metrics.metric_name("bench-received", "bench"), received)
    return sent, received


def broker_cpu_s(cluster: Cluster) -> float:
    """CPU seconds the broker's process and its replica hosts have used so far."""
    broker = ray.get_actor("broker-0", namespace=cluster.namespace)
    pids = [ray.get(broker.pid.remote(), timeout=30),
            *ray.get(broker.replica_host_pids.remote(), timeout=30).values()]
    used = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        used += times.user + times.system
    return used


def one_run(args: argparse.Namespace, slots: int) -> dict[str, Any]:
    cluster = Cluster.start(brokers=1, name=f"fetch-sessions-{os.getpid()}-{slots}",
                            kafka_listeners="PLAINTEXT://127.0.0.1:0",
                            broker_config={"max.incremental.fetch.session.cache.slots": slots})
    try:
        topic = "many"
        cluster.create_topic(topic, partitions=args.partitions, replication_factor=1)
        bootstrap = cluster.bootstrap_servers()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest", fetch_max_wait_ms=500)
        consumer.assign([TopicPartition(topic, p) for p in range(args.partitions)])
        for _ in range(20):  # positions found, the session (if any) opened
            consumer.poll(timeout_ms=100)
        sent, received = tallies(consumer)
        cpu_before, started = broker_cpu_s(cluster), time.monotonic()
        value = b"x" * 100
        written = read = 0
        while (elapsed := time.monotonic() - started) < args.seconds:
            due = int(elapsed * args.rate)
            for i in range(written, due):
                producer.send(topic, value=value, partition=i % args.active)
            written = max(written, due)
            read += sum(len(records) for records in consumer.poll(timeout_ms=20).values())
        wall = time.monotonic() - started
        cpu = broker_cpu_s(cluster) - cpu_before
        producer.flush(timeout=30)
        deadline = time.monotonic() + 30
        while read < written and time.monotonic() < deadline:
            read += sum(len(records) for records in consumer.poll(timeout_ms=200).values())
        producer.close(timeout=10)
        consumer.close()
        if read != written:
            raise RuntimeError(f"read {read} of {written} records")
        fetches = max(received.count, 1)
        return {"request_bytes_per_fetch": round(sent.total / max(sent.count, 1)),
                "response_bytes_per_fetch": round(received.total / fetches),
                "fetches_per_s": round(received.count / wall, 1),
                "broker_cpu_ms_per_fetch": round(1000 * cpu / fetches, 3),
                "broker_cores_busy": round(cpu / wall, 3),
                "records_read": read}
    finally:
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--active", type=int, default=10,
                        help="how many partitions the producer writes to")
    parser.add_argument("--rate", type=int, default=200, help="records a second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
    for round_ in range(args.rounds):
        # ABBA across rounds, so that neither setting always runs on the warmer machine.
        order = list(SETTINGS) if round_ % 2 == 0 else list(reversed(SETTINGS))
        for name in order:
            runs[name].append(one_run(args, SETTINGS[name]))
    result: dict[str, Any] = {"args": vars(args), "runs": runs}
    for name, found in runs.items():
        result[name] = {key: statistics.median(run[key] for run in found)
                        for key in found[0]}
    with_sessions, without = result["sessions"], result["no_sessions"]
    result["ratios_without_to_with"] = {
        key: round(without[key] / with_sessions[key], 2)
        for key in ("request_bytes_per_fetch", "response_bytes_per_fetch",
                    "broker_cpu_ms_per_fetch") if with_sessions[key]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
