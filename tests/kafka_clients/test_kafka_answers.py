"""Fields of rafka's Kafka answers that a client reads and a user relies on, looked at request by
request (tests/support/kafka_wire.py) where a client library would hide them, and through
kafka-python where it shows them: ListOffsets' timestamps and epochs, OffsetFetch v1's errors,
groups that exist only once joined, KIP-394's member ids, commits into a group of rafka's own
consumers, per-topic errors in Metadata and topics created by it, the transaction
coordinator's absence said plainly; and Kafka's admin client growing topics, electing leaders,
deleting records, describing configs with their types, sources and synonyms, moving replicas
and describing log dirs."""

from __future__ import annotations

import pytest
import ray
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import (
    InconsistentGroupProtocolError,
    InvalidPartitionsError,
    InvalidReplicationAssignmentError,
    LogDirNotFoundError,
    NoError,
    OffsetOutOfRangeError,
    ReplicaNotAvailableError,
)
from kafka.protocol.admin import DescribeConfigsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder
from kafka.structs import OffsetAndMetadata, TopicPartitionReplica

from rafka import Cluster
from rafka.actors.errors import ErrorCode
from tests.support.cluster import read_values
from tests.support.kafka_clients import new_topic
from tests.support.kafka_wire import KafkaWire
from tests.support.waiting import wait_until

MAX_TIMESTAMP = -3
LATEST_TIMESTAMP = -1


def coordinator_of(cluster: Cluster, group: str) -> str:
    """The Kafka listener (host:port) of the group's coordinator."""
    with KafkaWire(cluster.bootstrap_servers().split(",")[0]) as wire:
        def found():  # type: ignore[no-untyped-def]
            answer = wire.ask(FindCoordinatorRequest(key=group, key_type=0), 1)
            return answer if answer.error_code == 0 else None
        answer = wait_until(found, 60, f"a coordinator for {group}")
    return f"{answer.host}:{answer.port}"


def address_of(cluster: Cluster, node: int) -> str:
    """The Kafka listener of broker `node`, as Metadata names it."""
    with KafkaWire(cluster.bootstrap_servers().split(",")[0]) as wire:
        brokers = wire.ask(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).brokers
    return next(f"{b.host}:{b.port}" for b in brokers if b.node_id == node)


def listed_groups(cluster: Cluster) -> dict[str, str]:
    """Every broker's ListGroups, as Kafka's admin clients gather them: group id -> state."""
    found = {}
    for address in cluster.bootstrap_servers().split(","):
        with KafkaWire(address) as wire:
            found.update({g.group_id: g.group_state
                          for g in wire.ask(ListGroupsRequest(states_filter=[]), 4).groups})
    return found


def described_state(cluster: Cluster, group: str) -> str:
    with KafkaWire(coordinator_of(cluster, group)) as wire:
        described = wire.ask(DescribeGroupsRequest(groups=[group]), 5).groups[0]
    assert described.error_code == 0
    return described.group_state


# --------------------------------------------------------------------------- ListOffsets


def test_list_offsets_answers_the_newest_record_its_timestamp_and_leader_epoch(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "list-offsets-answers")
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")
    try:
        for timestamp in (1_000, 5_000, 3_000):  # the largest is not the last
            producer.send(topic, value=b"v", partition=0, timestamp_ms=timestamp).get(30)
    finally:
        producer.close(timeout=10)
    leader_epoch = kafka_cluster.describe_topic(topic)["partitions"][0]["leader_epoch"]

    def list_offsets(timestamp: int) -> tuple[int, int, int, int]:
        query = ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])
        leader = kafka_cluster.describe_topic(topic)["partitions"][0]["leader"]
        with KafkaWire(address_of(kafka_cluster, leader)) as wire:
            answer = wire.ask(ListOffsetsRequest(replica_id=-1, isolation_level=0,
                                                 topics=[query]), 7)
        part = answer.topics[0].partitions[0]
        return part.error_code, part.offset, part.timestamp, part.leader_epoch

    assert list_offsets(MAX_TIMESTAMP) == (0, 1, 5_000, leader_epoch)
    assert list_offsets(2_000) == (0, 1, 5_000, leader_epoch)
    assert list_offsets(LATEST_TIMESTAMP) == (0, 3, -1, leader_epoch)
    assert list_offsets(6_000)[:2] == (0, -1)
    # What a user sees: kafka-python's offsets_for_times.
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap_servers())
    try:
        found = consumer.offsets_for_times({TopicPartition(topic, 0): 2_500})
    finally:
        consumer.close()
    assert (found[TopicPartition(topic, 0)].offset,
            found[TopicPartition(topic, 0)].timestamp) == (1, 5_000)


# ----------------------------------------------------------------- OffsetForLeaderEpoch


def test_offset_for_leader_epoch_answers_where_each_epoch_ends_at_the_leader(
    kafka_cluster: Cluster,
) -> None:
    """KIP-320: what a consumer asks after its partition changed leader, to check that the
    offset it reached is still in the log."""
    topic = new_topic(kafka_cluster, "epoch-ends")
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")

    def produce(count: int) -> None:
        for _ in range(count):
            producer.send(topic, value=b"v", partition=0).get(30)

    try:
        produce(3)
        before = kafka_cluster.describe_topic(topic)["partitions"][0]
        # The leadership moves to another replica: a new leader epoch begins at offset 3.
        reordered = [*before["replicas"][1:], before["replicas"][0]]
        kafka_cluster.reassign_partitions({(topic, 0): reordered})
        kafka_cluster.elect_preferred_leaders()
        wait_until(lambda: kafka_cluster.describe_topic(topic)["partitions"][0]["leader"]
                   == reordered[0], 30, "the preferred replica leading partition 0")
        produce(2)
    finally:
        producer.close(timeout=10)
    after = kafka_cluster.describe_topic(topic)["partitions"][0]
    old_epoch, new_epoch = before["leader_epoch"], after["leader_epoch"]
    assert new_epoch > old_epoch

    def ask(broker: int, epoch: int, current: int = -1) -> tuple[int, int, int]:
        query = OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=topic, partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=current, leader_epoch=epoch)])
        with KafkaWire(address_of(kafka_cluster, broker)) as wire:
            answer = wire.ask(OffsetForLeaderEpochRequest(replica_id=-1, topics=[query]), 4)
        part = answer.topics[0].partitions[0]
        return part.error_code, part.leader_epoch, part.end_offset

    leader = after["leader"]
    assert ask(leader, old_epoch) == (ErrorCode.NONE, old_epoch, 3)  # where it ended
    assert ask(leader, new_epoch, new_epoch) == (ErrorCode.NONE, new_epoch, 5)  # the log's end
    assert ask(leader, new_epoch, old_epoch)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert ask(leader, new_epoch, new_epoch + 1)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert ask(before["leader"], new_epoch)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # What a user sees: kafka-python's consumer, which asks it once the leader epoch it read
    # at changes, reads everything.
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap_servers(),
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        assert len(list(consumer)) == 5
    finally:
        consumer.close()


# ------------------------------------------------------------------------------- groups


def test_offset_fetch_v1_puts_a_coordinator_error_in_each_partition(
    kafka_cluster: Cluster,
) -> None:
    """OffsetFetch v1 has no top-level error code: a broker that does not coordinate the group
    must say so in each partition, or the client reads "nothing committed"."""
    group = "offset-fetch-v1"
    coordinator = coordinator_of(kafka_cluster, group)
    other = next(address for address in kafka_cluster.bootstrap_servers().split(",")
                 if address != coordinator)
    wanted = [OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]
    with KafkaWire(other) as wire:
        answer = wire.ask(OffsetFetchRequest(group_id=group, topics=wanted), 1)
    errors = [p.error_code for t in answer.topics for p in t.partitions]
    assert errors == [ErrorCode.NOT_COORDINATOR] * 2


def test_a_group_exists_once_joined_and_is_gone_or_empty_after_its_members_leave(
    kafka_cluster: Cluster,
) -> None:
    ghost = "never-joined"
    coordinator = coordinator_of(kafka_cluster, ghost)
    with KafkaWire(coordinator) as wire:
        beat = wire.ask(HeartbeatRequest(group_id=ghost, generation_id=1, member_id="m"), 3)
        assert beat.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        described = wire.ask(DescribeGroupsRequest(groups=[ghost]), 5).groups[0]
        assert (described.error_code, described.group_state) == (0, "Dead")
    assert ghost not in listed_groups(kafka_cluster)

    topic = new_topic(kafka_cluster, "group-lifecycle")
    for group, commits in (("members-then-offsets", True), ("members-only", False)):
        consumer = KafkaConsumer(topic, group_id=group, enable_auto_commit=False,
                                 bootstrap_servers=kafka_cluster.bootstrap_servers())
        try:
            wait_until(lambda c=consumer: c.poll(200) is not None and c.assignment(), 60,
                       f"{group} assigned")
            assert listed_groups(kafka_cluster)[group] == "Stable"
            if commits:
                consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
        finally:
            consumer.close()
        # Left: Kafka keeps a group with committed offsets as Empty and forgets one without.
        expected = "Empty" if commits else "Dead"
        wait_until(lambda g=group, e=expected: described_state(kafka_cluster, g) == e, 30,
                   f"{group} {expected}")
        assert (group in listed_groups(kafka_cluster)) is commits
    # Deleting an empty group takes its offsets with it; a group of nothing is not found.
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers())
    try:
        deleted = admin.delete_groups(["members-then-offsets", ghost])
    finally:
        admin.close()
    assert deleted == {"members-then-offsets": "OK", ghost: "GroupIdNotFoundError"}
    assert described_state(kafka_cluster, "members-then-offsets") == "Dead"
    assert kafka_cluster.committed_offsets("members-then-offsets", [(topic, 0)]) == {
        (topic, 0): None}


def test_a_new_member_is_given_its_id_first_and_one_that_never_returns_is_forgotten(
    kafka_cluster: Cluster,
) -> None:
    group = "kip-394"
    coordinator = coordinator_of(kafka_cluster, group)
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
    with KafkaWire(coordinator) as wire:
        answer = wire.ask(JoinGroupRequest(
            group_id=group, session_timeout_ms=6_000, rebalance_timeout_ms=6_000, member_id="",
            protocol_type="consumer", protocols=protocols), 4)
    assert answer.error_code == ErrorCode.MEMBER_ID_REQUIRED and answer.member_id
    # It never joins with its id: after its session timeout the group is gone.
    wait_until(lambda: described_state(kafka_cluster, group) == "Dead", 30, "the group gone")


def test_a_kafka_clients_commit_into_a_group_of_rafka_consumers_is_refused(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "zk-group-commits")
    group = "rafka-members"
    member = kafka_cluster.consumer([topic], group=group, auto_offset_reset="earliest")
    try:
        wait_until(lambda: (member.poll(200), (topic, 0) in member.assignment())[1], 60,
                   "rafka's consumer owning the topic")
        member.commit({(topic, 0): 0})
        outsider = KafkaConsumer(group_id=group, enable_auto_commit=False,
                                 bootstrap_servers=kafka_cluster.bootstrap_servers())
        try:
            outsider.assign([TopicPartition(topic, 0)])
            with pytest.raises(InconsistentGroupProtocolError):
                outsider.commit({TopicPartition(topic, 0): OffsetAndMetadata(7, "", -1)})
        finally:
            outsider.close()
        assert kafka_cluster.committed_offsets(group, [(topic, 0)]) == {(topic, 0): 0}
        admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers())
        try:  # nor can an admin delete the group while rafka's consumers are in it
            assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
        finally:
            admin.close()
        assert kafka_cluster.committed_offsets(group, [(topic, 0)]) == {(topic, 0): 0}
    finally:
        member.close()


# ----------------------------------------------------------------------------- metadata


def test_metadata_answers_an_invalid_topic_name_per_topic_and_keeps_the_connection(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "metadata-neighbour")
    names = ["bad/name", "..", topic]
    with KafkaWire(kafka_cluster.bootstrap_servers().split(",")[0]) as wire:
        answer = wire.ask(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=True), 9)
        assert {t.name: t.error_code for t in answer.topics} == {
            "bad/name": ErrorCode.INVALID_TOPIC_EXCEPTION,
            "..": ErrorCode.INVALID_TOPIC_EXCEPTION, topic: 0}
        # The same connection goes on.
        assert wire.ask(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).brokers


def test_a_topic_a_client_asks_about_is_created_unless_it_says_not_to(
    kafka_cluster: Cluster,
) -> None:
    def metadata(name: str, allow: bool) -> int:
        with KafkaWire(kafka_cluster.bootstrap_servers().split(",")[0]) as wire:
            answer = wire.ask(MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                allow_auto_topic_creation=allow), 9)
        return answer.topics[0].error_code

    assert metadata("not-created", allow=False) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "not-created" not in kafka_cluster.list_topics()
    # Internal topics (`__...`) are never created so. Not `__transaction_state` itself: any
    # earlier transactional test on this cluster creates it, through its coordinator.
    internal = "__internal-never-created"
    assert metadata(internal, allow=True) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # As a user meets it: a producer writes to a topic nobody created.
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")
    try:
        written = producer.send("made-by-a-producer", value=b"first").get(timeout=60)
    finally:
        producer.close(timeout=10)
    assert written.offset == 0
    described = kafka_cluster.describe_topic("made-by-a-producer")
    assert len(described["partitions"]) == 1  # num.partitions, Kafka's default of 1
    assert internal not in kafka_cluster.list_topics()


# -------------------------------------------------------------------------------- admin


def test_kafka_admin_grows_a_topic_and_elects_preferred_leaders(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "admin-grows")
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers())
    try:
        admin.create_partitions({topic: 5})
        wait_until(lambda: all(p["leader"] >= 0 for p in
                               kafka_cluster.describe_topic(topic)["partitions"])
                   and len(kafka_cluster.describe_topic(topic)["partitions"]) == 5, 60,
                   "five partitions with leaders")
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({topic: 4})
        # Partition 0's preferred replica becomes its last one; leadership stays put until an
        # election moves it there.
        replicas = kafka_cluster.describe_topic(topic)["partitions"][0]["replicas"]
        reordered = [*replicas[1:], replicas[0]]
        kafka_cluster.reassign_partitions({(topic, 0): reordered})
        answer = admin.elect_leaders(0, {topic: [0, 1]}, raise_errors=False)
        outcomes = {p.partition_id: p.error_code
                    for r in answer.replica_election_results for p in r.partition_result}
        assert outcomes[1] == ErrorCode.ELECTION_NOT_NEEDED
        assert outcomes[0] in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)
        wait_until(lambda: kafka_cluster.describe_topic(topic)["partitions"][0]["leader"]
                   == reordered[0], 30, "the preferred replica leading partition 0")
    finally:
        admin.close()


def test_describe_configs_gives_types_sources_synonyms_and_the_advertised_listener(
    kafka_cluster: Cluster,
) -> None:
    topic = "described-configs"
    kafka_cluster.create_topic(topic, partitions=1, replication_factor=1,
                               config={"retention.ms": 60_000})
    resources = [DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=None)]
    address = kafka_cluster.bootstrap_servers().split(",")[0]
    with KafkaWire(address) as wire:
        topic_answer = wire.ask(DescribeConfigsRequest(
            resources=resources, include_synonyms=True, include_documentation=True), 3)
        broker_answer = wire.ask(DescribeConfigsRequest(resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=4, resource_name="", configuration_keys=None)],
            include_synonyms=False, include_documentation=False), 3)
    configs = {c.name: c for c in topic_answer.results[0].configs}
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source, retention.config_type) == ("60000", 1, 5)
    assert [(s.value, s.source) for s in retention.synonyms] == [("60000", 1),
                                                                 ("604800000", 5)]
    assert retention.documentation
    assert (configs["min.insync.replicas"].config_type, configs["cleanup.policy"].config_type,
            configs["unclean.leader.election.enable"].config_type) == (3, 7, 1)
    broker = {c.name: c for c in broker_answer.results[0].configs}
    assert broker["advertised.listeners"].value == f"PLAINTEXT://{address}"
    # Changed while the broker runs (a per-broker dynamic setting), unlike the listener itself.
    assert not broker["advertised.listeners"].read_only
    assert broker["listeners"].read_only


def test_kafka_admin_deletes_records_on_the_leader_and_its_followers(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "records-deleted")
    tp = TopicPartition(topic, 0)
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")
    try:
        for i in range(10):
            producer.send(topic, value=b"%d" % i, partition=0).get(30)
    finally:
        producer.close(timeout=10)
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers())
    try:
        deleted = admin.delete_records({tp: 4})
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({tp: 11})  # beyond the high watermark
    finally:
        admin.close()
    assert deleted[tp]["low_watermark"] == 4
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap_servers(),
                             auto_offset_reset="earliest")
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 4}
        consumer.assign([tp])
        values = []
        wait_until(lambda: values.extend(r.value for rs in consumer.poll(500).values()
                                         for r in rs) or len(values) >= 6, 30, "the rest read")
    finally:
        consumer.close()
    assert values == [b"%d" % i for i in range(4, 10)]
    # Every replica's log starts there too, so a new leader would not bring them back.
    wait_until(lambda: {facts["log_start_offset"] for (_b, p), facts in
                        kafka_cluster._replicas_of(topic, {0, 1, 2})[0].items() if p == 0}
               == {4}, 30, "every replica of partition 0 starting at 4")


def test_metadata_coordinator_and_group_requests_read_nothing_from_zookeeper(
    kafka_cluster: Cluster,
) -> None:
    """Brokers answer from the metadata cache the controller keeps current (UpdateMetadata),
    and groups from the coordinator's memory: counted on the coordinator's ZooKeeper client."""
    topic = new_topic(kafka_cluster, "no-zookeeper-reads")
    group = "no-zookeeper-reads"
    coordinator = coordinator_of(kafka_cluster, group)
    with KafkaWire(coordinator) as wire:
        brokers = wire.ask(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9).brokers
    node = next(b.node_id for b in brokers if f"{b.host}:{b.port}" == coordinator)
    reads = kafka_cluster._broker(node).zookeeper_reads.remote
    consumer = KafkaConsumer(topic, group_id=group, enable_auto_commit=False,
                             bootstrap_servers=coordinator)
    try:
        wait_until(lambda: consumer.poll(200) is not None and consumer.assignment(), 60,
                   "the group formed")
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
        before = ray.get(reads())
        wanted = [OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]
        with KafkaWire(coordinator) as wire:
            for _ in range(10):
                assert wire.ask(MetadataRequest(topics=None, allow_auto_topic_creation=False),
                                9).topics
                wire.ask(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
                    name=topic)], allow_auto_topic_creation=False), 9)
                assert wire.ask(FindCoordinatorRequest(key=group, key_type=0), 1).error_code == 0
                assert wire.ask(DescribeGroupsRequest(groups=[group]), 5).groups[0].members
                assert wire.ask(OffsetFetchRequest(group_id=group, topics=wanted),
                                5).topics[0].partitions[0].committed_offset == 0
                assert group in {g.group_id for g in
                                 wire.ask(ListGroupsRequest(states_filter=[]), 4).groups}
                consumer.poll(50)  # heartbeats, fetches and the consumer's own metadata
            consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
        assert ray.get(reads()) == before
    finally:
        consumer.close()


def test_requests_sent_ahead_on_one_connection_are_answered_and_appended_in_order(
    kafka_cluster: Cluster,
) -> None:
    """A client with several requests in flight (max.in.flight) is answered in the order it
    sent them, and its produce requests to one partition are appended in that order."""
    topic = new_topic(kafka_cluster, "requests-in-flight")
    leader = kafka_cluster.describe_topic(topic)["partitions"][0]["leader"]

    def produce(value: bytes) -> ProduceRequest:
        batch = MemoryRecordsBuilder(2, 0, 1 << 16)
        batch.append(0, None, value, [])
        batch.close()
        return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(
                    index=0, records=bytes(batch.buffer()))])])

    with KafkaWire(address_of(kafka_cluster, leader)) as wire:
        sent = [wire.send(produce(b"%d" % i), 9) for i in range(12)]
        answers = [wire.receive(ProduceRequest.API_KEY, 9) for _ in sent]
    assert [answer.header.correlation_id for answer in answers] == sent
    parts = [answer.responses[0].partition_responses[0] for answer in answers]
    assert [(part.error_code, part.base_offset) for part in parts] == [(0, i) for i in range(12)]
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap_servers(),
                             auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        wait_until(lambda: values.extend(r.value for rs in consumer.poll(500).values()
                                         for r in rs) or len(values) >= 12, 30, "all read")
    finally:
        consumer.close()
    assert values == [b"%d" % i for i in range(12)]


def test_an_idempotent_producers_requests_sent_ahead_are_worked_on_together(
    kafka_cluster: Cluster,
) -> None:
    """An idempotent producer's produce requests are not held behind one another: batches sent
    ahead of their turn on one connection (sequences 1 to 4, then 0) wait at the leader for the
    one before them, which reaches it meanwhile, and all are appended in sequence order. Worked
    on one at a time, the first would wait for a batch that never comes and be refused
    (OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    topic = new_topic(kafka_cluster, "idempotent-in-flight")
    leader = kafka_cluster.describe_topic(topic)["partitions"][0]["leader"]
    with KafkaWire(address_of(kafka_cluster, leader)) as wire:
        producer = wire.ask(InitProducerIdRequest(transactional_id=None,
                                                  transaction_timeout_ms=60_000), 1)
        assert producer.error_code == 0

        def produce(sequence: int) -> ProduceRequest:
            batch = MemoryRecordsBuilder(2, 0, 1 << 16, producer_id=producer.producer_id,
                                         producer_epoch=producer.producer_epoch,
                                         base_sequence=sequence)
            batch.append(0, None, b"%d" % sequence, [])
            batch.close()
            return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000,
                                  topic_data=[ProduceRequest.TopicProduceData(
                                      name=topic, partition_data=[
                                          ProduceRequest.TopicProduceData.PartitionProduceData(
                                              index=0, records=bytes(batch.buffer()))])])

        order = [1, 2, 3, 4, 0]
        sent = [wire.send(produce(sequence), 9) for sequence in order]
        answers = [wire.receive(ProduceRequest.API_KEY, 9) for _ in sent]
    assert [answer.header.correlation_id for answer in answers] == sent
    parts = [answer.responses[0].partition_responses[0] for answer in answers]
    assert [(part.error_code, part.base_offset) for part in parts] == [
        (0, sequence) for sequence in order]
    assert read_values(kafka_cluster, topic, "read_uncommitted", 5) == [b"%d" % i for i in range(5)]


def test_kafka_admin_moves_a_replica_lists_moves_and_describes_and_alters_log_dirs(
    kafka_cluster: Cluster,
) -> None:
    topic = "admin-moves"
    kafka_cluster.create_topic(topic, partitions=1, replication_factor=1)
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")
    for i in range(20):
        producer.send(topic, b"%d" % i)
    producer.flush()
    producer.close()
    [before] = kafka_cluster.describe_topic(topic)["partitions"][0]["replicas"]
    target = (before + 1) % 3
    tp = TopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers())
    try:
        # Where the partition's log is, as each broker reports its own.
        found = {result["broker"]: [(t["name"], p["partition_index"], p["partition_size"])
                                    for d in result["log_dirs"] for t in d["topics"]
                                    for p in t["partitions"] if t["name"] == topic]
                 for result in admin.describe_log_dirs()}
        assert set(found) == {0, 1, 2}
        [(_name, _index, size)] = found[before]
        assert size > 0 and not found[target]
        # A broker that is not registered is refused; then the move itself.
        assert admin.alter_partition_reassignments({tp: [before, 99]}) == {
            tp: InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({tp: [target]}) == {tp: None}
        moves = admin.list_partition_reassignments()
        assert set(moves) <= {tp}  # listed while under way, gone once done
        for move in moves.values():
            assert target in move["replicas"] and move["removing_replicas"] == [before]
        wait_until(lambda: kafka_cluster.describe_topic(topic)["partitions"][0]["replicas"]
                   == [target] and not admin.list_partition_reassignments(), 60,
                   "the replica moved")
        wait_until(lambda: [p["partition_size"] for result in admin.describe_log_dirs([topic])
                            if result["broker"] == target for d in result["log_dirs"]
                            for t in d["topics"] for p in t["partitions"]] == [size], 30,
                   "the moved log, of the same size, on its new broker")
        # Each broker has one log dir: a replica moves only to where it is (Kafka's no-op).
        log_dirs = {result["broker"]: result["log_dirs"][0]["log_dir"]
                    for result in admin.describe_log_dirs()}
        moves = {TopicPartitionReplica(topic, 0, target): log_dirs[target],
                 TopicPartitionReplica(topic, 0, before): log_dirs[before]}
        assert admin.alter_replica_log_dirs(moves) == {
            TopicPartitionReplica(topic, 0, target): NoError,
            TopicPartitionReplica(topic, 0, before): ReplicaNotAvailableError}
        elsewhere = {TopicPartitionReplica(topic, 0, target): log_dirs[target] + "-elsewhere"}
        assert admin.alter_replica_log_dirs(elsewhere) == {
            TopicPartitionReplica(topic, 0, target): LogDirNotFoundError}
    finally:
        admin.close()
