"""KIP-890, part 1, over Kafka's wire: a partition leader takes a transaction's first batch in
its partition only once the transaction's coordinator says that the partition is in it. The
anomaly Jepsen found in Kafka's protocol, analysing Bufstream: a produce of transaction N,
delayed in the network, arrives after N committed. Before KIP-890 the leader appended it, and
it opened a transaction no coordinator knew of, holding every read_committed consumer of the
partition; here it is refused, and nothing of it is ever read.

The requests are sent by hand (`KafkaWire`), since no client library can be made to delay one
of its own produces past its commit."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from kafka import KafkaProducer
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from kafka.record.memory_records import MemoryRecordsBuilder

from rafka import Cluster
from rafka.actors.errors import ErrorCode
from rafka.actors.offsets_topic import OFFSETS_TOPIC, offsets_partition
from tests.kafka_clients.test_kafka_answers import address_of
from tests.kafka_clients.test_transactions import consume_all, settled, values
from tests.support.kafka_clients import PARTITIONS, new_topic
from tests.support.kafka_wire import KafkaWire
from tests.support.waiting import wait_until


def transactional_batch(value: bytes, producer_id: int, producer_epoch: int,
                        sequence: int) -> bytes:
    builder = MemoryRecordsBuilder(2, 0, 1 << 16, transactional=True, producer_id=producer_id,
                                   producer_epoch=producer_epoch, base_sequence=sequence)
    builder.append(0, None, value, [])
    builder.close()
    return bytes(builder.buffer())


def produce(wire: KafkaWire, transactional_id: str, topic: str, partition: int,
            records: bytes) -> int:
    """The error code the leader answers a produce of `records` to `topic-partition`."""
    answer = wire.ask(ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout_ms=30_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(
                    index=partition, records=records)])]), 9)
    return answer.responses[0].partition_responses[0].error_code


def final_answer(ask: Callable[[], int]) -> int:
    """What `ask` answers once its answer is not one a client retries: until the coordinator
    has written the end of the transaction (CompleteCommit, after its markers), a leader
    cannot verify against it, and says so as Kafka's does."""
    retried = (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    deadline = time.monotonic() + 30
    while (code := ask()) in retried:
        assert time.monotonic() < deadline, f"still answered {code} after 30 s"
        time.sleep(0.1)
    return code


def last_stable_offset(wire: KafkaWire, topic: str, partition: int,
                       isolation_level: int = 1) -> int:
    """The partition's last stable offset (its high watermark with `isolation_level` 0)."""
    answer = wire.ask(ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=partition, current_leader_epoch=-1, timestamp=-1)])]), 4)
    return answer.topics[0].partitions[0].offset


class Transactions:
    """One transactional id's requests to its coordinator."""

    def __init__(self, cluster: Cluster, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        with KafkaWire(cluster.bootstrap_servers().split(",")[0]) as wire:
            def coordinator() -> Any:
                found = wire.ask(FindCoordinatorRequest(key=transactional_id, key_type=1), 1)
                return found if found.error_code == 0 else None

            found = wait_until(coordinator, 60, "a transaction coordinator")
        self.coordinator_id = found.node_id
        self.wire = KafkaWire((found.host, found.port))
        started = wait_until(lambda: settled(self.wire.ask(InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=60_000), 1)), 60,
            "a producer id")
        assert started.error_code == 0
        self.producer_id, self.producer_epoch = started.producer_id, started.producer_epoch

    def add_partitions(self, topic: str, partitions: list[int]) -> None:
        topic_entry = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        answer = self.wire.ask(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=[topic_entry(name=topic, partitions=partitions)]), 3)
        assert {error for _, results in answer.results_by_topic_v3_and_below
                for _, error in results} == {0}

    def verify(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """AddPartitionsToTxn v4 with `verify_only`, as a Kafka broker asks it: each
        partition's error."""
        transaction = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
        answer = self.wire.ask(AddPartitionsToTxnRequest(transactions=[transaction(
            transactional_id=self.transactional_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, verify_only=True,
            topics=[transaction.AddPartitionsToTxnTopic(name=topic, partitions=partitions)])]),
            4)
        assert answer.error_code == 0
        [result] = answer.results_by_transaction
        return {partition.partition_index: partition.partition_error_code
                for topic_result in result.topic_results
                for partition in topic_result.results_by_partition}

    def add_offsets(self, group: str) -> None:
        answer = self.wire.ask(AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, group_id=group), 1)
        assert answer.error_code == 0

    def commit(self) -> None:
        answer = self.wire.ask(EndTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, committed=True), 1)
        assert answer.error_code == 0

    def batch(self, value: bytes, sequence: int) -> bytes:
        return transactional_batch(value, self.producer_id, self.producer_epoch, sequence)

    def close(self) -> None:
        self.wire.close()


def test_a_produce_delayed_past_its_transactions_commit_is_refused(
        kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "txn-late-produce")
    leaders = {p["partition"]: p["leader"]
               for p in kafka_cluster.describe_topic(topic)["partitions"]}
    transactions = Transactions(kafka_cluster, f"txn-{uuid.uuid4().hex}")
    # The leaders that are not the coordinator's broker ask it over its control endpoint.
    assert set(leaders.values()) - {transactions.coordinator_id}
    wires = {p: KafkaWire(address_of(kafka_cluster, leader)) for p, leader in leaders.items()}
    plain = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")
    try:
        # Transaction N writes to every partition; a second produce of it, to each, is held
        # back (sequence 1, the transaction's epoch) while N commits.
        transactions.add_partitions(topic, list(range(PARTITIONS)))
        for partition, wire in wires.items():
            assert produce(wire, transactions.transactional_id, topic, partition,
                           transactions.batch(b"n-%d" % partition, 0)) == 0
        late = {p: transactions.batch(b"late-%d" % p, 1) for p in wires}
        transactions.commit()
        for partition, wire in wires.items():  # N's marker is in every partition's ISR
            wait_until(lambda p=partition, w=wire: last_stable_offset(w, topic, p) == 2, 30,
                       f"the commit marker in partition {partition}")

        # The delayed produces arrive: no transaction is open, and N is over.
        for partition, wire in wires.items():
            assert final_answer(lambda p=partition, w=wire: produce(
                w, transactions.transactional_id, topic, p, late[p])) == \
                ErrorCode.INVALID_TXN_STATE
        # Transaction N+1 writes to partition 1 alone: a late batch for partition 0 or 2
        # cannot join it.
        transactions.add_partitions(topic, [1])
        assert transactions.verify(topic, [0, 1, 2]) == {
            0: ErrorCode.TRANSACTION_ABORTABLE, 1: 0, 2: ErrorCode.TRANSACTION_ABORTABLE}
        for partition in (0, 2):
            assert produce(wires[partition], transactions.transactional_id, topic, partition,
                           late[partition]) == ErrorCode.INVALID_TXN_STATE
        assert produce(wires[1], transactions.transactional_id, topic, 1,
                       transactions.batch(b"n+1", 1)) == 0
        transactions.commit()
        for partition in range(PARTITIONS):
            plain.send(topic, value=b"after-%d" % partition, partition=partition).get(30)
    finally:
        plain.close(timeout=10)
        for wire in wires.values():
            wire.close()
        transactions.close()

    # Nothing holds the partitions' last stable offsets back, and no late record was written.
    committed = sorted([b"n-%d" % p for p in range(PARTITIONS)] + [b"n+1"]
                       + [b"after-%d" % p for p in range(PARTITIONS)])
    assert values(consume_all(kafka_cluster, topic, "read_committed", len(committed))) == \
        committed
    assert values(consume_all(kafka_cluster, topic, "read_uncommitted", len(committed))) == \
        committed


def test_a_txn_offset_commit_delayed_past_its_transactions_commit_is_refused(
        kafka_cluster: Cluster) -> None:
    """TxnOffsetCommit's write to `__consumer_offsets` is a transactional batch too: one that
    arrives after its transaction committed would hold the group's offsets partition (and the
    offsets of every group there) behind a transaction no coordinator ends."""
    topic = new_topic(kafka_cluster, "txn-late-offsets")
    group = f"late-offsets-{uuid.uuid4().hex[:8]}"
    transactions = Transactions(kafka_cluster, f"txn-{uuid.uuid4().hex}")
    with KafkaWire(kafka_cluster.bootstrap_servers().split(",")[0]) as wire:
        found = wait_until(lambda: (answer := wire.ask(FindCoordinatorRequest(
            key=group, key_type=0), 1)).error_code == 0 and answer, 60, "the group coordinator")
    coordinator = KafkaWire((found.host, found.port))
    partition = offsets_partition(group, len(
        kafka_cluster.describe_topic(OFFSETS_TOPIC)["partitions"]))
    commit_entry = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    late = TxnOffsetCommitRequest(
        transactional_id=transactions.transactional_id, group_id=group,
        producer_id=transactions.producer_id, producer_epoch=transactions.producer_epoch,
        generation_id=-1, member_id="", group_instance_id=None, topics=[commit_entry(
            name=topic, partitions=[commit_entry.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                committed_metadata="")])])
    try:
        transactions.add_offsets(group)
        transactions.commit()
        wait_until(lambda: last_stable_offset(coordinator, OFFSETS_TOPIC, partition)
                   == last_stable_offset(coordinator, OFFSETS_TOPIC, partition, 0), 30,
                   "the commit marker in the group's offsets partition")
        assert final_answer(lambda: coordinator.ask(late, 3).topics[0].partitions[0].error_code) \
            == ErrorCode.INVALID_TXN_STATE
        # Nothing holds the offsets partition back.
        assert last_stable_offset(coordinator, OFFSETS_TOPIC, partition) == \
            last_stable_offset(coordinator, OFFSETS_TOPIC, partition, 0)
    finally:
        coordinator.close()
        transactions.close()
