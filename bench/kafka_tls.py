"""confluent-kafka's throughput over a PLAINTEXT, an SSL and a SASL_SSL listener of one broker.

    python bench/kafka_tls.py [--records 200000] [--record-size 1000] [--repeats 2]

One broker (embedded ZooKeeper, local Ray) with the three listeners, certificates made by
trustme (the `test` extra); the SASL_SSL listener takes SCRAM-SHA-512, its user created with
AlterUserScramCredentials over PLAINTEXT (no authorizer is configured). Each run produces
`--records` values of `--record-size` bytes with `acks=1` to a topic of its own, then reads
them back from the beginning, over one listener; the runs alternate the protocols (ABCABC),
so that all see the same stretch of the machine's weather. Prints one JSON object: per
protocol, the median records/s and MB/s of producing and of consuming, and
`ssl_over_plaintext` and `sasl_ssl_over_plaintext`, each protocol's share of PLAINTEXT's rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trustme
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from rafka import Cluster

USER, PASSWORD = "bench", "bench-secret"


def produce(config: dict, topic: str, records: int, value: bytes) -> float:
    producer = Producer({**config, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000})
    began = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    took = time.perf_counter() - began
    if remaining:
        raise RuntimeError(f"{remaining} records were not acknowledged")
    return took


def consume(config: dict, topic: str, records: int) -> float:
    consumer = Consumer({**config, "group.id": f"{topic}-reader", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    read, began = 0, None
    deadline = time.monotonic() + 300
    try:
        while read < records and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 1.0):
                if message.error() is None:
                    began = began or time.perf_counter()
                    read += 1
    finally:
        consumer.close()
    if read < records or began is None:
        raise RuntimeError(f"read {read} of {records} records")
    return time.perf_counter() - began


def create_scram_user(plaintext: dict) -> None:
    """SCRAM-SHA-512 credentials for USER, as `kafka-configs --alter --add-config` makes them."""
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), PASSWORD.encode())
    admin = AdminClient(plaintext)  # held: a dropped client cancels its futures
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="rafka-tls-bench-"))
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(folder / "broker.pem"))
    cluster = Cluster.start(brokers=1, name=f"tls-bench-{os.getpid()}",
                            kafka_listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
                                            "SASL_SSL://127.0.0.1:0",
                            broker_config={
                                "ssl.keystore.location": str(folder / "broker.pem"),
                                "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    try:
        endpoints = dict(endpoint.split("://") for endpoint in cluster.brokers()[0]["endpoints"])
        configs = {"PLAINTEXT": {"bootstrap.servers": endpoints["PLAINTEXT"]},
                   "SSL": {"bootstrap.servers": endpoints["SSL"], "security.protocol": "SSL",
                           "ssl.ca.location": str(folder / "ca.pem")},
                   "SASL_SSL": {"bootstrap.servers": endpoints["SASL_SSL"],
                                "security.protocol": "SASL_SSL",
                                "ssl.ca.location": str(folder / "ca.pem"),
                                "sasl.mechanism": "SCRAM-SHA-512",
                                "sasl.username": USER, "sasl.password": PASSWORD}}
        create_scram_user(configs["PLAINTEXT"])
        value = os.urandom(args.record_size)
        rates: dict[str, dict[str, list[float]]] = {
            protocol: {"produce": [], "consume": []} for protocol in configs}
        for run in range(args.repeats):
            for protocol, config in configs.items():
                topic = f"bench-{protocol.lower()}-{run}"
                cluster.create_topic(topic, partitions=1, replication_factor=1)
                rates[protocol]["produce"].append(
                    args.records / produce(config, topic, args.records, value))
                rates[protocol]["consume"].append(
                    args.records / consume(config, topic, args.records))
                print(f"{protocol} run {run}: {rates[protocol]}", file=sys.stderr)
        summary = {protocol: {phase: {"records_per_s": round(statistics.median(found)),
                                      "mb_per_s": round(statistics.median(found)
                                                        * args.record_size / 1e6, 1)}
                              for phase, found in phases.items()}
                   for protocol, phases in rates.items()}
        print(json.dumps({
            "benchmark": "kafka_tls",
            "config": {"records": args.records, "record_size": args.record_size,
                       "repeats": args.repeats, "cpus": os.cpu_count()},
            **summary,
            **{f"{protocol.lower()}_over_plaintext": {
                phase: round(summary[protocol][phase]["records_per_s"]
                             / summary["PLAINTEXT"][phase]["records_per_s"], 3)
                for phase in ("produce", "consume")} for protocol in ("SSL", "SASL_SSL")},
        }, indent=2))
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
