"""Producing and consuming on a real cluster, without faults: acks, order, idempotence, offsets,
and typed errors. One cluster serves the whole module; each test has topics of its own."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
import ray

from rafka import Cluster
from rafka.actors.clients.partitioner import default_partition
from rafka.actors.errors import (
    BufferExhaustedError,
    ErrorCode,
    InvalidTopicError,
    NotLeaderError,
    RecordTooLargeError,
    UnknownTopicError,
    raise_for,
)
from rafka.logstore.batch import build_batch, decode_batches
from tests.support.cluster import module_cluster
from tests.support.replicas import ReplicaOnHost

shared = module_cluster("clients")


def topic_name() -> str:
    return f"topic-{uuid.uuid4().hex[:8]}"


def consume_all(cluster: Cluster, topic: str, expected: int, timeout_s: float = 60) -> list:
    consumer = cluster.consumer([topic], auto_offset_reset="earliest")
    records = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        records += consumer.poll(1000)
    consumer.close()
    return records


def created_topic(cluster: Cluster, *, partitions: int, replication_factor: int,
                  config: dict[str, Any] | None = None) -> str:
    """A new topic of this test's own (`topic_name()`), created; its name."""
    topic = topic_name()
    cluster.create_topic(topic, partitions=partitions, replication_factor=replication_factor,
                         config=config)
    return topic


def leader_replica(cluster: Cluster, topic: str, partition: int) -> tuple[int, ReplicaOnHost]:
    replica = ReplicaOnHost(cluster, topic, partition)
    return replica.broker, replica


def test_order_holds_per_partition_with_many_requests_in_flight(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=2, replication_factor=3,
                          config={"min.insync.replicas": 2})
    # Small batches and no linger: hundreds of produce requests, five in flight per partition,
    # which Ray may deliver to the async leader in any order.
    producer = shared.producer(acks="all", batch_size=2048, linger_ms=0,
                               max_in_flight_requests_per_connection=5)
    keys = [f"key-{i % 10}".encode() for i in range(20_000)]
    futures = [producer.send(topic, value=str(i).encode(), key=key) for i, key in enumerate(keys)]
    producer.flush()
    acknowledged = [future.result(30) for future in futures]
    producer.close()

    records = consume_all(shared, topic, 20_000)
    assert len(records) == 20_000
    by_partition = defaultdict(list)
    for record in records:
        by_partition[record.partition].append(record)
    for partition, found in by_partition.items():
        assert [r.offset for r in found] == list(range(len(found)))
        values = [int(r.value) for r in found]
        assert values == sorted(values), f"partition {partition} out of order"
    # Each record sits where its acknowledgement said, in its key's murmur2 partition.
    stored = {(r.partition, r.offset): r.value for r in records}
    for i, meta in enumerate(acknowledged):
        assert meta.partition == default_partition(keys[i], 2)
        assert stored[(meta.partition, meta.offset)] == str(i).encode()


def test_send_batch_puts_each_record_where_its_future_says(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=3, replication_factor=2)
    producer = shared.producer(acks="all", batch_size=4096)
    keyed = [f"key-{i % 7}".encode() for i in range(3000)]
    keyed_futures = producer.send_batch(topic, [b"k%d" % i for i in range(3000)], keys=keyed)
    keyless_futures = producer.send_batch(topic, (b"n%d" % i for i in range(3000)))
    pinned_futures = producer.send_batch(topic, [b"p%d" % i for i in range(500)], partition=2)
    producer.flush()
    producer.close()

    assert len(keyed_futures) == len(keyless_futures) == 3000 and len(pinned_futures) == 500
    stored = {(r.partition, r.offset): (r.key, r.value) for r in consume_all(shared, topic, 6500)}
    assert len(stored) == 6500
    for i, future in enumerate(keyed_futures):
        meta = future.result(0)
        assert meta.partition == default_partition(keyed[i], 3)
        assert stored[(meta.partition, meta.offset)] == (keyed[i], b"k%d" % i)
    keyless = [future.result(0) for future in keyless_futures]
    assert [stored[(m.partition, m.offset)] for m in keyless] == [
        (None, b"n%d" % i) for i in range(3000)]
    # The sticky partitioner moves on as batches fill: keyless records spread over partitions,
    # and each partition keeps their order.
    assert len({m.partition for m in keyless}) == 3
    for partition in range(3):
        offsets = [m.offset for m in keyless if m.partition == partition]
        assert offsets == sorted(offsets)
    assert {f.result(0).partition for f in pinned_futures} == {2}
    assert [f.result(0).offset for f in pinned_futures[-3:]] == [
        pinned_futures[0].result(0).offset + i for i in (497, 498, 499)]


def test_send_columns_writes_arrow_columns_in_order_beside_send(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=2, replication_factor=2)
    producer = shared.producer(acks="all", batch_size=4096)
    values = [None if i % 97 == 0 else b"c%d" % i for i in range(3000)]
    keys = [None if i % 2 else b"k%d" % i for i in range(3000)]
    before = producer.send(topic, b"before", partition=1)
    sent = producer.send_columns(topic, pa.array(values), pa.array(keys), partition=1)
    after = producer.send(topic, b"after", partition=1)
    as_strings = producer.send_columns(topic, pa.array(["s1", "s2"]), partition=0)
    producer.flush()
    producer.close()

    assert sent.partition_counts(0) == {1: 3000} and len(sent) == 3000
    assert as_strings.partition_counts(0) == {0: 2}
    stored = consume_all(shared, topic, 3004)
    in_one = [(r.key, r.value) for r in sorted(stored, key=lambda r: r.offset)
              if r.partition == 1]
    # Idempotent and in order: the columns' records between the two sent one by one.
    assert in_one == [(None, b"before"), *zip(keys, values, strict=True), (None, b"after")]
    assert before.result(0).offset + 3001 == after.result(0).offset
    assert sent[1234].result(0).offset == before.result(0).offset + 1235
    assert [r.value for r in stored if r.partition == 0] == [b"s1", b"s2"]


def test_send_columns_carries_each_records_headers(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=1, replication_factor=2)
    producer = shared.producer(acks="all", batch_size=2048)
    headers = [None if i % 3 == 0 else [("trace", b"t%d" % i), ("empty", None)][: i % 3]
               for i in range(500)]
    spark_headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    column = pa.array([None if row is None else [{"key": k, "value": v} for k, v in row]
                       for row in headers], spark_headers)
    sent = producer.send_columns(topic, pa.array([b"v%d" % i for i in range(500)]),
                                 partition=0, headers=column)
    producer.flush()
    producer.close()

    assert sent.partition_counts(0) == {0: 500}
    stored = sorted(consume_all(shared, topic, 500), key=lambda r: r.offset)
    assert [(r.value, list(r.headers)) for r in stored] == [
        (b"v%d" % i, list(row or ())) for i, row in enumerate(headers)]


def test_send_columns_refuses_what_it_cannot_send(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=1, replication_factor=1)
    producer = shared.producer(max_request_size=1000)
    with pytest.raises(TypeError, match="Arrow binary or string array"):
        producer.send_columns(topic, [b"a python list"], partition=0)
    with pytest.raises(TypeError, match="Arrow binary or string array"):
        producer.send_columns(topic, pa.array([1, 2]), partition=0)
    with pytest.raises(ValueError, match="1 keys for 2 values"):
        producer.send_columns(topic, pa.array([b"a", b"b"]), pa.array([b"k"]), partition=0)
    with pytest.raises(RecordTooLargeError, match=r"max\.request\.size=1000"):
        producer.send_columns(topic, pa.array([b"x" * 1001]), partition=0)
    with pytest.raises(RecordTooLargeError, match=r"max\.request\.size=1000"):
        producer.send_columns(topic, pa.array([b"x"]), partition=0, headers=pa.array(
            [[{"key": "big", "value": b"y" * 1000}]]))
    with pytest.raises(TypeError, match="list of structs of a string key"):
        producer.send_columns(topic, pa.array([b"a"]), partition=0, headers=pa.array([["k"]]))
    with pytest.raises(UnknownTopicError):
        producer.send_columns(topic_name(), pa.array([b"a"]), partition=0)
    with pytest.raises(ValueError, match="partition"):
        producer.send_columns(topic, pa.array([b"a"]), partition=3)
    producer.close()


def test_buffer_memory_bounds_what_waits_and_max_block_ms_bounds_the_wait(
    shared: Cluster,
) -> None:
    topic = created_topic(shared, partitions=2, replication_factor=1)
    producer = shared.producer(acks=1, batch_size=2048, buffer_memory=8192)
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], producer._accumulator.buffered_bytes)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    futures = producer.send_batch(topic, [b"x" * 100] * 5000)
    producer.flush()
    stop.set()
    sampler.join()
    producer.close()
    assert all(f.exception(0) is None for f in futures[::100])
    # It waited for room rather than queueing 580 KB; at most one batch beyond the limit.
    assert 0 < peak[0] <= 8192 + 2048
    assert len(consume_all(shared, topic, 5000)) == 5000

    # Full, and not allowed to wait: a typed error, and the records queued before it still go.
    impatient = shared.producer(acks=1, batch_size=500, buffer_memory=1000, max_block_ms=0)
    with pytest.raises(BufferExhaustedError, match=r"buffer\.memory=1000"):
        impatient.send_batch(topic, [b"y" * 100] * 50)
    impatient.flush()
    impatient.close()
    assert len(consume_all(shared, topic, 5001)) > 5000


def test_every_acks_level_writes_and_reads_back(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=1, replication_factor=3)
    for acks in (0, 1, "all"):
        producer = shared.producer(acks=acks, enable_idempotence=False)
        futures = [producer.send(topic, value=f"{acks}-{i}".encode()) for i in range(100)]
        producer.flush()
        offsets = [future.result(30).offset for future in futures]
        assert offsets == sorted(offsets) and len(set(offsets)) == 100
        producer.close()
    values = [r.value for r in consume_all(shared, topic, 300)]
    assert values == [f"{acks}-{i}".encode() for acks in (0, 1, "all") for i in range(100)]


def test_a_records_metadata_carries_its_timestamp_in_the_log(shared: Cluster) -> None:
    """As Kafka's RecordMetadata: the leader's append time on a LogAppendTime topic, the
    record's own timestamp on a CreateTime one; the same timestamp a consumer reads."""
    stamped, own = topic_name(), topic_name()
    shared.create_topic(stamped, config={"message.timestamp.type": "LogAppendTime"})
    shared.create_topic(own)
    producer = shared.producer(acks="all")
    sent_after_ms = int(time.time() * 1000)
    metadata = {topic: producer.send(topic, value=b"v", timestamp_ms=1_000).result(30)
                for topic in (stamped, own)}
    acknowledged_by_ms = int(time.time() * 1000)
    producer.close()
    assert sent_after_ms <= metadata[stamped].timestamp <= acknowledged_by_ms
    assert metadata[own].timestamp == 1_000
    for topic in (stamped, own):
        [record] = consume_all(shared, topic, 1)
        assert record.timestamp == metadata[topic].timestamp


def test_a_follower_refuses_produce_and_names_the_leader(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=1, replication_factor=3)
    state = shared.describe_topic(topic)["partitions"][0]
    follower = next(b for b in state["replicas"] if b != state["leader"])
    replica = ReplicaOnHost(shared, topic, 0, follower)
    reply = replica.produce(build_batch([(None, b"x", 0, None)]), 1)
    with pytest.raises(NotLeaderError) as error:
        raise_for(reply)
    assert error.value.leader == state["leader"]
    assert f"broker {state['leader']} is" in str(error.value)


def test_the_leader_refuses_bad_batches_and_changes_nothing(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=1, replication_factor=1,
                          config={"max.message.bytes": 10_000})
    _leader, replica = leader_replica(shared, topic, 0)
    good = build_batch([(b"k", b"v", 0, None)])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    too_large = build_batch([(None, b"x" * 20_000, 0, None)])
    for payload, code in [
        (b"", ErrorCode.CORRUPT_MESSAGE),
        (b"\x00" * 10, ErrorCode.CORRUPT_MESSAGE),
        (bytes(corrupt), ErrorCode.CORRUPT_MESSAGE),
        (too_large, ErrorCode.MESSAGE_TOO_LARGE),
    ]:
        reply = replica.produce(payload, 1)
        assert reply.code == code, reply
    reply = replica.produce(good, 7)
    assert reply.code == ErrorCode.INVALID_REQUIRED_ACKS
    assert replica.describe()["log_end_offset"] == 0
    assert raise_for(replica.produce(good, 1)).base_offset == 0


def test_a_retried_idempotent_batch_is_acknowledged_but_not_appended_twice(
    shared: Cluster,
) -> None:
    topic = created_topic(shared, partitions=1, replication_factor=3)
    _leader, replica = leader_replica(shared, topic, 0)
    records = [(None, f"r{i}".encode(), 0, None) for i in range(10)]
    batch = build_batch(records, producer_id=42, producer_epoch=0, base_sequence=0)
    first = raise_for(replica.produce(batch, -1))
    retry = raise_for(replica.produce(batch, -1))
    assert retry.base_offset == first.base_offset == 0
    assert replica.describe()["log_end_offset"] == 10


def test_the_leader_appends_idempotent_batches_in_sequence_order_whatever_the_arrival(
    shared: Cluster,
) -> None:
    topic = created_topic(shared, partitions=1, replication_factor=1)
    _leader, replica = leader_replica(shared, topic, 0)
    first = build_batch([(None, b"first", 0, None)] * 5, producer_id=7, base_sequence=0,
                        producer_epoch=0)
    second = build_batch([(None, b"second", 0, None)] * 5, producer_id=7, base_sequence=5,
                         producer_epoch=0)
    later = replica.produce_async(second, 1)  # arrives first
    time.sleep(0.2)
    earlier = replica.produce_async(first, 1)
    assert raise_for(ray.get(earlier)[0]).base_offset == 0
    assert raise_for(ray.get(later)[0]).base_offset == 5
    reply = replica.fetch(0, 1 << 20)
    assert [r.value for r in decode_batches(reply.records)] == [b"first"] * 5 + [b"second"] * 5


def test_consumer_seeks_rewinds_skips_and_reads_offsets(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=1, replication_factor=2)
    producer = shared.producer()
    base = int(time.time() * 1000)
    for i in range(50):
        producer.send(topic, value=str(i).encode(), timestamp_ms=base + i * 1000)
    producer.flush()
    producer.close()
    consumer = shared.consumer([topic], auto_offset_reset="earliest")
    assert consumer.beginning_offsets([(topic, 0)]) == {(topic, 0): 0}
    assert consumer.end_offsets([(topic, 0)]) == {(topic, 0): 50}
    assert consumer.offsets_for_times({(topic, 0): base + 10_500}) == {(topic, 0): 11}
    assert consumer.offsets_for_times({(topic, 0): base + 99_000}) == {(topic, 0): None}

    def read(n):
        got = []
        while len(got) < n:
            got += consumer.poll(2000, max_records=n - len(got))
        return [int(r.value) for r in got]

    assert read(10) == list(range(10))
    consumer.seek(topic, 0, 40)  # skip
    assert read(5) == list(range(40, 45))
    consumer.seek(topic, 0, 3)  # rewind
    assert read(2) == [3, 4]
    consumer.seek_to_end()
    assert consumer.poll(300) == []
    assert consumer.position(topic, 0) == 50
    consumer.seek_to_beginning()
    assert read(1) == [0]
    consumer.close()


def test_latest_reset_reads_only_new_records(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=1, replication_factor=1)
    producer = shared.producer()
    producer.send(topic, value=b"old").result(30)
    consumer = shared.consumer([topic], auto_offset_reset="latest")
    assert consumer.position(topic, 0) == 1
    producer.send(topic, value=b"new").result(30)
    got = []
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        got = consumer.poll(1000)
    assert [r.value for r in got] == [b"new"]
    producer.close()


def test_typed_errors_for_bad_client_input(shared: Cluster) -> None:
    topic = created_topic(shared, partitions=2, replication_factor=1)
    producer = shared.producer()
    with pytest.raises(UnknownTopicError, match="create it first"):
        producer.send("no-such-topic", value=b"x")
    with pytest.raises(TypeError, match="bytes"):
        producer.send(topic, value="text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition"):
        producer.send(topic, value=b"x", partition=5)
    with pytest.raises(RecordTooLargeError, match=r"max\.request\.size"):
        producer.send(topic, value=b"x" * 2_000_000)
    producer.close()
    for bad in ("../etc", "a/b", "", "x" * 300, "white space"):
        with pytest.raises(InvalidTopicError):
            shared.create_topic(bad)
