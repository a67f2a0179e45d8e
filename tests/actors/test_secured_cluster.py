"""A cluster whose znodes carry digest ACLs, as Kafka's `zookeeper.set.acl=true` makes them:
started with credentials, it works end to end (brokers, topics, producers, consumer groups, the
command line given the credentials file); every znode of its chroot names the credentials; a
client without them, or with wrong ones, may read everything and change nothing.

One cluster of two brokers for the module, on the session's ZooKeeper and Ray.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from rafka import Cluster
from rafka.coordination.errors import ZooKeeperAuthError
from rafka.coordination.security import ClusterCredentials, write_credentials_file
from tests.support.cluster import cluster_of_its_own, fresh
from tests.support.waiting import wait_until

CREDENTIALS = ClusterCredentials("rafka", secrets.token_urlsafe(16))
GROUP_CONFIG = {"session_timeout_ms": 4000, "auto_offset_reset": "earliest"}


@pytest.fixture(scope="module")
def secured(zookeeper, ray_session, tmp_path_factory) -> Iterator[Cluster]:
    yield from cluster_of_its_own(zookeeper, tmp_path_factory, "secured", 2,
                                  zk_credentials=CREDENTIALS)


@pytest.fixture
def raw_client(secured: Cluster) -> Iterator[Callable[..., KazooClient]]:
    """Start kazoo clients in the cluster's chroot, with the auth data given (none: anonymous)."""
    clients: list[KazooClient] = []

    def start(auth_data: list[tuple[str, str]] | None = None) -> KazooClient:
        client = KazooClient(hosts=str(secured.store.address), auth_data=auth_data)
        client.start(timeout=15)
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.stop()
        client.close()


def test_works_end_to_end(secured: Cluster) -> None:
    assert [broker["id"] for broker in secured.brokers()] == [0, 1], "both brokers registered"
    topic, group = fresh("orders"), fresh("billing")
    secured.create_topic(topic, partitions=2, replication_factor=2)
    producer = secured.producer(acks="all")
    values = {f"order-{i}".encode() for i in range(20)}
    for value in values:
        producer.send(topic, value=value)
    producer.flush()
    producer.close()

    # A group member in this process, then one in an actor of its own: each registers and
    # claims partitions in ZooKeeper with the credentials the cluster handed it.
    consumer = secured.consumer([topic], group=group, **GROUP_CONFIG)
    read: set[bytes] = set()

    def read_everything() -> bool:
        read.update(record.value for record in consumer.poll(200))
        return read == values

    wait_until(read_everything, 60, "the group member to read every record")
    consumer.commit()
    consumer.close()
    committed = secured.committed_offsets(group, [(topic, 0), (topic, 1)])
    assert sum(offset or 0 for offset in committed.values()) == len(values)

    members = secured.consumer_group(topic, fresh("audit"), members=1, **GROUP_CONFIG)

    def owns_both() -> bool:
        members.poll(200)
        return members.assignment() == [[(topic, 0), (topic, 1)]]

    try:
        wait_until(owns_both, 60, "the member actor to claim both partitions")
    finally:
        members.close()


def test_every_znode_carries_the_digest_acl(secured: Cluster, raw_client) -> None:
    secured.create_topic(fresh("acl"), partitions=1, replication_factor=2)
    anonymous = raw_client()
    holder = raw_client([("digest", f"{CREDENTIALS.user}:{CREDENTIALS.password}")])
    paths = ["/"]
    for path in paths:  # grows as it goes: every znode of the chroot, ephemerals included
        paths.extend(f"{path.rstrip('/')}/{child}" for child in holder.get_children(path))
    assert {"/controller", "/brokers/ids/0", "/controller_epoch"} <= set(paths)
    # The replica hosts' data port addresses hold their tokens: nobody else may even read them.
    private = [path for path in paths if path.startswith("/data_ports/")]
    assert private, "the brokers published their hosts' data ports"
    for path in paths:
        if path in private:
            with pytest.raises(NoAuthError):
                anonymous.get(path)
            acls, _stat = holder.get_acls(path)
            assert {(acl.id.scheme, acl.perms) for acl in acls} == {
                ("digest", Permissions.ALL)}, path
        else:
            acls, _stat = anonymous.get_acls(path)
            assert {(acl.id.scheme, acl.perms) for acl in acls} == {
                ("digest", Permissions.ALL), ("world", Permissions.READ)}, path
        assert all(CREDENTIALS.password not in acl.id.id for acl in acls), "only a hash"


@pytest.mark.parametrize("auth_data", [None, [("digest", "rafka:wrong")]],
                         ids=["no-credentials", "wrong-credentials"])
def test_others_may_read_but_not_write(secured: Cluster, raw_client, auth_data) -> None:
    topic = fresh("guarded")
    secured.create_topic(topic, partitions=1, replication_factor=2)
    client = raw_client(auth_data)
    assert topic in client.get_children("/brokers/topics")
    assert client.get(f"/brokers/topics/{topic}/partitions/0/state")[0]
    writes = {
        "create at the top": lambda: client.create("/intruder", b""),
        "create a topic": lambda: client.create(f"/brokers/topics/{fresh('x')}", b"{}"),
        "rewrite a state": lambda: client.set(f"/brokers/topics/{topic}/partitions/0/state",
                                              b"{}"),
        "bump the controller epoch": lambda: client.set("/controller_epoch", b"99"),
        "delete the controller": lambda: client.delete("/controller"),
        "delete a registration": lambda: client.delete("/brokers/ids/1"),
        "request a deletion": lambda: client.create(f"/admin/delete_topics/{topic}"),
        "open the ACL": lambda: client.set_acls("/brokers", OPEN_ACL_UNSAFE),
    }
    refused = []
    for what, write in writes.items():
        try:
            write()
        except NoAuthError:
            refused.append(what)
    assert refused == list(writes)
    assert secured.describe_topic(topic)["partitions"][0]["leader"] >= 0


def test_a_handle_without_the_credentials_only_looks(secured: Cluster) -> None:
    for credentials, held in [(None, "no credentials"), ("rafka:wrong", "are not the cluster's")]:
        handle = Cluster.connect(str(secured.stack.zk_address), secured.name,
                                 ray_address=None, zk_credentials=credentials)
        try:
            assert [broker["id"] for broker in handle.brokers()] == [0, 1]
            with pytest.raises(ZooKeeperAuthError, match=held) as raised:
                handle.create_topic(fresh("denied"))
            assert "--zk-credentials-file" in str(raised.value)
        finally:
            handle.close()


def _rafka(cluster: Cluster, home: Path, *args: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`rafka ARGS --zk ... --name ... --address ...` against the module's cluster, as a user
    on another machine runs it: a RAFKA_HOME of its own, no credentials unless given."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("RAY_ADDRESS", "RAFKA_CLUSTER", "RAFKA_ZK", "RAFKA_HOME",
                                  "RAFKA_ZK_CREDENTIALS_FILE")}
    # The in-process Ray uses token auth, its token in ~/.ray/auth_token (HOME is kept).
    environment.update(RAY_AUTH_MODE="token", RAFKA_HOME=str(home), PYTHONUNBUFFERED="1",
                       **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "rafka", *args, "--zk", str(cluster.stack.zk_address),
         "--name", cluster.name, "--address", ray.get_runtime_context().gcs_address],
        capture_output=True, text=True, timeout=120, env=environment, check=False,
    )


def test_the_command_line_needs_the_credentials_file(secured: Cluster, tmp_path: Path) -> None:
    home = tmp_path / "rafka-home"
    topic = fresh("cli")
    refused = _rafka(secured, home, "topics", "create", "--topic", topic)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "Traceback" not in refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("rafka: error:")]
    assert len(errors) == 1, refused.stderr
    for needle in ("no credentials", "--zk-credentials-file", "$RAFKA_ZK_CREDENTIALS_FILE"):
        assert needle in errors[0], (needle, errors[0])
    assert not secured.topic_exists(topic)

    credentials_file = write_credentials_file(tmp_path / "copy" / "zk-credentials", CREDENTIALS)
    created = _rafka(secured, home, "topics", "create", "--topic", topic,
                     "--zk-credentials-file", str(credentials_file))
    assert created.returncode == 0, created.stderr
    assert secured.topic_exists(topic)

    # The same file through the environment, as a deployment sets it once.
    altered = _rafka(secured, home, "topics", "alter", topic, "--config", "retention.ms=60000",
                     env={"RAFKA_ZK_CREDENTIALS_FILE": str(credentials_file)})
    assert altered.returncode == 0, altered.stderr
    assert secured.describe_topic(topic)["config"] == {"retention.ms": "60000"}
