"""Controller election: one controller at a time, a new epoch at every win, fenced writes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest

from rafka.coordination.admin import TopicAdmin
from rafka.coordination.election import ControllerElection, read_controller, read_controller_epoch
from rafka.coordination.embedded import ZooKeeperAddress
from rafka.coordination.errors import ControllerMovedError
from rafka.coordination.models import PartitionState
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.store import ClusterStore
from tests.support.waiting import eventually
from tests.support.zookeeper import TcpProxy, expire_session


class Candidate:
    """An election with a log of its callbacks."""

    def __init__(self, store: ClusterStore, broker_id: int) -> None:
        self.broker_id = broker_id
        self.calls: list[tuple[str, int | None]] = []
        self.election = ControllerElection(
            store,
            broker_id,
            on_elected=lambda epoch: self.calls.append(("elected", epoch)),
            on_resigned=lambda: self.calls.append(("resigned", None)),
        )

    def start(self) -> Candidate:
        self.election.start()
        return self

    @property
    def is_controller(self) -> bool:
        return self.election.is_controller


def _controllers(candidates: list[Candidate]) -> list[Candidate]:
    return [c for c in candidates if c.is_controller]


def controller_and_challenger(make_store: Callable[..., ClusterStore],
                              address: ZooKeeperAddress | None = None
                              ) -> tuple[Candidate, Candidate]:
    """Candidate 1, controller (its store reaching ZooKeeper at `address`, the test's chroot if
    None), and candidate 2, started after it won, each on its own session."""
    first = Candidate(make_store(address), 1).start()
    assert eventually(lambda: first.is_controller)
    return first, Candidate(make_store(), 2).start()


def test_the_first_candidate_wins_with_epoch_one(store: ClusterStore) -> None:
    candidate = Candidate(store, 1).start()
    assert eventually(lambda: candidate.is_controller)
    assert candidate.election.epoch == 1
    data, stat = store.get("/controller")
    assert json.loads(data)["brokerid"] == 1 and "timestamp" in json.loads(data)
    assert stat.ephemeralOwner == store.session_id
    epoch = read_controller_epoch(store)
    assert epoch is not None and epoch.value == 1
    fence = candidate.election.fence
    assert fence is not None and fence.epoch_zk_version == epoch.version
    controller = read_controller(store)
    assert controller is not None and controller.value.brokerid == 1
    assert eventually(lambda: candidate.calls == [("elected", 1)])


def test_a_loser_waits_and_takes_over_when_the_controller_stops(
    make_store: Callable[..., ClusterStore],
) -> None:
    first, second = controller_and_challenger(make_store)
    time.sleep(0.3)
    assert not second.is_controller
    first.election.stop()
    assert not first.is_controller
    assert eventually(lambda: second.is_controller)
    assert second.election.epoch == 2
    assert eventually(lambda: first.calls == [("elected", 1), ("resigned", None)])
    assert eventually(lambda: second.calls == [("elected", 2)])


def test_session_expiry_moves_the_controller_and_bumps_the_epoch(
    make_store: Callable[..., ClusterStore],
) -> None:
    first, second = controller_and_challenger(make_store)
    expire_session(first.election.store)
    assert eventually(lambda: second.is_controller)
    assert not first.is_controller
    assert second.election.epoch == 2
    assert eventually(lambda: ("resigned", None) in first.calls)
    # The expired candidate competes again in its new session, and loses to the live controller.
    assert eventually(lambda: first.election.store.connected)
    time.sleep(0.2)
    assert not first.is_controller


def test_at_most_one_candidate_believes_it_is_controller_while_sessions_die(
    make_store: Callable[..., ClusterStore],
) -> None:
    candidates = [Candidate(make_store(), broker_id).start() for broker_id in (1, 2, 3)]
    violations: list[str] = []
    samples = 0
    done = threading.Event()

    def poll() -> None:
        nonlocal samples
        while not done.is_set():
            # Two passes: if i believes in both and j believes in between, they overlapped
            # (a single pass could be fooled by a hand-over between reading i and reading j).
            first = [c.is_controller for c in candidates]
            second = [c.is_controller for c in candidates]
            samples += 1
            for i in range(len(candidates)):
                for j in range(i + 1, len(candidates)):
                    if first[i] and first[j] and second[i]:
                        violations.append(f"brokers {i + 1} and {j + 1} at once")
            time.sleep(0.0005)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    last_epoch = 0
    try:
        for round_ in range(8):
            assert eventually(lambda: len(_controllers(candidates)) == 1), f"round {round_}"
            controller = _controllers(candidates)[0]
            epoch = controller.election.epoch
            assert epoch is not None and epoch > last_epoch
            last_epoch = epoch
            if round_ % 4 == 3:
                controller.election.stop()  # a controlled shutdown now and then
                controller.start()
            else:
                expire_session(controller.election.store)
            assert eventually(
                lambda last=last_epoch: any(
                    (c.election.epoch or 0) > last for c in _controllers(candidates)
                )
            ), f"no new controller after round {round_}"
    finally:
        done.set()
        poller.join(2)
    assert not violations, violations[:5]
    assert samples > 100
    wins = {(c.broker_id, e) for c in candidates for kind, e in c.calls if kind == "elected"}
    epochs = sorted(epoch for _, epoch in wins)
    assert len(epochs) == len(set(epochs)), f"an epoch won twice: {sorted(wins)}"
    stored = read_controller_epoch(candidates[0].election.store)
    assert stored is not None and stored.value == max(epochs)


def test_a_disconnected_controller_stops_believing_and_reassumes_on_reconnect(
    make_store: Callable[..., ClusterStore],
    proxy: TcpProxy,
    proxied_address: ZooKeeperAddress,
) -> None:
    partitioned, other = controller_and_challenger(make_store, proxied_address)
    proxy.cut()
    assert eventually(lambda: not partitioned.is_controller, timeout_s=1)
    assert eventually(lambda: ("resigned", None) in partitioned.calls)
    time.sleep(0.5)
    assert not other.is_controller, "the session, hence /controller, is still alive"
    proxy.restore()
    assert eventually(lambda: partitioned.is_controller)
    assert partitioned.election.epoch == 1, "nobody else can have won meanwhile"
    assert eventually(
        lambda: partitioned.calls == [("elected", 1), ("resigned", None), ("elected", 1)]
    )
    assert not other.is_controller


def test_a_partitioned_controller_whose_session_expires_never_believes_again(
    make_store: Callable[..., ClusterStore],
    proxy: TcpProxy,
    proxied_address: ZooKeeperAddress,
    zk_address: ZooKeeperAddress,
) -> None:
    partitioned, other = controller_and_challenger(make_store, proxied_address)
    proxy.cut()
    expire_session(partitioned.election.store, servers=zk_address)
    assert eventually(lambda: other.is_controller)
    assert not partitioned.is_controller
    proxy.restore()
    assert eventually(lambda: partitioned.election.store.connected)
    time.sleep(0.2)
    assert not partitioned.is_controller and other.is_controller
    assert other.election.epoch == 2


def test_writes_fenced_by_a_replaced_controller_are_refused(
    make_store: Callable[..., ClusterStore],
) -> None:
    first_store = make_store()
    first_store.ensure_layout()
    TopicAdmin(first_store).create_topic("orders", {0: [1, 2]})
    first = Candidate(first_store, 1).start()
    assert eventually(lambda: first.is_controller)
    stale_fence = first.election.fence
    assert stale_fence is not None
    states = PartitionStateStore(first_store)
    initial = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    states.create_partition_states("orders", {0: initial}, fence=stale_fence)

    second_store = make_store()
    second = Candidate(second_store, 2).start()
    expire_session(first_store)
    assert eventually(lambda: second.is_controller)
    assert eventually(lambda: first_store.connected)  # a new session, same stale fence
    moved = PartitionState(leader=2, leader_epoch=1, isr=(2,), controller_epoch=1)
    with pytest.raises(ControllerMovedError, match="another broker is the controller"):
        states.update_partition_state("orders", 0, moved, 0, fence=stale_fence)
    new_fence = second.election.fence
    assert new_fence is not None and new_fence.epoch == 2
    elected = PartitionState(leader=2, leader_epoch=1, isr=(2,), controller_epoch=2)
    assert PartitionStateStore(second_store).update_partition_state(
        "orders", 0, elected, 0, fence=new_fence
    ) == 1
    with pytest.raises(ControllerMovedError):
        TopicAdmin(first_store).delete_topic_znodes("orders", fence=stale_fence)
