"""Digest ACLs: only holders of the cluster credentials may change its znodes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from rafka.coordination.admin import TopicAdmin
from rafka.coordination.embedded import ZooKeeperAddress
from rafka.coordination.errors import ZooKeeperAuthError
from rafka.coordination.models import BrokerInfo
from rafka.coordination.registration import BrokerRegistration
from rafka.coordination.security import AclPolicy, ClusterCredentials, cluster_acl
from rafka.coordination.store import ClusterStore

CREDENTIALS = "rafka:s3cret"


def _secured(make_store: Callable[..., ClusterStore], **options: object) -> TopicAdmin:
    store = make_store(credentials=CREDENTIALS, **options)
    store.ensure_layout()
    admin = TopicAdmin(store)
    admin.create_topic("orders", {0: [1], 1: [1]}, {"retention.ms": 1000})
    return admin


def test_without_credentials_reads_work_but_writes_are_refused(
    make_store: Callable[..., ClusterStore],
) -> None:
    _secured(make_store)
    anonymous = TopicAdmin(make_store())
    anonymous.store.ensure_layout()  # only looks: nothing to create
    assert anonymous.list_topics() == ["orders"]
    assert anonymous.describe_topic("orders").config == {"retention.ms": "1000"}
    with pytest.raises(ZooKeeperAuthError) as raised:
        anonymous.create_topic("payments", {0: [1]})
    assert "pass the cluster credentials" in str(raised.value)
    with pytest.raises(ZooKeeperAuthError):
        anonymous.alter_config("orders", {"retention.ms": 5})
    with pytest.raises(ZooKeeperAuthError):
        anonymous.request_topic_deletion("orders")
    with pytest.raises(ZooKeeperAuthError):
        BrokerRegistration(anonymous.store, BrokerInfo(1, "broker-1", "h")).register()


def test_a_wrong_password_is_no_better_than_none(make_store: Callable[..., ClusterStore]) -> None:
    _secured(make_store)
    impostor = TopicAdmin(make_store(credentials="rafka:guess"))
    with pytest.raises(ZooKeeperAuthError):
        impostor.alter_config("orders", {"retention.ms": 5})


def test_raw_kazoo_without_credentials_cannot_touch_the_znodes(
    make_store: Callable[..., ClusterStore], zk_address: ZooKeeperAddress
) -> None:
    admin = _secured(make_store)
    raw = KazooClient(hosts=str(admin.store.address))
    raw.start(timeout=15)
    try:
        with pytest.raises(NoAuthError):
            raw.set("/brokers/topics/orders", b"{}")
        with pytest.raises(NoAuthError):
            raw.delete("/config/topics/orders")
        with pytest.raises(NoAuthError):
            raw.create("/intruder", b"")  # not even at the top of the cluster's chroot
    finally:
        raw.stop()
        raw.close()


def test_holders_of_the_credentials_may_change_everything(
    make_store: Callable[..., ClusterStore],
) -> None:
    _secured(make_store)
    other_broker = TopicAdmin(make_store(credentials=CREDENTIALS))
    assert other_broker.alter_config("orders", {"retention.ms": 5}).value == {"retention.ms": "5"}
    other_broker.request_topic_deletion("orders")
    other_broker.delete_topic_znodes("orders")
    assert other_broker.list_topics() == []


def test_znodes_carry_digest_all_and_world_read(
    make_store: Callable[..., ClusterStore], zk_client: KazooClient
) -> None:
    admin = _secured(make_store)
    assert admin.store.address.chroot.endswith("/rafka/test")
    acls, _ = zk_client.get_acls("/rafka/test/brokers/topics/orders")
    schemes = {(acl.id.scheme, acl.perms) for acl in acls}
    assert ("digest", Permissions.ALL) in schemes
    assert ("world", Permissions.READ) in schemes
    assert all("s3cret" not in acl.id.id for acl in acls), "only a hash of the password"


def test_a_closed_cluster_refuses_reads_too(make_store: Callable[..., ClusterStore]) -> None:
    _secured(make_store, acl_policy=AclPolicy.CLOSED)
    anonymous = TopicAdmin(make_store())
    with pytest.raises(ZooKeeperAuthError, match="credentials"):
        anonymous.list_topics()


def test_credentials_parse_and_hide_the_password() -> None:
    credentials = ClusterCredentials.parse("user:pa:ss")
    assert credentials == ClusterCredentials("user", "pa:ss")
    assert "pa:ss" not in repr(credentials)
    assert credentials.auth_data == [("digest", "user:pa:ss")]
    assert len(cluster_acl(credentials, AclPolicy.CLOSED)) == 1
    assert cluster_acl(None)[0].id.scheme == "world"
    for bad in ["nocolon", ":pw", "user:"]:
        with pytest.raises(ValueError, match=r"user|password"):
            ClusterCredentials.parse(bad)
