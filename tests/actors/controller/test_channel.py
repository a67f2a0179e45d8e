"""The controller's channel remembers what each broker did not apply (pure: its senders are
stand-ins that answer as a broker would, or fail as its connection would): a topic config
change a broker did not apply, or never heard of, comes back as that broker's share of the
topic's LeaderAndIsr at the next resend, which carries the config."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from rafka.actors.controller import channel
from rafka.actors.controller.broker_connections import BrokerUnreachable
from rafka.actors.controller.channel import ControllerChannel
from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import PartitionErrors
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import BrokerInfo


class _Broker:
    """A sender whose answer to a config change is `answer` (raised if an exception), or
    that never answers (None)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.configs: list[tuple[str, dict[str, str]]] = []

    def update_topic_config(self, controller_epoch: int, topic: str,
                            config: dict[str, str]) -> Awaitable[Any]:
        self.configs.append((topic, config))
        return self._answer()

    async def _answer(self) -> Any:
        if self.answer is None:
            await asyncio.sleep(3600)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class _Connections:
    def __init__(self, senders: dict[int, _Broker]) -> None:
        self.senders = senders

    def sender(self, broker: int, info: BrokerInfo | None) -> _Broker | None:
        return self.senders.get(broker) if info is not None else None

    def drop(self, broker: int) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_config_change_a_broker_did_not_apply_is_sent_again_with_leader_and_isr(
        monkeypatch) -> None:
    monkeypatch.setattr(channel, "BROKER_ANSWER_TIMEOUT_S", 0.2)
    tp = [TopicPartition("orders", partition) for partition in range(3)]
    applied, unreachable, silent, stale = (
        _Broker(PartitionErrors({})), _Broker(BrokerUnreachable("the connection failed")),
        _Broker(None), _Broker(error_reply(ErrorCode.STALE_CONTROLLER_EPOCH, "old")))
    refusing = _Broker(PartitionErrors({tp[2]: error_reply(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                           "its host failed")}))
    senders = {1: applied, 2: unreachable, 3: silent, 4: stale, 5: refusing}
    live = {broker: BrokerInfo(broker, f"broker-{broker}", "127.0.0.1")
            for broker in (*senders, 6)}  # 6 names no control endpoint: no sender
    controller_channel = ControllerChannel(1, 7, _Connections(senders),  # type: ignore[arg-type]
                                           lambda: live)
    partitions_of = {1: {tp[0]}, 2: {tp[0], tp[1]}, 3: {tp[1]}, 4: {tp[2]}, 5: {tp[2]},
                     6: {tp[0]}}

    asyncio.run(controller_channel.update_topic_config(
        partitions_of, "orders", {"retention.ms": "1000"}))

    assert all(sender.configs == [("orders", {"retention.ms": "1000"})]
               for sender in senders.values())
    # A broker that applied the change, or says this controller is stale, is sent nothing.
    assert controller_channel.take_leader_and_isr_behind() == {
        2: {tp[0], tp[1]}, 3: {tp[1]}, 5: {tp[2]}, 6: {tp[0]}}
