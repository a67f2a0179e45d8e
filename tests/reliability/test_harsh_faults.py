"""Faults that overlap, and faults that pause a process instead of killing it.

Each scenario runs an acks=all, idempotent producer (RF 3, min.insync.replicas 2) through one
fault and then checks what a user would: no acknowledged record lost, changed or doubled, and no
write acknowledged while the cluster could not have kept it. The scenarios:

- two of three brokers down at once: every acknowledged record is on a broker that went down as
  well as on the survivor, writes are refused, then all returns;
- a leader killed while the controller is paused past its ZooKeeper session: the next controller
  elects a leader, and the paused one, when it resumes, is no longer the controller;
- a partition leader paused (SIGSTOP: its broker and its replica hosts, as a Kafka broker's JVM
  would be) past its session timeout: on its return, nothing it accepts is acknowledged;
- a broker cut off from ZooKeeper by a severed TCP proxy while Ray still reaches it: once its
  session must have expired it stops leading, and it accepts no write the new leader never sees.
"""

from __future__ import annotations

import time

from rafka import Cluster
from rafka.actors.errors import ErrorCode, code_of
from rafka.logstore.batch import build_batch, decode_batches
from tests.support.cluster import log_bytes, partition_state
from tests.support.faults import SESSION_TIMEOUT_S, broker_pids, paused, wait_until_exited
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until
from tests.support.workloads import Workload, check_acknowledged, read_everything
from tests.support.zookeeper import TcpProxy

TOPIC = "harsh"
# A leader that is paused answers nothing: the producer gives up on it after this, and retries.
REQUEST_TIMEOUT_MS = 8_000


def _create_topic(cluster: Cluster, partitions: int = 3) -> None:
    cluster.create_topic(TOPIC, partitions=partitions, replication_factor=3,
                         config={"min.insync.replicas": 2})


def _records_on_disk(cluster: Cluster, broker: int) -> dict[tuple[int, int], bytes]:
    """What a broker that is down holds of the topic, read from its log files."""
    held = {}
    for directory in (cluster.data_dir / f"broker-{broker}").glob(f"{TOPIC}-*"):
        partition = int(directory.name.rsplit("-", 1)[1])
        held.update(((partition, record.offset), record.value)
                    for record in decode_batches(log_bytes(directory)))
    return held


def _acknowledged_more(workload: Workload, count: int, what: str, timeout_s: float = 90) -> None:
    before = len(workload.acknowledged)
    wait_until(lambda: len(workload.acknowledged) >= before + count, timeout_s, what)


def _refused(reply: object) -> bool:
    return code_of(reply) != 0


def _stray_write() -> bytes:
    return build_batch([(None, b"stray", int(time.time() * 1000), None)])


def test_two_of_three_brokers_down_refuse_writes_then_everything_returns(
    cluster: Cluster,
) -> None:
    _create_topic(cluster)
    with Workload(cluster, TOPIC, request_timeout_ms=REQUEST_TIMEOUT_MS) as workload:
        _acknowledged_more(workload, 500, "writes before the fault")
        survivor = cluster.controller()
        down = [broker for broker in (0, 1, 2) if broker != survivor]
        pids = [pid for broker in down for pid in broker_pids(cluster, broker)]
        for broker in down:
            cluster.kill_broker(broker)
        # Ray forgets a killed actor before its process exits, and until then a dying follower
        # may still fetch. What it fetched is on two brokers and may be acknowledged, even
        # seconds later (once the other dead broker is out of the ISR): not a fault. What the
        # dead brokers hold once their processes are gone is what counts.
        wait_until_exited(pids)
        held = [_records_on_disk(cluster, broker) for broker in down]
        # The controller moves every partition to the survivor, alone in every ISR.
        wait_until(lambda: all(p["leader"] == survivor and p["isr"] == [survivor]
                               for p in cluster.describe_topic(TOPIC)["partitions"]),
                   60, "the survivor leading every partition, alone")
        time.sleep(3)  # the workload goes on writing
        workload.settle_answered()
        acknowledged = dict(workload.acknowledged)  # a copy: the workload goes on adding to it
        # min.insync.replicas=2: each acknowledged record is on the survivor (checked at the
        # end) and on at least one of the brokers now down.
        on_one = sorted(key for key, value in acknowledged.items()
                        if all(log.get(key) != value for log in held))
        assert not on_one, (
            f"{len(on_one)} of {len(acknowledged)} acknowledged records are on the survivor "
            f"alone, min.insync.replicas=2: {on_one[:5]}")
        reply = ReplicaOnHost(cluster, TOPIC, 0, survivor).produce(_stray_write(), -1, 5000)
        assert reply.code == ErrorCode.NOT_ENOUGH_REPLICAS, reply
        for broker in down:
            cluster.start_broker(broker)
        wait_until(lambda: all(len(p["isr"]) == 3
                               for p in cluster.describe_topic(TOPIC)["partitions"]),
                   90, "every ISR whole again")
        _acknowledged_more(workload, 500, "writes after both brokers returned")
    assert workload.failed == 0, workload.errors[:3]
    check_acknowledged(workload.acknowledged, read_everything(cluster, TOPIC))


def test_a_leader_killed_while_the_controller_ispaused(cluster: Cluster) -> None:
    _create_topic(cluster)
    controller = cluster.controller()
    states = cluster.describe_topic(TOPIC)["partitions"]
    victim = next(p["leader"] for p in states if p["leader"] != controller)
    survivor = ({0, 1, 2} - {controller, victim}).pop()
    orphaned = [p["partition"] for p in states if p["leader"] == victim]
    with Workload(cluster, TOPIC, request_timeout_ms=REQUEST_TIMEOUT_MS) as workload:
        _acknowledged_more(workload, 500, "writes before the fault")
        with paused(broker_pids(cluster, controller)):
            cluster.kill_broker(victim)
            # Nobody acts until the paused controller's session expires; then the survivor
            # becomes controller and gives the victim's partitions a leader.
            wait_until(lambda: cluster.controller() == survivor, 60, "a new controller")
            wait_until(lambda: all(partition_state(cluster, TOPIC, p)["leader"] == survivor
                                   for p in orphaned), 60, "leaders for the victim's partitions")
            time.sleep(2)
        # The old controller resumes to find its session gone: it is a broker like the others.
        wait_until(lambda: all(len(p["isr"]) == 2
                               for p in cluster.describe_topic(TOPIC)["partitions"]),
                   90, "the paused broker back in every ISR")
        assert cluster.controller() == survivor
        _acknowledged_more(workload, 500, "writes after the pause")
        cluster.start_broker(victim)
        wait_until(lambda: all(len(p["isr"]) == 3
                               for p in cluster.describe_topic(TOPIC)["partitions"]),
                   90, "every ISR whole again")
    assert workload.failed == 0, workload.errors[:3]
    check_acknowledged(workload.acknowledged, read_everything(cluster, TOPIC))


def test_a_leader_paused_past_its_session_is_fenced_when_it_returns(cluster: Cluster) -> None:
    _create_topic(cluster, partitions=1)
    with Workload(cluster, TOPIC, request_timeout_ms=REQUEST_TIMEOUT_MS) as workload:
        _acknowledged_more(workload, 300, "writes before the fault")
        state = partition_state(cluster, TOPIC, 0)
        leader, epoch = state["leader"], state["leader_epoch"]
        old = ReplicaOnHost(cluster, TOPIC, 0, leader)
        with paused(broker_pids(cluster, leader)):
            wait_until(lambda: partition_state(cluster, TOPIC, 0)["leader_epoch"] > epoch, 60,
                       "a new leader while the old one is paused")
            _acknowledged_more(workload, 300, "writes to the new leader")
        # At once, before it can have heard anything: whatever it still believes, a write it
        # takes is never acknowledged (its followers follow someone else now).
        reply = old.produce(_stray_write(), -1, 5000)
        assert _refused(reply), reply
        wait_until(lambda: leader in partition_state(cluster, TOPIC, 0)["isr"], 90,
                   "the paused broker back in the ISR")
        _acknowledged_more(workload, 300, "writes after the pause")
    assert workload.failed == 0, workload.errors[:3]
    records = read_everything(cluster, TOPIC)
    check_acknowledged(workload.acknowledged, records)
    assert b"stray" not in {r.value for r in records}, "a write to the fenced leader was kept"


def test_a_broker_cut_off_from_zookeeper_stops_leading(start_cluster) -> None:
    cluster = start_cluster(3)
    zookeeper = cluster.stack.zk_address
    proxy = TcpProxy.to(zookeeper)
    try:
        # Broker 2 reaches ZooKeeper through the proxy; Ray still reaches it directly.
        cluster.kill_broker(2)
        cluster.start_broker(2, config={"zookeeper.connect": str(proxy.address(zookeeper.chroot))})
        _create_topic(cluster)
        led = [p["partition"] for p in cluster.describe_topic(TOPIC)["partitions"]
               if p["leader"] == 2]
        assert led, "broker 2 leads nothing: the scenario needs a partition it leads"
        partition = led[0]
        with Workload(cluster, TOPIC, request_timeout_ms=REQUEST_TIMEOUT_MS) as workload:
            _acknowledged_more(workload, 300, "writes before the fault")
            epoch = partition_state(cluster, TOPIC, partition)["leader_epoch"]
            old = ReplicaOnHost(cluster, TOPIC, partition, 2)
            proxy.cut()
            wait_until(lambda: partition_state(cluster, TOPIC, partition)["leader_epoch"] > epoch,
                       60, "a new leader once broker 2's session expired")
            # Past its session timeout broker 2 knows its session is gone, though it cannot
            # hear so from ZooKeeper: it leads nothing, for acks=all and acks=1 alike.
            wait_until(lambda: old.describe()["role"] != "leader", SESSION_TIMEOUT_S + 12,
                       "broker 2 to stop leading while cut off")
            for acks in (-1, 1):
                reply = old.produce(_stray_write(), acks, 5000)
                assert reply.code == ErrorCode.NOT_LEADER_OR_FOLLOWER, reply
            _acknowledged_more(workload, 300, "writes to the new leader")
            proxy.restore()
            wait_until(lambda: all(len(p["isr"]) == 3
                                   for p in cluster.describe_topic(TOPIC)["partitions"]),
                       90, "broker 2 back in every ISR")
            _acknowledged_more(workload, 300, "writes after the cut healed")
        assert workload.failed == 0, workload.errors[:3]
        records = read_everything(cluster, TOPIC)
        check_acknowledged(workload.acknowledged, records)
        assert b"stray" not in {r.value for r in records}
    finally:
        proxy.close()
