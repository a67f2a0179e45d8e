"""Durability under failure, tested by killing things: broker actors, a frozen replica process,
the controller, ZooKeeper sessions."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import ray

from rafka import Cluster, RafkaError
from rafka.actors.clients.producer import Producer
from rafka.actors.errors import (
    BrokerUnavailableError,
    ErrorCode,
    LeaderNotAvailableError,
    raise_for,
)
from rafka.coordination.registration import read_brokers
from rafka.logstore.batch import build_batch, decode_batches
from tests.support.cluster import log_bytes, partition_state
from tests.support.connections import connections_to
from tests.support.faults import expire_broker_session, host_pids, paused, wait_until_exited
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until
from tests.support.workloads import Workload, check_acknowledged, read_everything


def test_killing_leaders_mid_stream_loses_no_acknowledged_record(cluster: Cluster) -> None:
    cluster.create_topic("orders", partitions=3, replication_factor=3,
                         config={"min.insync.replicas": 2})
    with Workload(cluster, "orders") as workload:
        wait_until(lambda: len(workload.acknowledged) > 2000, 60, "acknowledged records")
        victim = partition_state(cluster, "orders", 0)["leader"]
        cluster.kill_broker(victim)
        wait_until(lambda: partition_state(cluster, "orders", 0)["leader"] not in (victim, -1),
                   60, "a new leader")
        before = len(workload.acknowledged)
        wait_until(lambda: len(workload.acknowledged) > before + 2000, 60, "writes after failover")
    assert workload.failed == 0, workload.errors[:3]
    check_acknowledged(workload.acknowledged, read_everything(cluster, "orders"))


def test_a_restarted_broker_catches_up_and_rejoins_the_isr(cluster: Cluster) -> None:
    cluster.create_topic("events", partitions=2, replication_factor=3)
    producer = cluster.producer(acks="all")
    for i in range(500):
        producer.send("events", value=f"a-{i}".encode())
    producer.flush()
    cluster.kill_broker(2)
    wait_until(lambda: all(2 not in p["isr"] for p in cluster.describe_topic("events")
                           ["partitions"]), 30, "broker 2 out of the ISR")
    futures = [producer.send("events", value=f"b-{i}".encode()) for i in range(500)]
    producer.flush()
    assert all(f.result(30) for f in futures)
    cluster.start_broker(2)

    def caught_up() -> bool:
        for p in cluster.describe_topic("events")["partitions"]:
            if 2 not in p["isr"]:
                return False
            replica = ReplicaOnHost(cluster, "events", p["partition"], 2)
            if replica.describe()["log_end_offset"] != p["log_end_offset"]:
                return False
        return True

    wait_until(caught_up, 60, "broker 2 back in every ISR with the whole log")
    producer.close()


def test_a_leaders_isr_changes_reach_its_broker_over_the_control_endpoint(
        cluster: Cluster) -> None:
    """A leader host sends its ISR changes to its broker's control endpoint, beside the
    controller's requests, rather than through Ray: the ISR shrinks while a follower is paused
    and grows back once it catches up, and the leader's host holds a connection to that
    endpoint."""
    cluster.create_topic("isr-link", partitions=1, replication_factor=2)
    state = partition_state(cluster, "isr-link", 0)
    leader = ReplicaOnHost(cluster, "isr-link", 0)
    (follower,) = set(state["replicas"]) - {leader.broker}
    endpoint = read_brokers(cluster.store)[leader.broker].control_endpoint
    assert endpoint, "the broker registered its control endpoint"
    port = int(endpoint.rpartition(":")[2])
    producer = cluster.producer(acks=1)
    with paused(host_pids(cluster, follower)):
        # A follower as far along as its leader stays in sync however long it is silent, as
        # in Kafka: a record it lacks makes it lag.
        producer.send("isr-link", value=b"the follower lacks this").result(30)
        wait_until(lambda: partition_state(cluster, "isr-link", 0)["isr"] == [leader.broker],
                   30, "the paused follower out of the ISR")
    producer.close()
    wait_until(lambda: sorted(partition_state(cluster, "isr-link", 0)["isr"])
               == sorted([leader.broker, follower]), 30, "the follower back in the ISR")
    assert connections_to(leader.pid(), port), "the leader's host reached its broker's endpoint"


def test_the_controller_role_moves_when_its_broker_dies(cluster: Cluster) -> None:
    first = cluster.controller()
    cluster.kill_broker(first)
    wait_until(lambda: cluster.controller() not in (None, first), 30, "a new controller")
    assert cluster.controller() != first
    # The new controller does its job: a new topic gets leaders on live brokers only.
    cluster.create_topic("after", partitions=3, replication_factor=2)
    leaders = {p["leader"] for p in cluster.describe_topic("after")["partitions"]}
    assert leaders and first not in leaders
    producer = cluster.producer()
    assert producer.send("after", value=b"x").result(30).offset == 0
    producer.close()


def test_a_broker_whose_session_expires_loses_leadership_then_rejoins(cluster: Cluster) -> None:
    cluster.create_topic("payments", partitions=1, replication_factor=3,
                         config={"min.insync.replicas": 2})
    producer = cluster.producer(acks="all")
    first = [producer.send("payments", value=f"0-{i}".encode()) for i in range(100)]
    producer.flush()
    leader = partition_state(cluster, "payments", 0)["leader"]
    epoch = partition_state(cluster, "payments", 0)["leader_epoch"]
    expire_broker_session(cluster, leader)
    wait_until(lambda: partition_state(cluster, "payments", 0)["leader_epoch"] > epoch, 30,
               "a new leader epoch")
    # The old leader is fenced: it refuses writes, and clients move on by themselves.
    old = ReplicaOnHost(cluster, "payments", 0, leader)
    later = [producer.send("payments", value=f"1-{i}".encode()) for i in range(100)]
    producer.flush()
    acknowledged = {}
    for future in first + later:
        meta = future.result(30)
        acknowledged[(meta.partition, meta.offset)] = None
    refused = old.produce(build_batch([(None, b"to-the-old-leader", 0, None)]), 1)
    assert refused.code == ErrorCode.NOT_LEADER_OR_FOLLOWER, refused
    wait_until(lambda: leader in partition_state(cluster, "payments", 0)["isr"], 60,
               "the expired broker back in the ISR")
    values = [r.value for r in read_everything(cluster, "payments")]
    assert values == [f"0-{i}".encode() for i in range(100)] + [f"1-{i}".encode()
                                                                 for i in range(100)]
    producer.close()


def test_a_broker_gone_and_back_between_two_looks_of_the_controller_leads_nothing_it_led(
    start_cluster,
) -> None:
    """A bounce the controller sees in one read of `/brokers/ids` (the broker's old session
    expired and its new registration made before the read) is a death and a birth: another
    in-sync replica leads what the broker led, at a new leader epoch, and the broker rejoins
    the ISR once it has caught up, as Kafka's controller handles a bounced broker. The
    controller is paused (well inside its own session) while the broker bounces, so that it
    looks only afterwards."""
    cluster = start_cluster(3, broker_config={"zookeeper.session.timeout.ms": 15000})
    cluster.create_topic("bounced", partitions=3, replication_factor=3,
                         config={"min.insync.replicas": 2})
    controller = cluster.wait_for_controller()
    victim = next(broker for broker in (1, 2, 0) if broker != controller)
    with Workload(cluster, "bounced") as workload:
        wait_until(lambda: len(workload.acknowledged) > 1000, 60, "acknowledged records")
        before = {p["partition"]: p for p in cluster.describe_topic("bounced")["partitions"]}
        # The victim leads a partition: each broker is the preferred leader of one of the three.
        led = [partition for partition, p in before.items() if p["leader"] == victim]
        assert led, before
        old_epoch = read_brokers(cluster.store)[victim].epoch
        controller_pid = ray.get(ray.get_actor(f"broker-{controller}", namespace=cluster.namespace)
                                 .pid.remote(), timeout=30)
        with paused([controller_pid]):
            expire_broker_session(cluster, victim)
            wait_until(lambda: (info := read_brokers(cluster.store).get(victim)) is not None
                       and info.epoch != old_epoch, 10, f"broker {victim} registered anew")
        for partition in led:
            wait_until(lambda p=partition: partition_state(cluster, "bounced", p)["leader"]
                       not in (victim, -1), 30, f"a new leader of bounced-{partition}")
            now = partition_state(cluster, "bounced", partition)
            assert now["leader_epoch"] > before[partition]["leader_epoch"], now
        wait_until(lambda: all(victim in p["isr"] for p in
                               cluster.describe_topic("bounced")["partitions"]),
                   60, f"broker {victim} back in every ISR")
        acknowledged = len(workload.acknowledged)
        wait_until(lambda: len(workload.acknowledged) > acknowledged + 500, 60, "writes after")
    check_acknowledged(workload.acknowledged, read_everything(cluster, "bounced"))


def test_kip101_a_returning_leader_truncates_to_the_new_leaders_log(
    start_cluster, tmp_path
) -> None:
    cluster = start_cluster(2)
    cluster.create_topic("ledger", partitions=1, replication_factor=2)
    state = partition_state(cluster, "ledger", 0)
    old_leader = state["leader"]
    follower = next(b for b in state["replicas"] if b != old_leader)
    producer = cluster.producer(acks="all", enable_idempotence=False)
    for i in range(20):
        producer.send("ledger", value=f"shared-{i}".encode())
    producer.flush()
    producer.close()

    # Freeze the follower's process: it stays in the ISR for replica.lag.time.max.ms, but
    # fetches nothing, so what the leader writes now is not replicated.
    pid = ray.get(ray.get_actor(f"broker-{follower}", namespace=cluster.namespace)
                  .replica_pid.remote("ledger", 0))
    os.kill(pid, signal.SIGSTOP)
    try:
        # Let the follower's long-poll fetch in flight come back empty (replica.fetch.wait.max.ms
        # is 200 ms here): then no fetch is waiting at the leader to carry what it writes next.
        time.sleep(1.0)
        leader_replica = ReplicaOnHost(cluster, "ledger", 0, old_leader)
        lost = build_batch([(None, f"unreplicated-{i}".encode(), 0, None) for i in range(5)])
        assert raise_for(leader_replica.produce(lost, 1)).base_offset == 20
        leader_pids = host_pids(cluster, old_leader)
        cluster.kill_broker(old_leader)
        # Until its processes are gone the old leader would still answer the follower's
        # next fetch, as a dying Kafka broker may, and the follower would keep the records.
        wait_until_exited(leader_pids)
    finally:
        os.kill(pid, signal.SIGCONT)

    wait_until(lambda: partition_state(cluster, "ledger", 0)["leader"] == follower, 30,
               "the follower to lead")
    producer = cluster.producer(acks=1, enable_idempotence=False)
    for i in range(7):
        producer.send("ledger", value=f"new-leader-{i}".encode())
    producer.flush()
    producer.close()

    cluster.start_broker(old_leader)
    wait_until(lambda: old_leader in partition_state(cluster, "ledger", 0)["isr"], 60,
               "the old leader back in the ISR")
    data = cluster.data_dir
    new_dir = data / f"broker-{follower}" / "ledger-0"
    old_dir = data / f"broker-{old_leader}" / "ledger-0"
    wait_until(lambda: log_bytes(old_dir) == log_bytes(new_dir), 30, "identical logs")
    values = [r.value for r in decode_batches(log_bytes(old_dir))]
    assert values == [f"shared-{i}".encode() for i in range(20)] + [
        f"new-leader-{i}".encode() for i in range(7)]


def test_preferred_leader_election_restores_balance(cluster: Cluster) -> None:
    cluster.create_topic("balanced", partitions=3, replication_factor=3)
    preferred = {p["partition"]: p["replicas"][0]
                 for p in cluster.describe_topic("balanced")["partitions"]}
    assert sorted(preferred.values()) == [0, 1, 2]
    cluster.kill_broker(0)
    wait_until(lambda: all(p["leader"] not in (0, -1)
                           for p in cluster.describe_topic("balanced")["partitions"]), 30,
               "leaders off broker 0")
    cluster.start_broker(0)
    wait_until(lambda: all(0 in p["isr"] for p in cluster.describe_topic("balanced")
                           ["partitions"]), 60, "broker 0 back in sync")
    cluster.elect_preferred_leaders()
    leaders = {p["partition"]: p["leader"] for p in cluster.describe_topic("balanced")
               ["partitions"]}
    assert leaders == preferred


@pytest.mark.parametrize("unclean", [False, True])
def test_a_partition_whose_isr_is_gone_stays_offline_unless_unclean_election(
    start_cluster, unclean: bool
) -> None:
    cluster = start_cluster(2)
    cluster.create_topic("risky", partitions=1, replication_factor=2,
                         config={"unclean.leader.election.enable": unclean})
    state = partition_state(cluster, "risky", 0)
    leader = state["leader"]
    follower = next(b for b in state["replicas"] if b != leader)
    producer = cluster.producer(acks="all", enable_idempotence=False, retries=0,
                                delivery_timeout_ms=40_000)
    producer.send("risky", value=b"both").result(30)
    cluster.kill_broker(follower)
    wait_until(lambda: partition_state(cluster, "risky", 0)["isr"] == [leader], 30,
               "the ISR to shrink to the leader")
    producer.send("risky", value=b"leader-only").result(30)
    cluster.kill_broker(leader)
    cluster.start_broker(follower)
    if not unclean:
        # Once the old leader's session expires the controller finds no live ISR member.
        wait_until(lambda: partition_state(cluster, "risky", 0)["leader"] == -1, 30,
                   "the partition to go offline")
        time.sleep(2)
        assert partition_state(cluster, "risky", 0)["leader"] == -1

        # A fresh producer's metadata comes from the one live broker, whose cache the
        # controller's UpdateMetadata reaches a moment after ZooKeeper (seconds, on a busy
        # machine): until then a send goes to the dead leader and fails otherwise.
        def refused_for_want_of_a_leader() -> bool:
            fresh = cluster.producer(acks="all", enable_idempotence=False, retries=0)
            try:
                fresh.send("risky", value=b"refused").result(20)
            except LeaderNotAvailableError as error:
                assert "unclean.leader.election.enable" in str(error), error
                return True
            except (RafkaError, TimeoutError):
                return False
            finally:
                fresh.close()
            raise AssertionError("a write to a partition with no leader was acknowledged")

        wait_until(refused_for_want_of_a_leader, 90, "a send refused for want of a leader")
    else:
        wait_until(lambda: partition_state(cluster, "risky", 0)["leader"] == follower, 30,
                   "an unclean leader")
        after = cluster.producer(acks="all")
        assert after.send("risky", value=b"after").result(30).offset == 1
        after.close()
        values = [r.value for r in read_everything(cluster, "risky")]
        assert values == [b"both", b"after"]  # "leader-only" is lost, as unclean election says
    producer.close()


def test_clients_find_brokers_that_came_back_after_every_broker_they_knew_died(
    start_cluster,
) -> None:
    cluster = start_cluster(3)
    cluster.create_topic("survivor", partitions=2, replication_factor=3,
                         config={"min.insync.replicas": 1})
    cluster.stop_broker(2)
    producer = cluster.producer(acks=1)
    producer.send("survivor", value=b"before").result(30)  # it knows brokers 0 and 1 only
    cluster.start_broker(2)
    wait_until(lambda: all(2 in p["isr"] for p in cluster.describe_topic("survivor")["partitions"]),
               60, "broker 2 back in every ISR")
    cluster.kill_broker(0)
    cluster.kill_broker(1)
    # Every broker it knew of is dead: it must find broker 2 rather than give up.
    assert producer.send("survivor", value=b"after").result(60).offset >= 0
    producer.close()


def test_send_waits_for_metadata_while_no_broker_answers(start_cluster) -> None:
    # A producer made outside a Cluster handle has only the brokers to ask.
    cluster = start_cluster(1)
    cluster.create_topic("patient", partitions=1, replication_factor=1)
    cluster.kill_broker(0)
    restarter = threading.Timer(2.0, cluster.start_broker, args=(0,))
    restarter.start()
    try:
        producer = Producer(cluster.namespace, acks=1)  # no metadata yet, no broker to ask
        started = time.monotonic()
        future = producer.send("patient", value=b"v")  # waits up to max.block.ms (60 s)
        assert time.monotonic() - started >= 1.0
        assert future.result(60).offset == 0
        producer.close()
    finally:
        restarter.join()
    cluster.kill_broker(0)
    hasty = Producer(cluster.namespace, acks=1, max_block_ms=300)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="answered a metadata request"):
        hasty.send("patient", value=b"v")
    assert 0.3 <= time.monotonic() - started < 10
    hasty.close()


def test_a_clusters_producer_learns_the_topic_from_zookeeper_while_no_broker_answers(
        start_cluster) -> None:
    # The cluster's own producer reads the partition count where the controller wrote it, so
    # the send is queued at once; the record goes once a broker leads the partition again.
    cluster = start_cluster(1)
    cluster.create_topic("patient", partitions=1, replication_factor=1)
    cluster.kill_broker(0)
    producer = cluster.producer(acks=1, max_block_ms=300)
    try:
        future = producer.send("patient", value=b"v")
        assert producer.metadata.zookeeper_answers >= 1
        assert not future.done()
        cluster.start_broker(0)
        assert future.result(60).offset == 0
    finally:
        producer.close()
