"""Transactional producers with and without KIP-890's verification of each transaction's first
batch in a partition.

    python bench/transactions.py [--transactions 200] [--partitions 3] [--records 10]
                                 [--rounds 1]

Three brokers (embedded ZooKeeper, local Ray), a topic of ``--partitions`` partitions (RF 3,
``min.insync.replicas=2``, their leaders spread over the brokers), and two transactional
producers, one after the other: confluent-kafka's through the Kafka listeners, and rafka's own.
Each commits ``--transactions`` transactions of ``--records`` records of 100 bytes to every
partition, one transaction at a time, after a warm-up of 20. Each round runs twice, on a
cluster of its own: with verification (``transaction.partition.verification.enable``, the
default) and without; ABBA across rounds. Prints one JSON object; per setting and producer,
the median over rounds of:

* ``transactions_per_s``;
* ``p50_ms`` and ``p99_ms`` of one transaction, from its begin until its commit returned.

Every transaction's first batch in each partition waits for one question to the coordinator
(by way of the leader's broker, and the coordinator's broker's control endpoint where that is
another broker); the later batches do not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import confluent_kafka

from bench.common import abba_runs, with_medians
from rafka import Cluster

SETTINGS = {"verified": "true", "unverified": "false"}
WARM_UP = 20


def _summary(durations_s: list[float], wall_s: float) -> dict[str, float]:
    ordered = sorted(durations_s)
    return {"transactions_per_s": round(len(ordered) / wall_s, 1),
            "p50_ms": round(1000 * statistics.median(ordered), 2),
            "p99_ms": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 2)}


def timed_transactions(args: argparse.Namespace, begin: Callable[[], None],
                       send: Callable[[int, bytes], None], commit: Callable[[], None],
                       ) -> dict[str, float]:
    """`--transactions` transactions (after WARM_UP), each of `--records` records to every
    partition, one after another; each timed from its begin until its commit returned."""
    value = b"x" * 100
    durations: list[float] = []
    started = 0.0
    for index in range(WARM_UP + args.transactions):
        if index == WARM_UP:
            started = time.perf_counter()
        began = time.perf_counter()
        begin()
        for partition in range(args.partitions):
            for _ in range(args.records):
                send(partition, value)
        commit()
        if index >= WARM_UP:
            durations.append(time.perf_counter() - began)
    return _summary(durations, time.perf_counter() - started)


def confluent_run(cluster: Cluster, topic: str, args: argparse.Namespace) -> dict[str, float]:
    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap_servers(),
        "transactional.id": f"bench-{uuid.uuid4().hex}", "linger.ms": 0})
    producer.init_transactions(60)
    return timed_transactions(
        args, producer.begin_transaction,
        lambda partition, value: producer.produce(topic, value=value, partition=partition),
        lambda: producer.commit_transaction(60))


def rafka_run(cluster: Cluster, topic: str, args: argparse.Namespace) -> dict[str, float]:
    producer = cluster.producer(transactional_id=f"bench-{uuid.uuid4().hex}", acks="all")
    try:
        producer.init_transactions()
        return timed_transactions(
            args, producer.begin_transaction,
            lambda partition, value: producer.send(topic, value, partition=partition),
            producer.commit_transaction)
    finally:
        producer.close()


def one_run(args: argparse.Namespace, verification: str) -> dict[str, Any]:
    cluster = Cluster.start(
        brokers=3, name=f"txn-bench-{os.getpid()}-{verification}",
        kafka_listeners="PLAINTEXT://127.0.0.1:0",
        broker_config={"transaction.partition.verification.enable": verification})
    try:
        topic = "transactions"
        cluster.create_topic(topic, partitions=args.partitions, replication_factor=3,
                             config={"min.insync.replicas": "2"})
        return {"confluent_kafka": confluent_run(cluster, topic, args),
                "rafka": rafka_run(cluster, topic, args)}
    finally:
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--records", type=int, default=10,
                        help="records per partition per transaction")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    runs = abba_runs(args.rounds, SETTINGS, lambda verification: one_run(args, verification))
    result = with_medians(args, runs)
    result["verified_over_unverified"] = {
        client: {key: round(result["verified"][client][key]
                            / result["unverified"][client][key], 2)
                 for key in result["verified"][client]}
        for client in result["verified"]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
