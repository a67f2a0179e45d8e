"""A controller's recovery from a failed step: the pure decision (`recovery.py`), and the
controller's loop carrying it out, with a stand-in store and election (no ZooKeeper, no Ray)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rafka.actors.controller import channel as channel_module
from rafka.actors.controller.controller import Controller
from rafka.actors.controller.events import PreferredLeaderCheck
from rafka.actors.controller.recovery import RecoveryPolicy, Resign, Retry, Stop
from rafka.actors.messages import LeaderAndIsrRequest, PartitionErrors
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.errors import (
    ControllerMovedError,
    StaleVersionError,
    ZooKeeperAuthError,
    ZooKeeperUnavailableError,
)
from rafka.coordination.models import (
    BrokerInfo,
    ControllerFence,
    PartitionState,
    TopicAssignment,
    Versioned,
)

POLICY = RecoveryPolicy(give_up_after_s=6.0)
LOST = ZooKeeperUnavailableError("connection loss")


def decide(error: BaseException, attempts: int = 1, elapsed_s: float = 0.0,
           elected: bool = True, policy: RecoveryPolicy = POLICY):
    return policy.decide(error, attempts=attempts, elapsed_s=elapsed_s, elected=elected)


# --- the decision ---------------------------------------------------------------------------


def test_a_zookeeper_failure_is_retried_with_a_doubling_backoff() -> None:
    delays = [decide(LOST, attempts=n) for n in (1, 2, 3, 4, 5, 6)]
    assert all(isinstance(d, Retry) for d in delays)
    assert [d.delay_s for d in delays] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]


def test_a_zookeeper_failure_that_lasts_past_the_session_timeout_resigns() -> None:
    assert isinstance(decide(LOST, attempts=3, elapsed_s=5.0), Retry)
    decided = decide(LOST, attempts=4, elapsed_s=5.5)  # 5.5 s + 0.8 s of backoff > 6 s
    assert isinstance(decided, Resign)
    assert "ZooKeeperUnavailableError" in decided.reason


def test_too_many_zookeeper_failures_in_a_row_resign() -> None:
    policy = RecoveryPolicy(give_up_after_s=600.0, max_attempts=3)
    assert isinstance(decide(LOST, attempts=2, policy=policy), Retry)
    assert isinstance(decide(LOST, attempts=3, policy=policy), Resign)


@pytest.mark.parametrize("error", [
    RuntimeError("a bug"),
    KeyError("partitions"),
    ZooKeeperAuthError("NoAuth"),
    StaleVersionError("BadVersion"),
])
def test_anything_unexpected_resigns_at_once(error: Exception) -> None:
    decided = decide(error)
    assert isinstance(decided, Resign)
    assert type(error).__name__ in decided.reason


def test_a_resigning_broker_holds_off_for_its_session_timeout_unless_told_otherwise() -> None:
    assert decide(RuntimeError()).hold_off_s == 6.0
    assert decide(RuntimeError(), policy=RecoveryPolicy(6.0, hold_off_s=1.0)).hold_off_s == 1.0
    assert RecoveryPolicy.for_session(4000).give_up_after_s == 4.0


def test_a_deposed_controller_only_stops() -> None:
    assert isinstance(decide(ControllerMovedError("moved")), Stop)
    assert isinstance(decide(ControllerMovedError("moved"), elected=False), Stop)


def test_a_controller_no_longer_elected_stops_whatever_failed() -> None:
    # Its connection dropped: the election takes the role back on reconnect, with a fresh
    # controller, or another broker wins. Either way /controller is not ours to delete.
    for error in (LOST, RuntimeError("a bug")):
        assert isinstance(decide(error, elected=False), Stop)


# --- the controller's loop ------------------------------------------------------------------

FENCE = ControllerFence(epoch=3, epoch_zk_version=3)


class StandInStore:
    """Just enough of a ClusterStore for watches that never read."""

    session_timeout_ms = 6000

    def add_session_listener(self, _listener: object) -> None: ...

    def remove_session_listener(self, _listener: object) -> None: ...

    def run_in_worker(self, _function: object, *_args: object) -> None: ...


class StandInElection:
    def __init__(self) -> None:
        self.fence: ControllerFence | None = FENCE
        self.resigned: list[tuple[ControllerFence, float]] = []

    def resign(self, fence: ControllerFence, hold_off_s: float) -> None:
        self.resigned.append((fence, hold_off_s))
        self.fence = None


FAST = RecoveryPolicy(give_up_after_s=5.0, max_attempts=3, first_backoff_s=0.01,
                      hold_off_s=1.5)


def run_controller(scenario: Callable[[Controller, StandInElection], Awaitable[Any]],
                   initialize: Callable[[int], None] | None = None) -> Any:
    """Run a controller whose `_initialize` calls `initialize(n)` (n: 1 for the first time),
    then `scenario`; return what it returns."""

    async def main() -> Any:
        election = StandInElection()
        controller = Controller(StandInStore(), 1, FENCE, "ns",  # type: ignore[arg-type]
                                election=election,  # type: ignore[arg-type]
                                recovery=FAST)
        controller.initializations = 0  # type: ignore[attr-defined]

        async def fake_initialize() -> None:
            controller.initializations += 1  # type: ignore[attr-defined]
            if initialize is not None:
                initialize(controller.initializations)  # type: ignore[attr-defined]

        controller._initialize = fake_initialize  # type: ignore[method-assign]
        controller.start()
        try:
            return await asyncio.wait_for(scenario(controller, election), 10)
        finally:
            controller.stop()

    return asyncio.run(main())


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


def test_an_initialization_that_loses_zookeeper_once_is_retried() -> None:
    def initialize(n: int) -> None:
        if n == 1:
            raise ZooKeeperUnavailableError("connection loss")

    async def scenario(controller: Controller, election: StandInElection) -> int:
        await until(lambda: controller.initializations == 2 and bool(controller._watches))
        return len(election.resigned)

    assert run_controller(scenario, initialize) == 0


def test_an_initialization_that_keeps_losing_zookeeper_resigns() -> None:
    def initialize(_n: int) -> None:
        raise ZooKeeperUnavailableError("connection loss")

    async def scenario(controller: Controller, election: StandInElection) -> Any:
        await until(lambda: bool(election.resigned))
        await until(lambda: controller._tasks[0].done())
        return controller.initializations, election.resigned

    assert run_controller(scenario, initialize) == (3, [(FENCE, 1.5)])


def handler_failing_with(errors: list[Exception]) -> Callable[[Any], Awaitable[None]]:
    async def handle(_event: Any) -> None:
        if errors:
            raise errors.pop(0)

    return handle


def test_an_event_that_fails_unexpectedly_resigns_and_ends_the_controller() -> None:
    async def scenario(controller: Controller, election: StandInElection) -> Any:
        controller._handlers[PreferredLeaderCheck] = handler_failing_with([RuntimeError("bug")])
        await until(lambda: bool(controller._watches))
        controller.events.put_nowait(PreferredLeaderCheck())
        await until(lambda: all(task.done() for task in controller._tasks))
        return election.resigned, controller._watches

    assert run_controller(scenario) == ([(FENCE, 1.5)], [])


def test_an_event_that_loses_zookeeper_is_made_good_by_a_rebuild() -> None:
    async def scenario(controller: Controller, election: StandInElection) -> Any:
        controller._handlers[PreferredLeaderCheck] = handler_failing_with([LOST])
        await until(lambda: bool(controller._watches))
        controller.events.put_nowait(PreferredLeaderCheck())
        await until(lambda: controller.initializations == 2 and bool(controller._watches))
        # The controller goes on with the next event.
        handled = asyncio.Event()
        controller._handlers[PreferredLeaderCheck] = lambda _e: _set(handled)
        controller.events.put_nowait(PreferredLeaderCheck())
        await handled.wait()
        return election.resigned

    assert run_controller(scenario) == []


async def _set(event: asyncio.Event) -> None:
    event.set()


def test_a_deposed_controller_stops_without_resigning() -> None:
    async def scenario(controller: Controller, election: StandInElection) -> Any:
        controller._handlers[PreferredLeaderCheck] = handler_failing_with(
            [ControllerMovedError("moved")])
        await until(lambda: bool(controller._watches))
        controller.events.put_nowait(PreferredLeaderCheck())
        await until(lambda: controller._tasks[0].done())
        return election.resigned, controller.initializations

    assert run_controller(scenario) == ([], 1)


def test_a_controller_whose_connection_dropped_stops_without_resigning() -> None:
    async def scenario(controller: Controller, election: StandInElection) -> Any:
        controller._handlers[PreferredLeaderCheck] = handler_failing_with([LOST])
        await until(lambda: bool(controller._watches))
        election.fence = None  # SUSPENDED: the election stopped believing first
        controller.events.put_nowait(PreferredLeaderCheck())
        await until(lambda: controller._tasks[0].done())
        return election.resigned, controller.initializations

    assert run_controller(scenario) == ([], 1)


# --- a broker that does not answer ------------------------------------------------------------


def test_a_silent_broker_does_not_hold_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker cut off from the network answers nothing, and Ray may never give up on it: the
    controller stops waiting after its bound, and its request stays on its way."""
    monkeypatch.setattr(channel_module, "BROKER_ANSWER_TIMEOUT_S", 0.2)

    async def scenario() -> tuple[dict[int, Any], float, asyncio.Future]:
        loop = asyncio.get_running_loop()
        silent: asyncio.Future = loop.create_future()
        answered: asyncio.Future = loop.create_future()
        answered.set_result(None)
        failed: asyncio.Future = loop.create_future()
        failed.set_exception(RuntimeError("the actor died"))
        started = loop.time()
        answers = await channel_module.answers_of(
            {0: answered, 1: silent, 2: failed}, "LeaderAndIsr")
        return answers, loop.time() - started, silent

    answers, waited_s, silent = asyncio.run(scenario())
    assert waited_s < 2
    assert answers[0] is None
    assert isinstance(answers[1], channel_module.BrokerDidNotAnswer)
    assert "broker 1 did not answer LeaderAndIsr" in str(answers[1])
    assert isinstance(answers[2], RuntimeError)
    assert not silent.cancelled()  # still on its way, should the broker come back


class RestartingBroker:
    """Broker connections whose broker restarts under the first LeaderAndIsr it is sent: the
    request fails ("the connection failed") once `restarted` is set. The broker applies every
    LeaderAndIsr after it."""

    def __init__(self) -> None:
        self.sent: list[list[LeaderAndIsrRequest]] = []
        self.restarted = asyncio.Event()

    def sender(self, _broker_id: int, _info: object) -> RestartingBroker:
        return self

    def drop(self, _broker_id: int) -> None: ...

    def close(self) -> None: ...

    def leader_and_isr(self, _controller_epoch: int, partitions: list[LeaderAndIsrRequest]
                       ) -> Awaitable[PartitionErrors]:
        self.sent.append(partitions)
        first = len(self.sent) == 1

        async def answer() -> PartitionErrors:
            if first:
                await self.restarted.wait()
                raise ConnectionResetError("the connection to broker 2 failed")
            return PartitionErrors({})

        return answer()


@pytest.mark.parametrize("registered_anew", [False, True])
def test_a_leader_and_isr_a_broker_did_not_apply_is_sent_again(
        monkeypatch: pytest.MonkeyPatch, registered_anew: bool) -> None:
    """Kafka's controller channel retries a request until its broker answers: a follower that
    never hears of its partition never fetches, and never comes back into the ISR. A broker
    registered anew meanwhile (a new broker epoch) is told everything it holds by the
    BrokersChanged that says so instead."""
    monkeypatch.setattr(channel_module, "METADATA_RESYNC_S", 0.02)
    monkeypatch.setattr(channel_module, "BROKER_ANSWER_TIMEOUT_S", 0.05)
    broker = RestartingBroker()
    tp = TopicPartition("orders", 0)

    async def scenario(controller: Controller, _election: StandInElection) -> None:
        await until(lambda: controller.initializations == 1)  # type: ignore[attr-defined]
        controller.channel.connections = broker  # type: ignore[assignment]
        controller.live = {2: BrokerInfo(2, "broker-2", "n3", epoch=7)}
        controller.assignments = {"orders": TopicAssignment({0: (1, 2)})}
        controller.states = {tp: Versioned(PartitionState(1, 4, (1,), FENCE.epoch), 12)}
        await controller.send_leader_and_isr({tp}, update_metadata=False)
        if registered_anew:
            controller.live = {2: BrokerInfo(2, "broker-2", "n3", epoch=8)}
        broker.restarted.set()
        await asyncio.sleep(0.3)

    run_controller(scenario)
    if registered_anew:
        assert len(broker.sent) == 1
    else:
        assert len(broker.sent) == 2
        again = broker.sent[1][0]
        assert (again.topic, again.partition, again.leader, again.leader_epoch,
                again.zk_version) == ("orders", 0, 1, 4, 12)
