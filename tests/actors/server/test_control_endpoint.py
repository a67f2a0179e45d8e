"""A broker's control endpoint (`actors/server/control_endpoint.py`) and the controller's
connection to it (`actors/controller/broker_connections.py`) over real sockets on this host,
with stand-in handlers: requests are applied in order and answered; a wrong token is refused
before anything is applied; a silent broker's requests fail within their timeout; a restarted
endpoint is connected to again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rafka.actors.controller import control_frames
from rafka.actors.controller.broker_connections import (
    BrokerConnection,
    BrokerConnections,
    BrokerDidNotAnswer,
    BrokerUnreachable,
)
from rafka.actors.controller.control_frames import ControlAnswer, ReconnectBackoff
from rafka.actors.messages import (
    ErrorReply,
    LeaderAndIsrRequest,
    PartitionErrors,
    UpdateMetadataRequest,
)
from rafka.actors.server.control_endpoint import ControlEndpoint
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import BrokerInfo

TOKEN = control_frames.control_token("rafka:secret")
FAST = ReconnectBackoff(initial_s=0.01, max_s=0.05, jitter=0.0)


class StandInBroker:
    """The broker's handlers: what each was given, in order; LeaderAndIsr refused below
    `epoch`, as the broker refuses a stale controller."""

    def __init__(self, epoch: int = 0) -> None:
        self.epoch = epoch
        self.applied: list[tuple[str, Any]] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def leader_and_isr(self, epoch: int, partitions: list[LeaderAndIsrRequest]
                             ) -> ControlAnswer:
        await self.hold.wait()
        if epoch < self.epoch:
            return ErrorReply(11, f"controller epoch {epoch} < {self.epoch}")
        self.applied.append(("leader_and_isr", [p.partition for p in partitions]))
        return PartitionErrors({})

    async def update_metadata(self, request: UpdateMetadataRequest) -> ControlAnswer:
        self.applied.append(("update_metadata", request.controller_epoch))
        return None

    async def stop_replicas(self, epoch: int, partitions: list[tuple[str, int]],
                            delete: bool) -> ControlAnswer:
        self.applied.append(("stop_replicas", (partitions, delete)))
        return None

    async def update_topic_config(self, epoch: int, topic: str, config: dict[str, str]
                                  ) -> ControlAnswer:
        self.applied.append(("update_topic_config", (topic, config)))
        return PartitionErrors({TopicPartition(topic, 0): ErrorReply(56, "no host")})

    def handlers(self) -> dict[str, Callable[..., Awaitable[ControlAnswer]]]:
        return {control_frames.LEADER_AND_ISR: self.leader_and_isr,
                control_frames.UPDATE_METADATA: self.update_metadata,
                control_frames.STOP_REPLICAS: self.stop_replicas,
                control_frames.UPDATE_TOPIC_CONFIG: self.update_topic_config}


def _partitions(*numbers: int) -> list[LeaderAndIsrRequest]:
    return [LeaderAndIsrRequest("orders", n, 1, 3, (1, 2), (1, 2), 4) for n in numbers]


def _run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), 30))


async def _endpoint(broker: StandInBroker, token: bytes = TOKEN) -> ControlEndpoint:
    endpoint = ControlEndpoint("127.0.0.1", token, broker.handlers())
    await endpoint.start()
    return endpoint


def _connection(endpoint: ControlEndpoint, timeout_s: float = 2.0, token: bytes = TOKEN,
                socket_timeout_s: float = 30.0) -> BrokerConnection:
    assert endpoint.port is not None
    return BrokerConnection(1, ("127.0.0.1", endpoint.port), token, None, timeout_s,
                            socket_timeout_s=socket_timeout_s, backoff=FAST)


def test_requests_are_applied_in_order_and_each_answer_finds_its_request() -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        broker = StandInBroker(epoch=4)
        endpoint = await _endpoint(broker)
        connection = _connection(endpoint)
        answers = await asyncio.gather(
            connection.leader_and_isr(4, _partitions(0, 1)),
            connection.update_metadata(UpdateMetadataRequest(1, 4, {})),
            connection.leader_and_isr(3, _partitions(2)),  # a stale controller's
            connection.stop_replicas(4, [("orders", 1)], True),
            connection.update_topic_config(4, "orders", {"retention.ms": "1"}))
        connection.close()
        await endpoint.close()
        return answers, broker.applied

    answers, applied = _run(scenario)
    assert answers[0] == PartitionErrors({}) and answers[1] is None and answers[3] is None
    assert isinstance(answers[2], ErrorReply) and answers[2].code == 11
    assert answers[4] == PartitionErrors({TopicPartition("orders", 0): ErrorReply(56, "no host")})
    assert applied == [("leader_and_isr", [0, 1]), ("update_metadata", 4),
                       ("stop_replicas", ([("orders", 1)], True)),
                       ("update_topic_config", ("orders", {"retention.ms": "1"}))]


def test_a_wrong_token_is_refused_before_anything_is_applied() -> None:
    async def scenario() -> tuple[BaseException | None, StandInBroker]:
        broker = StandInBroker()
        endpoint = await _endpoint(broker)
        connection = _connection(endpoint, token=control_frames.control_token("rafka:guess"))
        try:
            await connection.leader_and_isr(4, _partitions(0))
            failure = None
        except (BrokerUnreachable, BrokerDidNotAnswer) as error:
            failure = error
        connection.close()
        await endpoint.close()
        return failure, broker

    failure, broker = _run(scenario)
    assert failure is not None
    assert broker.applied == []


def test_a_silent_broker_fails_the_request_within_its_timeout_and_is_dropped() -> None:
    async def scenario() -> tuple[float, float, int, list[Any]]:
        broker = StandInBroker()
        broker.hold.clear()  # applies nothing: a paused process
        endpoint = await _endpoint(broker)
        connection = _connection(endpoint, timeout_s=0.3, socket_timeout_s=1.0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(BrokerDidNotAnswer):
            await connection.leader_and_isr(4, _partitions(0))
        timed_out_s = loop.time() - started
        # Silent past the socket timeout: the connection goes, and the next request is sent
        # on a new one, to a broker that answers again.
        await asyncio.sleep(1.6)
        broker.hold.set()
        started = loop.time()
        answer = await connection.leader_and_isr(4, _partitions(1))
        answered_s = loop.time() - started
        made = connection.connections_made
        connection.close()
        await endpoint.close()
        return timed_out_s, answered_s, made, [answer, broker.applied]

    timed_out_s, answered_s, made, (answer, applied) = _run(scenario)
    assert 0.25 < timed_out_s < 1.0
    assert answer == PartitionErrors({}) and answered_s < 1.0
    assert made == 2
    assert ("leader_and_isr", [1]) in applied


def test_a_restarted_endpoint_is_connected_to_again() -> None:
    async def scenario() -> tuple[list[Any], int, int]:
        broker = StandInBroker()
        endpoint = await _endpoint(broker)
        connections = BrokerConnections(TOKEN, None, 2.0)
        info = BrokerInfo(1, "broker-1", "127.0.0.1", control_endpoint=endpoint.endpoint,
                          epoch=5)
        sender = connections.sender(1, info)
        assert sender is not None
        first = await sender.leader_and_isr(4, _partitions(0))
        await endpoint.restart()
        # The request after the restart may meet the dropped connection (it fails, for the
        # channel to send again), never more than once.
        answers = []
        for _ in range(3):
            try:
                answers.append(await sender.leader_and_isr(4, _partitions(1)))
                break
            except BrokerUnreachable:
                await asyncio.sleep(0.05)
        assert connections.sender(1, info) is sender  # the same registration, the same one
        made = connections.connections_made()[1]
        accepted = endpoint.connections_accepted
        connections.close()
        await endpoint.close()
        return [first, *answers], made, accepted

    answers, made, accepted = _run(scenario)
    assert answers[0] == PartitionErrors({}) and answers[-1] == PartitionErrors({})
    assert len(answers) <= 3
    assert made == 2 and accepted == 2


def test_a_registration_without_a_control_endpoint_has_no_sender() -> None:
    connections = BrokerConnections(TOKEN, None, 1.0)
    assert connections.sender(1, BrokerInfo(1, "broker-1", "h")) is None
    assert connections.sender(1, None) is None


def test_a_broker_that_is_down_fails_the_request_while_its_connection_backs_off() -> None:
    async def scenario() -> tuple[BaseException, int]:
        broker = StandInBroker()
        endpoint = await _endpoint(broker)
        await endpoint.close()  # nobody listens there now
        connection = _connection(endpoint, timeout_s=0.3)
        with pytest.raises(BrokerDidNotAnswer) as failed:
            await connection.leader_and_isr(4, _partitions(0))
        # Listening again: the connection, still trying, gets there.
        await endpoint.start()
        answer = await connection.leader_and_isr(4, _partitions(1))
        assert answer == PartitionErrors({})
        made = connection.connections_made
        connection.close()
        await endpoint.close()
        return failed.value, made

    failure, made = _run(scenario)
    assert "did not answer" in str(failure)
    assert made == 1
