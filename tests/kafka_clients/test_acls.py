"""ACLs on the Kafka port, with real clients over mutual TLS (each certificate a principal):
a principal with READ but not WRITE consumes, and its produce is refused with nothing stored;
one without DESCRIBE does not see the topic in Metadata; an ACL added or removed through one
broker takes effect on the other within seconds; a deny beats an allow; CreateAcls,
DescribeAcls and DeleteAcls through kafka-python's admin client.

One cluster of two brokers for the module, with an authorizer, the admin certificate's
principal its super user and nothing allowed where no ACL says so.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    NoError,
    TopicAuthorizationFailedError,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.structs import OffsetAndMetadata

from rafka import Cluster
from tests.support.cluster import cluster_of_its_own
from tests.support.kafka_wire import read_exactly
from tests.support.waiting import eventually

pytestmark = pytest.mark.cluster

TOPIC_AUTHORIZATION_FAILED = 29
ADMIN, READER, OTHER = "admin", "reader", "other"


def principal(who: str) -> str:
    """The principal of `who`'s certificate (Kafka's DEFAULT mapping of its subject)."""
    return f"User:CN={who},OU=Data,O=Team"


class Certificates:
    """A CA, the brokers' chain and key, and a client pair (certificate, key) per principal,
    as PEM files in `folder`."""

    def __init__(self, folder: Path) -> None:
        ca = trustme.CA()
        broker = ca.issue_cert("127.0.0.1", "localhost")
        leaves = {who: ca.issue_cert("client.example", common_name=who,
                                     organization_unit_name="Data", organization_name="Team")
                  for who in (ADMIN, READER, OTHER)}
        files = {"ca.pem": ca.cert_pem.bytes(),
                 "broker.pem": broker.private_key_and_cert_chain_pem.bytes()}
        for who, leaf in leaves.items():
            files[f"{who}.crt"] = b"".join(pem.bytes() for pem in leaf.cert_chain_pems)
            files[f"{who}.key"] = leaf.private_key_pem.bytes()
        for name, data in files.items():
            (folder / name).write_bytes(data)
        self.ca, self.broker = str(folder / "ca.pem"), str(folder / "broker.pem")
        self.pairs = {who: (str(folder / f"{who}.crt"), str(folder / f"{who}.key"))
                      for who in leaves}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    folder = tmp_path_factory.mktemp("acl-certificates")
    return Certificates(folder)


@pytest.fixture(scope="module")
def acl_cluster(zookeeper, ray_session, tmp_path_factory,
                certificates: Certificates) -> Iterator[Cluster]:
    """Two brokers, mutual TLS only, an authorizer, the admin certificate its super user."""
    config = {"ssl.keystore.location": certificates.broker,
              "ssl.truststore.location": certificates.ca, "ssl.client.auth": "required",
              "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "super.users": principal(ADMIN), "group.initial.rebalance.delay.ms": 0}
    yield from cluster_of_its_own(zookeeper, tmp_path_factory, "kafka-acls", brokers=2,
                                  kafka_listeners="SSL://127.0.0.1:0", broker_config=config)


def endpoints(cluster: Cluster) -> list[tuple[str, int]]:
    found = []
    for broker in cluster.brokers():
        for endpoint in broker["endpoints"]:
            host, _, port = endpoint.partition("://")[2].rpartition(":")
            found.append((host, int(port)))
    return sorted(found)


def tls(certificates: Certificates, who: str,
        servers: list[tuple[str, int]] | None = None, cluster: Cluster | None = None,
        ) -> dict[str, object]:
    """kafka-python's settings for `who` over mutual TLS."""
    assert servers is not None or cluster is not None
    chosen = servers if servers is not None else endpoints(cluster)  # type: ignore[arg-type]
    cert, key = certificates.pairs[who]
    return {"bootstrap_servers": [f"{host}:{port}" for host, port in chosen],
            "security_protocol": "SSL", "ssl_cafile": certificates.ca,
            "ssl_certfile": cert, "ssl_keyfile": key, "ssl_check_hostname": False}


def admin(cluster: Cluster, certificates: Certificates) -> KafkaAdminClient:
    return KafkaAdminClient(**tls(certificates, ADMIN, cluster=cluster))


def allow(principal: str, operation: int, resource_type: int, name: str,
          permission: int = ACLPermissionType.ALLOW,
          pattern: int = ACLResourcePatternType.LITERAL) -> ACL:
    return ACL(principal=principal, host="*", operation=operation, permission_type=permission,
               resource_pattern=ResourcePattern(resource_type, name, pattern))


def new_topic(cluster: Cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(name, partitions=1, replication_factor=2)
    return name


def metadata_from(certificates: Certificates, who: str, host: str, port: int,
                  topics: list[str] | None) -> dict[str, int]:
    """{topic: error code} of one Metadata request (v1) to one broker, as `who`."""
    context = ssl.create_default_context(cafile=certificates.ca)
    context.check_hostname = False
    context.load_cert_chain(*certificates.pairs[who])
    request = MetadataRequest(version=1, topics=None if topics is None else [
        MetadataRequest.MetadataRequestTopic(name=name) for name in topics])
    request.with_header(correlation_id=1, client_id="acl-test")
    with socket.create_connection((host, port), timeout=10) as raw, \
            context.wrap_socket(raw) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = int.from_bytes(read_exactly(sock, 4), "big")
        frame = read_exactly(sock, size)
    response = MetadataResponse.decode(frame[4:], version=1)
    return {topic.name: topic.error_code for topic in response.topics}


def end_offset(cluster: Cluster, certificates: Certificates, topic: str) -> int:
    consumer = KafkaConsumer(**tls(certificates, ADMIN, cluster=cluster))
    try:
        return consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    finally:
        consumer.close()


def test_read_without_write_consumes_and_is_refused_produce(
    acl_cluster: Cluster, certificates: Certificates,
) -> None:
    topic = new_topic(acl_cluster, "acl-read")
    group = f"{topic}-group"
    reader = principal(READER)
    client = admin(acl_cluster, certificates)
    try:
        result = client.create_acls([allow(reader, ACLOperation.READ, ResourceType.TOPIC, topic),
                                     allow(reader, ACLOperation.READ, ResourceType.GROUP, group)])
        assert not result["failed"], result
    finally:
        client.close()
    producer = KafkaProducer(**tls(certificates, ADMIN, cluster=acl_cluster), acks="all")
    for i in range(5):
        producer.send(topic, f"v{i}".encode()).get(timeout=30)
    producer.close()

    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                             consumer_timeout_ms=20_000,
                             **tls(certificates, READER, cluster=acl_cluster))
    values = [message.value for message in itertools.islice(consumer, 5)]
    consumer.commit()
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(5)]

    refused = KafkaProducer(**tls(certificates, READER, cluster=acl_cluster), acks="all",
                            enable_idempotence=False, retries=0)
    with pytest.raises(TopicAuthorizationFailedError):
        refused.send(topic, b"not-allowed").get(timeout=30)
    refused.close()
    assert end_offset(acl_cluster, certificates, topic) == 5, "nothing of it was stored"


def test_a_topic_not_describable_is_not_in_metadata(
    acl_cluster: Cluster, certificates: Certificates,
) -> None:
    topic = new_topic(acl_cluster, "acl-hidden")
    host, port = endpoints(acl_cluster)[0]
    assert topic in metadata_from(certificates, ADMIN, host, port, None)
    assert topic not in metadata_from(certificates, OTHER, host, port, None)
    assert metadata_from(certificates, OTHER, host, port, [topic]) == {
        topic: TOPIC_AUTHORIZATION_FAILED}
    # Nor is one that does not exist created for it (no CREATE), nor told apart.
    missing = f"acl-missing-{uuid.uuid4().hex[:6]}"
    assert metadata_from(certificates, OTHER, host, port, [missing]) == {
        missing: TOPIC_AUTHORIZATION_FAILED}
    assert missing not in acl_cluster.list_topics()


def test_an_acl_takes_effect_on_every_broker_within_seconds(
    acl_cluster: Cluster, certificates: Certificates,
) -> None:
    topic = new_topic(acl_cluster, "acl-spread")
    (first_host, first_port), (second_host, second_port) = endpoints(acl_cluster)
    through_first = KafkaAdminClient(**tls(certificates, ADMIN,
                                           servers=[(first_host, first_port)]))
    acl = allow(principal(OTHER), ACLOperation.DESCRIBE, ResourceType.TOPIC, topic)
    try:
        started = time.monotonic()
        assert not through_first.create_acls([acl])["failed"]
        for host, port in ((first_host, first_port), (second_host, second_port)):
            assert eventually(lambda h=host, p=port: metadata_from(
                certificates, OTHER, h, p, [topic]) == {topic: 0}, timeout_s=5)
        assert time.monotonic() - started < 5
        through_first.delete_acls([ACLFilter(
            principal=principal(OTHER), host="*", operation=ACLOperation.DESCRIBE,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(ResourceType.TOPIC, topic))])
        for host, port in ((first_host, first_port), (second_host, second_port)):
            assert eventually(lambda h=host, p=port: metadata_from(
                certificates, OTHER, h, p, [topic]) == {topic: TOPIC_AUTHORIZATION_FAILED},
                timeout_s=5)
    finally:
        through_first.close()


def test_a_deny_beats_an_allow(acl_cluster: Cluster, certificates: Certificates) -> None:
    topic = new_topic(acl_cluster, "acl-deny")
    other = principal(OTHER)
    client = admin(acl_cluster, certificates)
    try:
        assert not client.create_acls([
            allow(other, ACLOperation.ALL, ResourceType.TOPIC, "acl-deny-",
                  pattern=ACLResourcePatternType.PREFIXED),
            allow(other, ACLOperation.WRITE, ResourceType.TOPIC, topic,
                  permission=ACLPermissionType.DENY)])["failed"]
        acls, _error = client.describe_acls(ACLFilter(
            principal=other, host=None, operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, topic,
                                                   ACLResourcePatternType.MATCH)))
        assert len(acls) == 2
    finally:
        client.close()
    host, port = endpoints(acl_cluster)[0]
    assert eventually(lambda: metadata_from(certificates, OTHER, host, port, [topic]) == {
        topic: 0})
    producer = KafkaProducer(**tls(certificates, OTHER, cluster=acl_cluster), acks="all",
                             enable_idempotence=False, retries=0)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send(topic, b"denied").get(timeout=30)
    producer.close()
    assert end_offset(acl_cluster, certificates, topic) == 0


def test_describe_cluster_and_offset_delete_are_behind_their_acls(
    acl_cluster: Cluster, certificates: Certificates,
) -> None:
    """DescribeCluster needs DESCRIBE on the cluster, OffsetDelete DELETE on the group and READ
    on each topic, as in Kafka; what is refused is answered with Kafka's codes."""
    readable, unreadable = new_topic(acl_cluster, "acl-od-read"), new_topic(acl_cluster, "acl-od")
    group = f"{readable}-group"
    other = principal(OTHER)
    client = admin(acl_cluster, certificates)
    committer = KafkaConsumer(group_id=group, enable_auto_commit=False,
                              **tls(certificates, ADMIN, cluster=acl_cluster))
    asked = [TopicPartition(readable, 0), TopicPartition(unreadable, 0)]
    try:
        committer.commit({tp: OffsetAndMetadata(3, "", -1) for tp in asked})
        assert not client.create_acls([
            allow(other, ACLOperation.READ, ResourceType.GROUP, group),
            allow(other, ACLOperation.READ, ResourceType.TOPIC, readable)])["failed"]
        as_other = KafkaAdminClient(**tls(certificates, OTHER, cluster=acl_cluster))
        try:
            assert eventually(lambda: _refused_with(
                lambda: as_other.describe_cluster(), ClusterAuthorizationFailedError))
            assert eventually(lambda: _refused_with(
                lambda: as_other.delete_group_offsets(group, asked),
                GroupAuthorizationFailedError))
            assert not client.create_acls([
                allow(other, ACLOperation.DELETE, ResourceType.GROUP, group),
                allow(other, ACLOperation.DESCRIBE, ResourceType.CLUSTER,
                      "kafka-cluster")])["failed"]
            assert eventually(lambda: as_other.delete_group_offsets(group, asked) == {
                asked[0]: NoError, asked[1]: TopicAuthorizationFailedError}, timeout_s=10)
            # Each broker learns the new ACLs from its own ZooKeeper watch: the group's
            # coordinator may have, while the broker answering DescribeCluster has not yet.
            assert eventually(lambda: not _refused_with(
                lambda: as_other.describe_cluster(), ClusterAuthorizationFailedError))
            described = as_other.describe_cluster()
            assert described["cluster_id"] == acl_cluster.name
            # What it may do on the cluster, now DESCRIBE only.
            assert described["authorized_operations"] == ["DESCRIBE"]
        finally:
            as_other.close()
        remaining = client.list_group_offsets(group)[group]
        assert asked[0] not in remaining and remaining[asked[1]].offset == 3
    finally:
        committer.close()
        client.close()


def _refused_with(call: Callable[[], object], error: type[Exception]) -> bool:
    try:
        call()
    except error:
        return True
    return False
