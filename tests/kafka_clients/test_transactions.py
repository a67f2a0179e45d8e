"""Kafka's transactions through rafka's Kafka listener, with Kafka clients unmodified:
kafka-python's, confluent-kafka's and aiokafka's transactional producers commit and abort
across three partitions and each client's read_committed consumer reads exactly what was
committed; with kafka-python, what read_uncommitted consumers see, offsets committed in a
transaction, a zombie producer fenced by a newer instance, a transaction its producer
abandoned aborted by the coordinator at its timeout, Kafka's errors for wrong requests, and
KIP-664's admin tooling (listing, describing, describing producers, aborting)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import confluent_kafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import AbortTransactionSpec, TransactionState
from kafka.errors import (
    KafkaError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
    TransactionCoordinatorFencedError,
)
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)
from kafka.structs import OffsetAndMetadata

from rafka import Cluster
from rafka.actors.errors import ErrorCode
from tests.support.faults import host_pids, paused
from tests.support.kafka_clients import PARTITIONS, new_topic
from tests.support.kafka_wire import KafkaWire
from tests.support.waiting import wait_until


def transactional_producer(cluster: Cluster, transactional_id: str, **config: object
                           ) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers(),
                             transactional_id=transactional_id, **config)
    producer.init_transactions()
    return producer


def producer_id_and_epoch(producer: KafkaProducer) -> tuple[int, int]:
    """The id and epoch kafka-python's transactional producer was given (it keeps no public
    accessor for them)."""
    current = producer._transaction_manager.producer_id_and_epoch
    return current.producer_id, current.epoch


def consume_all(cluster: Cluster, topic: str, isolation_level: str, expected: int,
                wait_s: float = 30.0) -> list[tuple[int, int, bytes]]:
    """`(partition, offset, value)` of what a consumer reads from the start, once it has
    `expected` records (and a further second, to see that nothing more comes)."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers(),
                             isolation_level=isolation_level, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    found: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500)
            for records in batch.values():
                found += [(r.partition, r.offset, r.value) for r in records]
            if len(found) >= expected and not batch:
                break
    finally:
        consumer.close()
    return sorted(found)


def values(found: list[tuple[int, int, bytes]]) -> list[bytes]:
    return sorted(value for _, _, value in found)


def test_committed_records_are_read_and_aborted_ones_are_not(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "txn-commit-abort")
    producer = transactional_producer(kafka_cluster, f"txn-{uuid.uuid4().hex}")
    try:
        producer.begin_transaction()
        for i in range(30):
            producer.send(topic, value=b"committed-%d" % i, partition=i % PARTITIONS)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(30):
            producer.send(topic, value=b"aborted-%d" % i, partition=i % PARTITIONS)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, value=b"after", partition=0)
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)
    committed = sorted([b"committed-%d" % i for i in range(30)] + [b"after"])
    assert values(consume_all(kafka_cluster, topic, "read_committed", 31)) == committed
    # read_uncommitted sees the aborted records too, never the markers.
    everything = consume_all(kafka_cluster, topic, "read_uncommitted", 61)
    assert values(everything) == sorted(committed + [b"aborted-%d" % i for i in range(30)])
    # Each transaction's marker takes an offset in every partition it wrote to.
    last_offsets = {p: max(o for q, o, _ in everything if q == p) for p in range(PARTITIONS)}
    assert last_offsets[1] == 20  # 0-9 committed, 10 the commit marker, 11-20 aborted


def write_past_an_open_transaction(producer: KafkaProducer, plain: KafkaProducer, topic: str,
                                   in_transaction: bytes, after: bytes) -> None:
    """`in_transaction` to partition 0 of `topic` in a transaction `producer` begins and leaves
    open, then `after` from the non-transactional `plain`, acknowledged."""
    producer.begin_transaction()
    producer.send(topic, value=in_transaction, partition=0)
    producer.flush()
    plain.send(topic, value=after, partition=0).get(timeout=30)


def test_a_read_committed_consumer_waits_for_the_transaction_to_end(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "txn-open")
    producer = transactional_producer(kafka_cluster, f"txn-{uuid.uuid4().hex}")
    plain = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")
    try:
        write_past_an_open_transaction(producer, plain, topic, b"in-transaction", b"after-it")
        # The open transaction holds the last stable offset before both records: that is
        # where "latest" is for read_committed consumers, Kafka's and rafka's.
        tp = TopicPartition(topic, 0)
        for isolation_level, latest in (("read_committed", 0), ("read_uncommitted", 2)):
            consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap_servers(),
                                     isolation_level=isolation_level)
            try:
                assert consumer.end_offsets([tp]) == {tp: latest}
            finally:
                consumer.close()
            ours = kafka_cluster.consumer(isolation_level=isolation_level)
            assert ours.end_offsets([(topic, 0)])[(topic, 0)] == latest
            ours.close()
        assert consume_all(kafka_cluster, topic, "read_committed", 1, wait_s=3) == []
        assert values(consume_all(kafka_cluster, topic, "read_uncommitted", 2)) == [
            b"after-it", b"in-transaction"]
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)
        plain.close(timeout=10)
    assert values(consume_all(kafka_cluster, topic, "read_committed", 2)) == [
        b"after-it", b"in-transaction"]


def test_offsets_committed_in_a_transaction_count_only_if_it_commits(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "txn-offsets")
    group = f"txn-group-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(kafka_cluster, f"txn-{uuid.uuid4().hex}")
    tp = TopicPartition(topic, 0)
    try:
        producer.begin_transaction()
        producer.send(topic, value=b"output", partition=1)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(42, "meta", -1)}, group)
        producer.abort_transaction()
        assert committed_offset(kafka_cluster, group, tp) is None
        producer.begin_transaction()
        producer.send(topic, value=b"output", partition=1)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(17, "meta", -1)}, group)
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)
    # EndTxn is answered once the commit is decided; the markers follow, as in Kafka.
    wait_until(lambda: committed_offset(kafka_cluster, group, tp) == 17, 30,
               "the committed transaction's offset")


def committed_offset(cluster: Cluster, group: str, tp: TopicPartition) -> int | None:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers(), group_id=group,
                             enable_auto_commit=False)
    try:
        return consumer.committed(tp)
    finally:
        consumer.close()


def test_a_zombie_producer_is_fenced_and_its_transaction_aborted(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "txn-zombie")
    transactional_id = f"txn-{uuid.uuid4().hex}"
    zombie = transactional_producer(kafka_cluster, transactional_id)
    successor = None
    try:
        zombie.begin_transaction()
        zombie.send(topic, value=b"zombie", partition=2)
        zombie.flush()
        # A new instance with the same id: its init aborts the open transaction and fences
        # the old epoch.
        successor = transactional_producer(kafka_cluster, transactional_id)
        successor.begin_transaction()
        successor.send(topic, value=b"successor", partition=2)
        successor.commit_transaction()
        with pytest.raises(ProducerFencedError):
            zombie.send(topic, value=b"zombie-again", partition=2)
            zombie.commit_transaction()
    finally:
        zombie.close(timeout=10)
        if successor is not None:
            successor.close(timeout=10)
    assert values(consume_all(kafka_cluster, topic, "read_committed", 1)) == [b"successor"]


def test_an_abandoned_transaction_is_aborted_at_its_timeout(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "txn-timeout")
    abandoned = transactional_producer(kafka_cluster, f"txn-{uuid.uuid4().hex}",
                                       transaction_timeout_ms=2000)
    plain = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")
    try:
        write_past_an_open_transaction(abandoned, plain, topic, b"abandoned", b"later")
        # No commit, no abort: the coordinator aborts it, and read_committed moves on.
        found = consume_all(kafka_cluster, topic, "read_committed", 1, wait_s=30)
    finally:
        plain.close(timeout=10)
        abandoned.close(timeout=1)
    assert values(found) == [b"later"]


def test_an_admin_lists_and_describes_transactions_as_kafkas_tools_do(
    kafka_cluster: Cluster,
) -> None:
    """What `kafka-transactions.sh list`, `describe` and `describe-producers` show (KIP-664):
    a transaction under way, its partitions and producer, by Kafka's filters, and then
    committed."""
    topic = new_topic(kafka_cluster, "txn-admin")
    transactional_id = f"txn-{uuid.uuid4().hex}"
    producer = transactional_producer(kafka_cluster, transactional_id,
                                      transaction_timeout_ms=50_000)
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers())

    def listed(**filters: object) -> dict[str, tuple[int, TransactionState]]:
        return {t.transactional_id: (t.producer_id, t.state)
                for listings in admin.list_transactions(**filters).values()
                for t in listings}

    try:
        producer_id, epoch = producer_id_and_epoch(producer)
        assert listed()[transactional_id] == (producer_id, TransactionState.EMPTY)
        before = int(time.time() * 1000)
        producer.begin_transaction()
        producer.send(topic, value=b"a", partition=0)
        producer.send(topic, value=b"b", partition=2)
        producer.flush()

        ongoing = (producer_id, TransactionState.ONGOING)
        assert listed()[transactional_id] == ongoing
        assert listed(state_filters=["Ongoing"])[transactional_id] == ongoing
        assert transactional_id not in listed(state_filters=["CompleteCommit", "Empty"])
        assert listed(producer_id_filters=[producer_id]) == {transactional_id: ongoing}
        assert transactional_id not in listed(producer_id_filters=[producer_id + 1])
        assert listed(duration_filter_ms=0)[transactional_id] == ongoing  # running > 0 ms
        assert transactional_id not in listed(duration_filter_ms=3_600_000)

        described = admin.describe_transactions([transactional_id])[transactional_id]
        assert described.state == TransactionState.ONGOING
        assert (described.producer_id, described.producer_epoch) == (producer_id, epoch)
        assert described.transaction_timeout_ms == 50_000
        assert before <= described.transaction_start_time_ms <= int(time.time() * 1000)
        assert described.topic_partitions == {TopicPartition(topic, 0),
                                              TopicPartition(topic, 2)}
        # Each partition's leader knows the producer, and where its open transaction began.
        producers = admin.describe_producers([TopicPartition(topic, p) for p in (0, 1, 2)])
        assert producers[TopicPartition(topic, 1)].active_producers == []
        for partition in (0, 2):
            [state] = producers[TopicPartition(topic, partition)].active_producers
            assert (state.producer_id, state.producer_epoch, state.last_sequence) == (
                producer_id, epoch, 0)
            assert state.current_transaction_start_offset == 0
            assert before <= state.last_timestamp <= int(time.time() * 1000)

        producer.commit_transaction()
        wait_until(lambda: admin.describe_transactions([transactional_id])[transactional_id]
                   .state == TransactionState.COMPLETE_COMMIT, 30, "the commit completed")
        assert listed(state_filters=["CompleteCommit"])[transactional_id] == (
            producer_id, TransactionState.COMPLETE_COMMIT)
        wait_until(lambda: admin.describe_producers([TopicPartition(topic, 0)])[
            TopicPartition(topic, 0)].active_producers[0].current_transaction_start_offset
            == -1, 30, "the commit marker written, so no transaction is open")
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions([f"never-used-{uuid.uuid4().hex}"])
    finally:
        admin.close()
        producer.close(timeout=10)


def test_an_admin_aborts_a_hanging_transaction_at_its_partition(kafka_cluster: Cluster) -> None:
    """`kafka-transactions.sh abort`: the abort marker written at the partition by the admin
    (for a transaction its coordinator lost), with the coordinator epoch the partition knows;
    an older one is refused, as a late coordinator's would be."""
    topic = new_topic(kafka_cluster, "txn-admin-abort")
    tp = TopicPartition(topic, 0)
    producer = transactional_producer(kafka_cluster, f"txn-{uuid.uuid4().hex}",
                                      transaction_timeout_ms=60_000)
    plain = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers())
    try:
        producer_id, epoch = producer_id_and_epoch(producer)
        # A committed transaction first, so that the partition knows the coordinator's epoch.
        producer.begin_transaction()
        producer.send(topic, value=b"committed", partition=0)
        producer.commit_transaction()
        write_past_an_open_transaction(producer, plain, topic, b"hanging", b"after")
        assert values(consume_all(kafka_cluster, topic, "read_committed", 1, wait_s=3)) == [
            b"committed"]  # the open transaction holds back what follows it

        [known] = [state for state in admin.describe_producers([tp])[tp].active_producers
                   if state.producer_id == producer_id]
        assert known.current_transaction_start_offset >= 0 and known.coordinator_epoch >= 0
        with pytest.raises(TransactionCoordinatorFencedError):
            admin.abort_transaction(AbortTransactionSpec(tp, producer_id, epoch,
                                                         known.coordinator_epoch - 1))
        admin.abort_transaction(AbortTransactionSpec(tp, producer_id, epoch,
                                                     known.coordinator_epoch))
        assert values(consume_all(kafka_cluster, topic, "read_committed", 2)) == [
            b"after", b"committed"]
        [known] = [state for state in admin.describe_producers([tp])[tp].active_producers
                   if state.producer_id == producer_id]
        assert known.current_transaction_start_offset == -1
    finally:
        admin.close()
        plain.close(timeout=10)
        with contextlib.suppress(KafkaError):
            producer.abort_transaction()
        producer.close(timeout=10)


def test_the_coordinator_answers_wrong_requests_with_kafkas_errors(kafka_cluster: Cluster) -> None:
    transactional_id = f"txn-{uuid.uuid4().hex}"
    bootstrap = kafka_cluster.bootstrap_servers().split(",")[0]
    with KafkaWire(bootstrap) as wire:
        assert wire.ask(FindCoordinatorRequest(key="x", key_type=2), 1).error_code == (
            ErrorCode.INVALID_REQUEST)

        def coordinator() -> object:
            found = wire.ask(FindCoordinatorRequest(key=transactional_id, key_type=1), 1)
            return found if found.error_code == 0 else None

        found = wait_until(coordinator, 60, "a transaction coordinator")
    with KafkaWire((found.host, found.port)) as wire:
        # The coordinator loads its partition first (a moment, on a new cluster), as Kafka's.
        too_long = wait_until(lambda: settled(wire.ask(InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=3_600_000), 1)), 60,
            "the coordinator loaded")
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        unknown = wire.ask(EndTxnRequest(transactional_id=transactional_id, producer_id=5,
                                         producer_epoch=0, committed=True), 1)
        assert unknown.error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        started = wire.ask(InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=60_000), 1)
        assert started.error_code == 0 and started.producer_epoch == 0
        topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        stale = wire.ask(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=started.producer_id, v3_and_below_producer_epoch=-5,
            v3_and_below_topics=[topic(name="t", partitions=[0])]), 3)
        [[_, [[_, error]]]] = stale.results_by_topic_v3_and_below
        assert error == ErrorCode.PRODUCER_FENCED
        nothing_to_commit = wire.ask(EndTxnRequest(
            transactional_id=transactional_id, producer_id=started.producer_id,
            producer_epoch=started.producer_epoch, committed=True), 1)
        assert nothing_to_commit.error_code == ErrorCode.INVALID_TXN_STATE


def settled(answer: object) -> object | None:
    """The answer, unless it says to ask again (the coordinator is loading or moving)."""
    retriable = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return None if answer.error_code in retriable else answer


# ---------------------------------------------------------- confluent-kafka and aiokafka

COMMITTED = [b"committed-%d" % i for i in range(30)]
ABORTED = [b"aborted-%d" % i for i in range(30)]


def test_confluent_kafkas_transactions(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "txn-confluent")
    producer = confluent_kafka.Producer({
        "bootstrap.servers": kafka_cluster.bootstrap_servers(),
        "transactional.id": f"txn-{uuid.uuid4().hex}"})
    producer.init_transactions(60)
    for batch, commit in ((COMMITTED, True), (ABORTED, False)):
        producer.begin_transaction()
        for i, value in enumerate(batch):
            producer.produce(topic, value=value, partition=i % PARTITIONS)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.flush(60)
            producer.abort_transaction(60)
    assert producer.flush(10) == 0

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": kafka_cluster.bootstrap_servers(), "group.id": uuid.uuid4().hex,
        "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    found: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if len(found) >= len(COMMITTED):
                    break
                continue
            if message.error() is None:
                found.append(message.value())
    finally:
        consumer.close()
    assert sorted(found) == sorted(COMMITTED)


def test_aiokafkas_transactions(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "txn-aiokafka")

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(),
                                    transactional_id=f"txn-{uuid.uuid4().hex}")
        await producer.start()
        try:
            async with producer.transaction():
                for i, value in enumerate(COMMITTED):
                    await producer.send(topic, value=value, partition=i % PARTITIONS)
            await producer.begin_transaction()
            for i, value in enumerate(ABORTED):
                await producer.send_and_wait(topic, value=value, partition=i % PARTITIONS)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers(),
                                    isolation_level="read_committed",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        found: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                found += [record.value for records in batch.values() for record in records]
                if len(found) >= len(COMMITTED) and not batch:
                    break
        finally:
            await consumer.stop()
        return found

    assert sorted(asyncio.run(scenario())) == sorted(COMMITTED)


# ------------------------------------------------------------------ the coordinator dies


def test_a_new_coordinator_finishes_the_commit_its_dead_predecessor_began(start_cluster) -> None:
    """The coordinator's broker is killed after EndTxn is answered and before every marker is
    written (one partition leader's hosts are paused meanwhile): the broker that takes over
    its `__transaction_state` partition loads the prepared commit and writes the markers."""
    cluster = start_cluster(3, kafka_listeners="PLAINTEXT://127.0.0.1:0")
    topic = new_topic(cluster, "txn-coordinator-dies")
    transactional_id = f"txn-{uuid.uuid4().hex}"
    producer = transactional_producer(cluster, transactional_id)
    with KafkaWire(cluster.bootstrap_servers().split(",")[0]) as wire:
        coordinator = wire.ask(FindCoordinatorRequest(key=transactional_id, key_type=1),
                               1).node_id
    leaders = {p["partition"]: p["leader"] for p in cluster.describe_topic(topic)["partitions"]}
    stalled = next(leader for leader in leaders.values() if leader != coordinator)
    sent = [b"record-%d" % i for i in range(30)]
    try:
        producer.begin_transaction()
        for i, value in enumerate(sent):
            producer.send(topic, value=value, partition=i % PARTITIONS)
        producer.flush()
        with paused(host_pids(cluster, stalled)):
            producer.commit_transaction()  # answered once PrepareCommit is stored
            cluster.kill_broker(coordinator)
    finally:
        producer.close(timeout=5)
    assert values(consume_all(cluster, topic, "read_committed", len(sent), wait_s=90)) == sorted(
        sent)
    # The id's next producer starts at once: the transaction is complete, not pending.
    successor = transactional_producer(cluster, transactional_id)
    successor.close(timeout=5)
