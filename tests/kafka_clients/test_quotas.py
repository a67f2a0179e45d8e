"""Client quotas with real clients: the admin APIs round-trip, a quota set while the broker
runs holds within seconds, a producer at its byte rate is slowed to about it and told so
(throttle_time_ms, confluent-kafka's throttle_cb), and a client older than KIP-219 gets its
answer only after the wait.

One broker of its own; each test uses client ids of its own, so the quotas of one do not
hold another.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.protocol.producer import ProduceRequest

from rafka import Cluster
from tests.support.cluster import module_cluster
from tests.support.kafka_batches import encoded_records, kafka_batch
from tests.support.kafka_wire import KafkaWire
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

quotas_cluster = module_cluster("kafka-quotas", brokers=1,
                                kafka_listeners="PLAINTEXT://127.0.0.1:0")

RATE = 200_000  # bytes a second


def _alter(wire: KafkaWire, kind: str, name: str | None, key: str, value: float,
           remove: bool = False) -> Any:
    entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(validate_only=False, entries=[entry(
        entity=[entry.EntityData(entity_type=kind, entity_name=name)],
        ops=[entry.OpData(key=key, value=value, remove=remove)])])
    return wire.ask(request, 1)


def _describe(wire: KafkaWire, kind: str, name: str) -> dict[str, float]:
    component = DescribeClientQuotasRequest.ComponentData
    answer = wire.ask(DescribeClientQuotasRequest(strict=True, components=[
        component(entity_type=kind, match_type=0, match=name)]), 1)
    assert answer.error_code == 0, answer
    return {value.key: value.value for entry in answer.entries for value in entry.values}


def _produce(wire: KafkaWire, topic: str, size: int, version: int, client_id: str) -> Any:
    records = kafka_batch(encoded_records(1, b"v" * size), 1)
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    wire.correlation_id += 1
    request.with_header(correlation_id=wire.correlation_id, client_id=client_id)
    wire.socket.sendall(bytes(request.encode(version=version, header=True, framed=True)))
    return wire.receive(request.API_KEY, version)


def test_quotas_altered_are_described_and_removed(quotas_cluster: Cluster) -> None:
    with KafkaWire(quotas_cluster.bootstrap_servers()) as wire:
        answer = _alter(wire, "user", "User:CN=app", "producer_byte_rate", 1024)
        assert [entry.error_code for entry in answer.entries] == [0]
        assert _describe(wire, "user", "User:CN=app") == {"producer_byte_rate": 1024.0}
        refused = _alter(wire, "client-id", "x", "producer_byte_rate", 10.5)
        assert refused.entries[0].error_code == 42  # INVALID_REQUEST: bytes are whole
        _alter(wire, "user", "User:CN=app", "producer_byte_rate", 0, remove=True)
        assert _describe(wire, "user", "User:CN=app") == {}


def test_a_quota_set_while_the_broker_runs_throttles_within_seconds(
        quotas_cluster: Cluster) -> None:
    topic = "quota-change"
    quotas_cluster.create_topic(topic, partitions=1, replication_factor=1)
    bootstrap = quotas_cluster.bootstrap_servers()
    with KafkaWire(bootstrap) as admin, KafkaWire(bootstrap) as wire:
        assert _produce(wire, topic, 50_000, 9, "changing").throttle_time_ms == 0
        _alter(admin, "client-id", "changing", "producer_byte_rate", 1000)
        # 50 KB against 1 KB/s: a throttle time (a v9 client waits by itself, so the answer
        # comes at once, and its connection is muted for as long).
        answer = wait_until(lambda: (found := _produce(wire, topic, 50_000, 9, "changing"))
                            .throttle_time_ms > 0 and found, timeout_s=10,
                            what="a throttle time once the quota is set")
        assert answer.throttle_time_ms > 1000
        _alter(admin, "client-id", "changing", "producer_byte_rate", 0, remove=True)


def test_a_client_before_kip_219_gets_its_answer_after_the_wait(quotas_cluster: Cluster) -> None:
    topic = "quota-old-client"
    quotas_cluster.create_topic(topic, partitions=1, replication_factor=1)
    bootstrap = quotas_cluster.bootstrap_servers()
    with KafkaWire(bootstrap) as admin, KafkaWire(bootstrap) as wire:
        _alter(admin, "client-id", "old-client", "producer_byte_rate", 100_000)
        wait_until(lambda: _describe(admin, "client-id", "old-client"), what="the quota")
        time.sleep(1)  # every broker has heard of it
        for _ in range(10):
            began = time.monotonic()
            answer = _produce(wire, topic, 400_000, 5, "old-client")
            took_ms = (time.monotonic() - began) * 1000
            if answer.throttle_time_ms:
                break
        assert answer.throttle_time_ms > 0
        assert took_ms >= answer.throttle_time_ms * 0.9, (took_ms, answer.throttle_time_ms)


def test_a_producer_at_its_byte_rate_is_slowed_to_it(quotas_cluster: Cluster) -> None:
    topic = "quota-rate"
    quotas_cluster.create_topic(topic, partitions=1, replication_factor=1)
    with KafkaWire(quotas_cluster.bootstrap_servers()) as wire:
        _alter(wire, "client-id", "capped", "producer_byte_rate", RATE)
    throttles: list[float] = []
    acked = [0]
    lock = threading.Lock()

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            with lock:
                acked[0] += len(message.value())

    producer = Producer({"bootstrap.servers": quotas_cluster.bootstrap_servers(),
                         "client.id": "capped", "linger.ms": 5, "acks": 1,
                         "batch.size": 100_000, "queue.buffering.max.kbytes": 1024,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    value = b"q" * 10_000
    # From the first record: the rate is measured over ten seconds at least, so a client may
    # send about ten seconds' worth at once, and then waits that out.
    began = time.monotonic()
    while time.monotonic() < began + 12:
        _push(producer, topic, value, delivered)
    with lock:
        rate = acked[0] / (time.monotonic() - began)
    producer.flush(30)
    assert throttles and max(throttles) > 0
    assert 0.5 * RATE < rate < 2 * RATE, rate


def _push(producer: Producer, topic: str, value: bytes, delivered: Any) -> None:
    try:
        producer.produce(topic, value, on_delivery=delivered)
    except BufferError:
        producer.poll(0.01)
    producer.poll(0)
