"""A producer whose id is derived and whose sequences resume an earlier attempt's: each record
once however many attempts write it, one after another or at the same time."""

from __future__ import annotations

import threading
import uuid

import pytest

from rafka import Cluster
from rafka.actors.clients.sequenced_producer import (
    DERIVED_PRODUCER_ID_BIT,
    SequencedProducer,
    derive_producer_id,
)
from rafka.actors.errors import RafkaError
from tests.support.cluster import module_cluster, stored_records

shared = module_cluster("sequenced")


def attempt(cluster: Cluster, producer_id: int, topic: str, records: dict[int, list[bytes]],
            resumed: threading.Barrier | None = None, fresh: bool = False,
            **config) -> dict[int, int]:
    """One attempt at writing `records` (per partition): resume, send the rest, flush.
    `resumed`: waited on after resuming (to start attempts' sends together). `fresh`: start
    at sequence 0 without asking the leaders, as a write's first attempt does."""
    producer = SequencedProducer(cluster.namespace, producer_id, acks="all", **config)
    try:
        written = producer.start_fresh(topic) if fresh else producer.resume(topic)
        if resumed is not None:
            resumed.wait(30)
        sent = [producer.send_batch(topic, values[written[partition]:], partition=partition)
                for partition, values in records.items() if values[written[partition]:]]
        producer.flush(60)
        for records_sent in sent:
            records_sent.partition_counts(60)
        return written
    finally:
        producer.close(60)


def test_derived_ids_are_stable_and_apart_from_random_ones() -> None:
    first = derive_producer_id("sink/batch-7/3")
    assert first == derive_producer_id("sink/batch-7/3")
    assert first != derive_producer_id("sink/batch-7/4")
    assert DERIVED_PRODUCER_ID_BIT <= first < 2 * DERIVED_PRODUCER_ID_BIT
    with pytest.raises(ValueError, match="not a derived one"):
        SequencedProducer("any-namespace", 12345)


def test_a_later_attempt_sends_only_what_the_earlier_ones_did_not(shared: Cluster) -> None:
    topic = f"resume-{uuid.uuid4().hex[:6]}"
    shared.create_topic(topic, partitions=3, replication_factor=2)
    producer_id = derive_producer_id(topic)
    records = {0: [f"a{i}".encode() for i in range(500)],
               1: [f"b{i}".encode() for i in range(120)],
               2: []}
    # The first attempt got through part of each partition, and nothing of partition 2.
    partial = {0: records[0][:321], 1: records[1][:7], 2: []}
    assert attempt(shared, producer_id, topic, partial, batch_size=1024) == {0: 0, 1: 0, 2: 0}
    assert attempt(shared, producer_id, topic, records) == {0: 321, 1: 7, 2: 0}
    assert attempt(shared, producer_id, topic, records) == {0: 500, 1: 120, 2: 0}
    stored = stored_records(shared, topic, sum(map(len, records.values())))
    for partition, values in records.items():
        assert [r.value for r in stored if r.partition == partition] == values


def test_an_attempt_that_starts_fresh_after_another_stored_records_stores_none_twice(
    shared: Cluster,
) -> None:
    """A write's first attempt does not ask the leaders. Should another attempt have begun
    before it after all (Spark runs a stage again, and numbers its attempts from 0 again), the
    leaders' sequence check refuses what is stored already: the attempt fails, and the next,
    which asks, writes the rest."""
    topic = f"fresh-{uuid.uuid4().hex[:6]}"
    shared.create_topic(topic, partitions=2, replication_factor=2)
    producer_id = derive_producer_id(topic)
    records = {0: [f"a{i}".encode() for i in range(500)],
               1: [f"b{i}".encode() for i in range(40)]}
    partial = {0: records[0][:321], 1: records[1][:40]}
    assert attempt(shared, producer_id, topic, partial, batch_size=1024,
                   fresh=True) == {0: 0, 1: 0}
    with pytest.raises(RafkaError, match="sequence"):
        attempt(shared, producer_id, topic, records, fresh=True)
    assert attempt(shared, producer_id, topic, records) == {0: 321, 1: 40}
    stored = stored_records(shared, topic, sum(map(len, records.values())))
    for partition, values in records.items():
        assert [r.value for r in stored if r.partition == partition] == values


def test_attempts_writing_at_once_store_each_record_once(shared: Cluster) -> None:
    """A zombie attempt (a task Spark gave up on that still runs) beside its retry: both send
    the same records under the same numbers, in batches of other sizes, in whatever
    interleaving; the leader takes each sequence once. An attempt that finds its numbers
    taken fails, and is tried again (as Spark retries a task) until one finds all written."""
    topic = f"zombie-{uuid.uuid4().hex[:6]}"
    shared.create_topic(topic, partitions=1, replication_factor=2)
    producer_id = derive_producer_id(topic)
    records = {0: [f"r{i}".encode() for i in range(3000)]}
    failures: list[Exception] = []
    finished: list[int] = []
    together = threading.Barrier(2)  # the first attempts start sending at once

    def writer(batch_size: int) -> None:
        for number in range(20):
            try:
                attempt(shared, producer_id, topic, records,
                        together if number == 0 else None, batch_size=batch_size,
                        linger_ms=0)
                finished.append(batch_size)
                return
            except Exception as error:  # another attempt wrote these numbers first
                failures.append(error)

    threads = [threading.Thread(target=writer, args=(size,)) for size in (512, 700)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(finished) == [512, 700], failures
    assert failures, "the two attempts never met: the test proves nothing"
    assert all(type(error).__name__ == "OutOfOrderSequenceError" for error in failures)
    assert [r.value for r in stored_records(shared, topic, 3000)] == records[0]
