"""The Kafka clients' side of the secured listeners' tests (TLS, SASL): where each listener
is, who is connected, and a group's read with confluent-kafka, kafka-python, aiokafka and kcat."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from typing import Any

from confluent_kafka import Consumer

from rafka import Cluster

from .kafka_clients import listener_stats

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def endpoints(cluster: Cluster, listener: str) -> list[tuple[str, int]]:
    """`(host, port)` of each broker's listener of that name, as registered."""
    return listener_endpoints(cluster.brokers(), listener)


def listener_endpoints(brokers: list[dict[str, Any]], listener: str) -> list[tuple[str, int]]:
    """`(host, port)` of each of `brokers`' listener of that name (their registrations)."""
    found = []
    for broker in brokers:
        for endpoint in broker["endpoints"]:
            name, _, address = endpoint.partition("://")
            host, _, port = address.rpartition(":")
            if name == listener:
                found.append((host, int(port)))
    return sorted(found)


def principals(cluster: Cluster) -> dict[str, set[str]]:
    """The principals connected now to every broker, by listener."""
    found: dict[str, set[str]] = {}
    for stats in listener_stats(cluster):
        for name, seen in stats["principals"].items():
            found.setdefault(name, set()).update(seen)
    return found


def confluent_read(config: dict[str, Any], topic: str, count: int,
                   **settings: Any) -> list[bytes]:
    """Read `count` values of `topic` in the group `<topic>-group`, and commit them."""
    consumer = Consumer({**config, "group.id": f"{topic}-group",
                         "auto.offset.reset": "earliest", **settings})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) >= count:
                break
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return sorted(values)


def kafka_python_read(config: dict[str, Any], topic: str, count: int,
                      **settings: Any) -> list[bytes]:
    """Read `count` values of `topic` with kafka-python in the group `<topic>-group`, sorted."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, group_id=f"{topic}-group", auto_offset_reset="earliest",
                             consumer_timeout_ms=15_000, **config, **settings)
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == count:
            break
    consumer.close()
    return sorted(values)


async def aiokafka_read(config: dict[str, Any], topic: str, count: int,
                        **settings: Any) -> list[bytes]:
    """Read `count` values of `topic` with aiokafka in the group `<topic>-group`, sorted."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, group_id=f"{topic}-group", auto_offset_reset="earliest",
                                **config, **settings)
    await consumer.start()
    values: list[bytes] = []
    try:
        async with asyncio.timeout(60):
            async for message in consumer:
                values.append(message.value)
                if len(values) == count:
                    break
    finally:
        await consumer.stop()
    return sorted(values)


def kcat_round_trip(options: list[str], topic: str, count: int) -> list[bytes]:
    """Produce `count` values with kcat (acks=all), read them back in a group; sorted."""
    def kcat(*args: str, stdin: str | None = None) -> list[str]:
        assert KCAT is not None
        result = subprocess.run([KCAT, *options, *args], input=stdin, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    kcat("-P", "-t", topic, "-X", "acks=all",
         stdin="\n".join(f"value-{i}" for i in range(count)) + "\n")
    read = kcat("-G", f"{topic}-group", "-X", "auto.offset.reset=earliest", "-f", "%s\n",
                "-c", str(count), topic)
    return sorted(line.encode() for line in read)
