"""Transactions with rafka's own clients: a transactional producer commits and aborts across
partitions, a read_committed consumer sees exactly what was committed, offsets sent to a
transaction count only if it commits, a newer instance fences the older one, and misuse gets
Kafka's errors. And the partition leader's checks of the coordinator's markers."""

from __future__ import annotations

import time
import uuid

import pytest
import ray

from rafka import Cluster
from rafka.actors.errors import (
    ErrorCode,
    InvalidConfigError,
    InvalidTxnStateError,
    ProducerFencedError,
    code_of,
)
from rafka.actors.messages import TxnMarker
from rafka.actors.txn.coordinator import TICK_S
from rafka.actors.txn.transaction_state import (
    TRANSACTION_STATE_TOPIC,
    transaction_state_partition,
)
from tests.support.cluster import module_cluster, partition_state, read_values
from tests.support.faults import host_pids, paused
from tests.support.kafka_coordinator_schemas import (
    TRANSACTION_LOG_KEY,
    TRANSACTION_LOG_VALUE,
    decode_whole,
)
from tests.support.waiting import wait_until

PARTITIONS = 3

# The tests that leave the cluster as they found it share one; the last, which moves
# `__transaction_state` and pauses a host, has its own.
shared = module_cluster("txn", 3)


def sorted_values(cluster: Cluster, topic: str, isolation_level: str, expected: int
                  ) -> list[bytes]:
    return sorted(read_values(cluster, topic, isolation_level, expected))


def new_topic(cluster: Cluster, name: str) -> str:
    cluster.create_topic(name, partitions=PARTITIONS, replication_factor=3,
                         config={"min.insync.replicas": 2})
    return name


def test_a_transactional_producer_commits_and_aborts_across_partitions(shared: Cluster) -> None:
    topic = new_topic(shared, "payments")
    producer = shared.producer(transactional_id=f"payer-{uuid.uuid4().hex}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(30):
            producer.send(topic, b"kept-%d" % i, partition=i % PARTITIONS)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(30):
            producer.send(topic, b"dropped-%d" % i, partition=i % PARTITIONS)
        producer.abort_transaction()
    finally:
        producer.close()
    kept = sorted(b"kept-%d" % i for i in range(30))
    assert sorted_values(shared, topic, "read_committed", 30) == kept
    assert sorted_values(shared, topic, "read_uncommitted", 60) == sorted(
        kept + [b"dropped-%d" % i for i in range(30)])
    # The coordinator's records are Kafka's TransactionLogKey and TransactionLogValue (v0):
    # Empty, Ongoing, PrepareCommit, CompleteCommit, Ongoing, PrepareAbort, CompleteAbort.
    transactional_id = producer.config.transactional_id
    assert transactional_id is not None
    wait_until(lambda: transaction_log(shared, transactional_id)[-1:] == [(5, [], -1)], 30,
               "the abort completed")
    assert transaction_log(shared, transactional_id) == [
        (0, [], -1), (1, [(topic, [0, 1, 2])], 0), (2, [(topic, [0, 1, 2])], 0), (4, [], -1),
        (1, [(topic, [0, 1, 2])], 0), (3, [(topic, [0, 1, 2])], 0), (5, [], -1)]


def transaction_log(cluster: Cluster, transactional_id: str) -> list[tuple[int, list, int]]:
    """The `__transaction_state` records of `transactional_id`, read with kafka-python's types
    as Kafka's: each one's state id, its partitions, and its start (0: set, -1: none)."""
    partition = transaction_state_partition(
        transactional_id, cluster.partition_count(TRANSACTION_STATE_TOPIC))
    reader = cluster.consumer()
    reader.assign([(TRANSACTION_STATE_TOPIC, partition)])
    reader.seek_to_beginning()
    [end] = reader.end_offsets([(TRANSACTION_STATE_TOPIC, partition)]).values()
    records = []
    while reader.position(TRANSACTION_STATE_TOPIC, partition) < end:
        records += reader.poll(500)
    reader.close()
    states = []
    for record in records:
        version, key = decode_whole(TRANSACTION_LOG_KEY, record.key)
        if (version, key) != (0, transactional_id):
            continue
        value = decode_whole(TRANSACTION_LOG_VALUE, record.value)
        assert value[0] == 0
        states.append((value[4], value[5], 0 if value[7] >= 0 else -1))
    return states


def test_offsets_sent_to_a_transaction_count_only_when_it_commits(shared: Cluster) -> None:
    source, sink = new_topic(shared, "source"), new_topic(shared, "sink")
    group = f"transformer-{uuid.uuid4().hex[:8]}"
    producer = shared.producer(transactional_id=f"transformer-{uuid.uuid4().hex}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(sink, b"out-1", partition=0)
        producer.send_offsets_to_transaction({(source, 0): 10, (source, 1): 4}, group)
        producer.abort_transaction()
        assert shared.committed_offsets(group, [(source, 0)]) == {(source, 0): None}
        producer.begin_transaction()
        producer.send(sink, b"out-2", partition=0)
        producer.send_offsets_to_transaction({(source, 0): 12}, group)
        producer.commit_transaction()
    finally:
        producer.close()
    # EndTxn is answered once the commit is decided; the markers that make the offsets count
    # follow, as in Kafka.
    wait_until(lambda: shared.committed_offsets(group, [(source, 0), (source, 1)]) == {
        (source, 0): 12, (source, 1): None}, 30, "the committed transaction's offsets")
    assert sorted_values(shared, sink, "read_committed", 1) == [b"out-2"]


def test_a_newer_instance_fences_the_older_and_aborts_what_it_left_open(
    shared: Cluster,
) -> None:
    topic = new_topic(shared, "ledger")
    transactional_id = f"ledger-{uuid.uuid4().hex}"
    zombie = shared.producer(transactional_id=transactional_id)
    successor = shared.producer(transactional_id=transactional_id)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, b"zombie", partition=0).result(30)
        successor.init_transactions()
        successor.begin_transaction()
        successor.send(topic, b"successor", partition=0)
        successor.commit_transaction()
        with pytest.raises(ProducerFencedError):
            zombie.send(topic, b"zombie-again", partition=1)
            zombie.commit_transaction()
    finally:
        zombie.close()
        successor.close()
    assert sorted_values(shared, topic, "read_committed", 1) == [b"successor"]


def test_misuse_gets_kafkas_errors(shared: Cluster) -> None:
    with pytest.raises(InvalidConfigError, match="acks"):
        shared.producer(transactional_id="t", acks=1)
    plain = shared.producer()
    with pytest.raises(InvalidTxnStateError, match="transactional_id"):
        plain.begin_transaction()
    plain.close()
    producer = shared.producer(transactional_id=f"misuse-{uuid.uuid4().hex}")
    try:
        with pytest.raises(InvalidTxnStateError, match="UNINITIALIZED"):
            producer.begin_transaction()
        producer.init_transactions()
        with pytest.raises(InvalidTxnStateError, match="READY"):
            producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(InvalidTxnStateError, match="IN_TRANSACTION"):
            producer.begin_transaction()
    finally:
        producer.close()


def test_a_marker_from_an_older_coordinator_is_refused(shared: Cluster) -> None:
    """A coordinator that lost `__transaction_state` may still send markers it prepared; once
    a newer coordinator's marker for the producer is in the partition, they are refused
    (Kafka's TRANSACTION_COORDINATOR_FENCED), so a late one cannot end a later transaction."""
    topic = new_topic(shared, "markers")
    leader = shared.describe_topic(topic)["partitions"][0]["leader"]
    host = shared.replica_hosts(topic, 0)[leader]

    def write(**fields: object) -> int:
        marker = TxnMarker(topic, 0, producer_id=77, producer_epoch=0, committed=True,
                           coordinator_epoch=5)._replace(**fields)
        [reply] = ray.get(host.write_txn_markers.remote([marker]), timeout=60)
        return code_of(reply)

    assert write() == 0
    assert write(coordinator_epoch=4, committed=False) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert write(coordinator_epoch=6) == 0
    assert write(producer_epoch=-1, coordinator_epoch=7) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_coordinator_that_leads_its_partition_again_ends_what_it_had_prepared(
    cluster: Cluster,
) -> None:
    """A coordinator loses its `__transaction_state` partition and leads it again while an
    ending it began is still waiting on a marker (the partition's leader is paused). Its new
    load of the partition must end the transaction itself: the old ending gives up once it
    sees the new load, and if nobody else ends it the transaction stays prepared for good, and
    the producer's next one is refused CONCURRENT_TRANSACTIONS."""
    transactional_id = f"regained-{uuid.uuid4().hex}"
    # max.block.ms as Kafka sets it: a fresh cluster on a loaded machine may take more than
    # 20 s to create `__transaction_state` and elect its leaders.
    producer = cluster.producer(transactional_id=transactional_id)
    try:
        producer.init_transactions()
        state_partition = transaction_state_partition(
            transactional_id, cluster.partition_count(TRANSACTION_STATE_TOPIC))
        coordinator = partition_state(cluster, TRANSACTION_STATE_TOPIC, state_partition)["leader"]
        stand_in, held_by = sorted({0, 1, 2} - {coordinator})
        cluster.create_topic("held", partitions=1, replication_factor=1)
        # The partition the markers go to lives on a broker that holds no replica of the
        # coordinator's partition, so pausing it stalls the markers and nothing else.
        cluster.reassign_partitions({("held", 0): [held_by],
                                     (TRANSACTION_STATE_TOPIC, state_partition):
                                         [coordinator, stand_in]})
        producer.begin_transaction()
        producer.send("held", b"first", partition=0).result(30)

        def lead(broker: int) -> None:
            others = [b for b in (coordinator, stand_in) if b != broker]
            cluster.reassign_partitions(
                {(TRANSACTION_STATE_TOPIC, state_partition): [broker, *others]})
            cluster.elect_preferred_leaders()
            wait_until(lambda: partition_state(cluster, TRANSACTION_STATE_TOPIC,
                                               state_partition)["leader"] == broker,
                       30, f"broker {broker} to lead {TRANSACTION_STATE_TOPIC}-"
                       f"{state_partition}")

        with paused(host_pids(cluster, held_by)):
            producer.commit_transaction()  # answered once prepared; its markers now wait
            lead(stand_in)
            lead(coordinator)
            # The coordinator looks for partitions it came to lead every TICK_S, and loads
            # them; the ending begun before is still waiting on the paused host.
            time.sleep(3 * TICK_S)
        producer.begin_transaction()
        producer.send("held", b"second", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()
    assert read_values(cluster, "held", "read_committed", 2) == [b"first", b"second"]
