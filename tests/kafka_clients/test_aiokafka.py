"""aiokafka, unmodified, against rafka's Kafka listener: an idempotent acks=all producer read
back by rafka, and a group of two that rebalances and resumes from its commits."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from rafka import Cluster
from tests.support.kafka_clients import (
    PARTITIONS,
    MemberThread,
    group_scenario,
    new_topic,
    read_with_rafka,
    sample_records,
)


def test_aiokafka_produces_and_rafka_reads_the_same_records(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "from-aiokafka")

    async def produce() -> list[tuple]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(),
                                    acks="all", enable_idempotence=True, linger_ms=5)
        await producer.start()
        try:
            futures = [(record, await producer.send(topic, key=record[0], value=record[1],
                                                    timestamp_ms=record[2],
                                                    headers=record[3]))
                       for record in sample_records(300)]
            sent = []
            for (key, value, timestamp, headers), future in futures:
                metadata = await future
                sent.append((metadata.partition, metadata.offset, key, value, timestamp,
                             headers))
            return sent
        finally:
            await producer.stop()

    sent = asyncio.run(produce())
    assert {partition for partition, *_ in sent} == set(range(PARTITIONS))
    assert read_with_rafka(kafka_cluster, topic, len(sent)) == sorted(sent)


class AiokafkaMember(MemberThread):
    def consume(self, stop: threading.Event) -> None:
        asyncio.run(self._consume(stop))

    async def _consume(self, stop: threading.Event) -> None:
        consumer = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap,
                                    group_id=self.group, auto_offset_reset="earliest",
                                    enable_auto_commit=False, session_timeout_ms=10_000,
                                    heartbeat_interval_ms=1_000)
        await consumer.start()
        try:
            while not stop.is_set():
                for records in (await consumer.getmany(timeout_ms=300)).values():
                    self.read += [record.value for record in records]
                # A rebalance may be under way: the records are read again, as in Kafka.
                with contextlib.suppress(KafkaError):
                    await consumer.commit()
                self.owned = {tp.partition for tp in consumer.assignment()}
        finally:
            await consumer.stop()  # leaves the group


def test_an_aiokafka_group_shares_rebalances_and_resumes_from_its_commits(
    kafka_cluster: Cluster,
) -> None:
    group_scenario(kafka_cluster, new_topic(kafka_cluster, "aiokafka-group"), "aiokafka-group",
                   AiokafkaMember)
