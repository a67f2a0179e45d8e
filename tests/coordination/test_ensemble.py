"""A real 3-member ZooKeeper ensemble (three JVMs on 127.0.0.1, each with its own data dir and
free ports): it serves while a majority is up, stops serving without one, and comes back with its
data; a rafka cluster on it keeps producing when the member its brokers use dies; and the
`rafka zookeeper` command runs members that `rafka up --zk` uses.

Every member is stopped by its PID afterwards, whatever happened. The configuration alone
(no JVM) is tested in test_ensemble_config.py.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NodeExistsError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from rafka import Cluster
from rafka.coordination.embedded import (
    ZooKeeperAddress,
    four_letter_word,
    is_embedded_server,
    pid_alive,
    recorded_pid,
    stop_recorded_server,
    wait_for_exit,
)
from rafka.coordination.ensemble import (
    NOT_SERVING,
    Ensemble,
    EnsembleMember,
    ensemble_modes,
    start_members,
)
from rafka.coordination.errors import ZooKeeperStartError
from tests.support.cli import Rafka, rafka_up
from tests.support.cluster import TEST_BROKER_CONFIG
from tests.support.waiting import wait_until
from tests.support.workloads import Workload, check_acknowledged, read_everything

# Three JVMs of their own (and Ray, for the cluster), started here.
pytestmark = pytest.mark.cluster

# Quick quorum timing for tests: a follower that hears nothing from its leader for 8 ticks (2 s)
# looks for another one. Users get Kafka's documented 2000 ms / 5 / 2.
TICK_MS, INIT_LIMIT, SYNC_LIMIT = 250, 20, 8
ERRORS_WITHOUT_QUORUM = (ConnectionLoss, SessionExpiredError, KazooTimeoutError)


@pytest.fixture
def members(tmp_path: Path) -> Iterator[list[EnsembleMember]]:
    """A started 3-member ensemble; every member stopped by its PID afterwards."""
    ensemble = Ensemble.on_free_ports(3)
    started = [EnsembleMember(tmp_path / f"zk{server_id}", ensemble, server_id,
                              tick_time_ms=TICK_MS, init_limit=INIT_LIMIT,
                              sync_limit=SYNC_LIMIT, force_sync=False)
               for server_id in ensemble.ids]
    try:
        start_members(started, timeout_s=90)
        yield started
    finally:
        for member in started:
            member.stop()


@pytest.fixture
def connect() -> Iterator[Callable[[str], KazooClient]]:
    """Started kazoo clients (10 s sessions, quick reconnects); all closed afterwards."""
    clients: list[KazooClient] = []

    def start(hosts: str) -> KazooClient:
        client = KazooClient(hosts=hosts, timeout=10,
                             connection_retry=KazooRetry(max_tries=-1, delay=0.05,
                                                         max_delay=0.5))
        clients.append(client)
        client.start(timeout=30)
        return client

    yield start
    for client in clients:
        client.stop()
        client.close()


def _create(client: KazooClient, path: str, value: bytes, timeout_s: float = 45.0) -> None:
    """Create `path`, retrying while the ensemble elects a leader and the client reconnects."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.create_async(path, value).get(timeout=5)
            return
        except NodeExistsError:  # an attempt that timed out here went through meanwhile
            assert client.get(path)[0] == value
            return
        except ERRORS_WITHOUT_QUORUM:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _modes(members: list[EnsembleMember]) -> list[str]:
    return [member.mode() for member in members]


def test_three_members_elect_a_leader_and_replicate_writes(
    members: list[EnsembleMember], connect: Callable[[str], KazooClient]
) -> None:
    assert sorted(_modes(members)) == ["follower", "follower", "leader"]
    for member in members:
        assert "Mode: " in four_letter_word(member.host, member.server.client_port, "srvr")
        assert (member.data_dir / "data" / "myid").read_text() == f"{member.id}\n"
        assert recorded_pid(member.data_dir) == member.pid
        assert is_embedded_server(member.pid, member.data_dir)
    address = members[0].address
    assert len(address.hosts) == 3
    connect(str(address)).create("/hello", b"world")
    # Each member has it, read from that member alone (after a sync with the leader).
    for member in members:
        alone = connect(f"{member.host}:{member.server.client_port}")
        alone.sync("/hello")
        assert alone.get("/hello")[0] == b"world"


def test_a_majority_serves_a_minority_does_not_and_a_restart_restores_the_data(
    members: list[EnsembleMember], connect: Callable[[str], KazooClient]
) -> None:
    address = str(members[0].address)
    client = connect(address)
    client.create("/before", b"3 of 3")

    # One member killed (the leader: the others must elect a new one): 2 of 3 still serve.
    leader = next(member for member in members if member.mode() == "leader")
    leader_pid = leader.pid
    leader.kill()
    assert wait_for_exit(leader_pid, 10)
    _create(client, "/after-one", b"2 of 3")
    alive = [member for member in members if member is not leader]
    wait_until(lambda: sorted(_modes(alive)) == ["follower", "leader"], 30,
               "the two left to elect a leader")

    # A second one killed: the survivor has no quorum, and no write goes through.
    second, survivor = alive
    second.kill()
    wait_until(lambda: survivor.mode() == NOT_SERVING, 30, "the survivor to stop serving")
    with pytest.raises(ERRORS_WITHOUT_QUORUM):
        client.create_async("/without-quorum", b"1 of 3").get(timeout=5)
    # A client connecting now gets no session at all.
    lone = KazooClient(hosts=address, timeout=10)
    with pytest.raises(KazooTimeoutError):
        lone.start(timeout=3)
    lone.stop()
    lone.close()

    # The first one killed (which missed /after-one) comes back: 2 of 3 again, data intact.
    leader.restart(wait_for_quorum=True)
    assert sorted(_modes([leader, survivor])) == ["follower", "leader"]
    fresh = connect(address)
    fresh.sync("/")
    assert fresh.get("/before")[0] == b"3 of 3"
    assert fresh.get("/after-one")[0] == b"2 of 3"
    _create(fresh, "/after-restart", b"2 of 3 again")


def test_a_cluster_keeps_producing_when_its_brokers_member_dies(
    members: list[EnsembleMember], ray_session: None, tmp_path: Path
) -> None:
    address = members[0].address
    cluster = Cluster.start(3, name=f"ensemble-{uuid.uuid4().hex[:8]}", zk=f"{address}/tests",
                            data_dir=tmp_path / "c", broker_config=TEST_BROKER_CONFIG)
    try:
        assert cluster.stack.zookeeper is None  # nothing embedded: the ensemble is used
        assert len(cluster.stack.zk_address.hosts) == 3
        cluster.create_topic("orders", partitions=3, replication_factor=3,
                             config={"min.insync.replicas": 2})
        # The brokers' sessions (TEST_BROKER_CONFIG's 4 s timeout; the Cluster handle's is
        # 18 s) are spread over the members: kill the member holding the most of them.
        sessions = {member.id: _broker_sessions(member) for member in members}
        before = set().union(*sessions.values())
        assert len(before) == 3, sessions
        victim = max(members, key=lambda member: len(sessions[member.id]))
        survivors = [member for member in members if member is not victim]
        with Workload(cluster, "orders") as workload:
            wait_until(lambda: len(workload.acknowledged) >= 200, 60, "records acknowledged")
            victim.kill()
            # The other two serve again (electing a leader if the victim led), and the
            # brokers' sessions moved to them: the same sessions, none expired.
            wait_until(lambda: sorted(_modes(survivors)) == ["follower", "leader"], 30,
                       "the two members left to serve")
            wait_until(lambda: set().union(*map(_broker_sessions, survivors)) == before, 30,
                       "the brokers' sessions on the members left")
            killed_at = len(workload.acknowledged)
            wait_until(lambda: len(workload.acknowledged) >= killed_at + 500, 90,
                       "records acknowledged after the member was killed")
            # What needs ZooKeeper still works: a new topic (the controller writes its
            # partitions' states) and the brokers' registrations.
            cluster.create_topic("after", partitions=1, replication_factor=3)
            producer = cluster.producer(acks="all")
            producer.send("after", value=b"still here").result(60)
            producer.close()
            assert [broker["id"] for broker in cluster.brokers()] == [0, 1, 2]
            assert cluster.controller() is not None
        check_acknowledged(workload.acknowledged, read_everything(cluster, "orders"))
        assert len(workload.acknowledged) > killed_at + 500
    finally:
        cluster.shutdown()


def test_brokers_fenced_while_the_quorum_was_lost_lead_and_follow_again(
    members: list[EnsembleMember], ray_session: None, tmp_path: Path
) -> None:
    """Two of three members down past the brokers' session timeout: every broker, cut off
    that long, fences its replicas; the sessions themselves outlive the outage (ZooKeeper
    expires none while it has no quorum), so when the quorum returns no broker registers
    anew and the controller sends nothing. Each broker gives its replicas back their roles
    from ZooKeeper, and every partition must take writes with every replica in its ISR again."""
    cluster = Cluster.start(3, name=f"quorum-{uuid.uuid4().hex[:8]}",
                            zk=f"{members[0].address}/tests", data_dir=tmp_path / "c",
                            broker_config=TEST_BROKER_CONFIG)
    try:
        cluster.create_topic("orders", partitions=6, replication_factor=3,
                             config={"min.insync.replicas": 2})
        epochs = {p["partition"]: p["leader_epoch"]
                  for p in cluster.describe_topic("orders")["partitions"]}
        session_s = TEST_BROKER_CONFIG["zookeeper.session.timeout.ms"] / 1000
        with Workload(cluster, "orders") as workload:
            wait_until(lambda: len(workload.acknowledged) >= 200, 60, "records acknowledged")
            lost = members[1:]
            for member in lost:
                member.kill()
            wait_until(lambda: members[0].mode() == NOT_SERVING, 30, "the quorum to be lost")
            time.sleep(2.5 * session_s)  # every broker fences itself past its timeout
            for member in lost:
                member.restart(wait_for_quorum=False)
            members[0].wait_for_quorum(60)
            before = _acknowledged_by_partition(workload)

            def every_replica_back() -> bool:
                partitions = cluster.describe_topic("orders")["partitions"]
                return all(len(p["isr"]) == 3 and p["high_watermark"] is not None
                           for p in partitions)

            wait_until(every_replica_back, 60, "every replica back in every ISR")
            wait_until(lambda: all(count > before.get(partition, 0) for partition, count
                                   in _acknowledged_by_partition(workload).items())
                       and len(_acknowledged_by_partition(workload)) == 6, 60,
                       "every partition acknowledging writes again")
        check_acknowledged(workload.acknowledged, read_everything(cluster, "orders"))
        moved = {p["partition"] for p in cluster.describe_topic("orders")["partitions"]
                 if p["leader_epoch"] != epochs[p["partition"]]}
        print(f"partitions the controller moved meanwhile: {sorted(moved)}")
    finally:
        cluster.shutdown()


def _acknowledged_by_partition(workload: Workload) -> dict[int, int]:
    counts: dict[int, int] = {}
    for partition, _offset in list(workload.acknowledged):
        counts[partition] = counts.get(partition, 0) + 1
    return counts


def _broker_sessions(member: EnsembleMember) -> set[str]:
    """The ids of the brokers' sessions (those with the brokers' timeout) connected to `member`,
    from `cons`."""
    timeout_ms = TEST_BROKER_CONFIG["zookeeper.session.timeout.ms"]
    try:
        answer = four_letter_word(member.host, member.server.client_port, "cons")
    except OSError:
        return set()
    return set(re.findall(rf"sid=(0x[0-9a-f]+),[^)]*?\bto={timeout_ms}\b", answer))


def test_rafka_zookeeper_runs_members_that_rafka_up_uses(tmp_path: Path) -> None:
    rafka = Rafka(tmp_path)
    ensemble = Ensemble.on_free_ports(3)
    servers = ",".join(f"{s.host}:{s.quorum_port}:{s.election_port};{s.client_port}"
                       for s in ensemble.servers)
    connect_string = str(ensemble.connect_string)
    data_dirs = {server_id: tmp_path / f"member-{server_id}" for server_id in ensemble.ids}
    try:
        for server_id, data_dir in data_dirs.items():
            started = rafka("zookeeper", "start", "--id", str(server_id), "--servers", servers,
                            "--data-dir", str(data_dir), "--tick-time-ms", str(TICK_MS),
                            "--init-limit", str(INIT_LIMIT), "--sync-limit", str(SYNC_LIMIT))
            assert started.returncode == 0, started.stderr
            assert f"started ZooKeeper member {server_id} of 3" in started.stdout
            assert connect_string in started.stdout
            pid = recorded_pid(data_dir)
            assert pid is not None and is_embedded_server(pid, data_dir)
        again = rafka("zookeeper", "start", "--id", "1", "--servers", servers,
                      "--data-dir", str(data_dirs[1]))
        assert again.returncode == 1 and "is running from" in again.stderr, again.stderr
        wait_until(lambda: sorted(ensemble_modes(connect_string).values())
                   == ["follower", "follower", "leader"], 60, "the members to form a quorum")
        status = rafka("zookeeper", "status", "--data-dir", str(data_dirs[2]))
        assert status.returncode == 0, status.stderr
        assert "this machine's member: 2 (pid" in status.stdout
        assert "serving: 3 of 3 servers serve clients" in status.stdout
        assert re.search(r"^2 +127\.0\.0\.1:\d+ +(leader|follower) +<- this member$",
                         status.stdout, re.MULTILINE), status.stdout

        # `rafka up --zk` on the ensemble: it starts no ZooKeeper, and `down` leaves it be.
        with rafka_up(rafka, "onensemble", tmp_path / "cluster", 1, "--zk",
                      connect_string) as (result, state):
            assert f"ZooKeeper  {connect_string}" in result.stdout
            assert "(embedded" not in result.stdout
            assert state["zookeeper"] is None and state["zk"] == connect_string
            cluster_status = rafka("status")
            assert cluster_status.returncode == 0, cluster_status.stderr
            assert f"zookeeper    {connect_string}" in cluster_status.stdout
            assert "brokers      1 live: 0@" in cluster_status.stdout
        assert all(is_embedded_server(recorded_pid(d), d) for d in data_dirs.values())

        # Stopped by PID: one member down leaves a quorum; two down, none.
        pids = {server_id: recorded_pid(d) for server_id, d in data_dirs.items()}
        stopped = rafka("zookeeper", "stop", "--data-dir", str(data_dirs[3]))
        assert stopped.returncode == 0, stopped.stderr
        assert f"stopped ZooKeeper member 3 (pid {pids[3]})" in stopped.stdout
        assert wait_for_exit(pids[3], 10)
        assert rafka("zookeeper", "status", "--zk", connect_string).returncode == 0
        assert rafka("zookeeper", "stop", "--data-dir", str(data_dirs[2])).returncode == 0
        lost = rafka("zookeeper", "status", "--data-dir", str(data_dirs[1]))
        assert lost.returncode == 1 and "no server of" in lost.stderr, lost.stderr
        assert rafka("zookeeper", "stop", "--data-dir", str(data_dirs[1])).returncode == 0
        assert not any(pid_alive(pid) for pid in pids.values() if pid)
        nothing = rafka("zookeeper", "stop", "--data-dir", str(data_dirs[1]))
        assert nothing.returncode == 0 and "nothing to stop" in nothing.stderr
    finally:
        for data_dir in data_dirs.values():
            stop_recorded_server(data_dir, timeout_s=10)


def test_a_member_alone_waits_for_its_quorum(tmp_path: Path) -> None:
    ensemble = Ensemble.on_free_ports(3)
    member = EnsembleMember(tmp_path, ensemble, 2, tick_time_ms=TICK_MS,
                            init_limit=INIT_LIMIT, sync_limit=SYNC_LIMIT, force_sync=False)
    try:
        member.start(wait_for_quorum=False)
        assert member.mode() == NOT_SERVING
        with pytest.raises(ZooKeeperStartError, match="found no quorum within 2 s"):
            member.wait_for_quorum(2)
        assert member.running(), "a member without a quorum keeps waiting for one"
        assert ZooKeeperAddress.parse(str(member.address)) == ensemble.connect_string
    finally:
        member.stop()
