"""What the controller tells the brokers, built from its picture: Kafka's
ControllerBrokerRequestBatch.

The controller decides which partitions changed; the `ControllerBrokerRequestBatch` turns them
into requests (LeaderAndIsr to each partition's live replicas, UpdateMetadata to every live
broker) and hands them to the `ControllerChannel` (`channel.py`), which carries them and
remembers what a broker missed. Its timer queues the resends, which the controller's event task
handles like any other event, so a request is only ever built on that task, from a picture
that does not change under it.
"""

from __future__ import annotations

import asyncio

from rafka.actors.controller import channel
from rafka.actors.controller.context import ControllerContext
from rafka.actors.controller.events import LeaderAndIsrResend, MetadataResync
from rafka.actors.messages import LeaderAndIsrRequest, PartitionMetadata, UpdateMetadataRequest
from rafka.common.topic_partition import TopicPartition


class ControllerBrokerRequestBatch:
    """Builds and sends one controller's LeaderAndIsr and UpdateMetadata requests."""

    def __init__(self, controller: ControllerContext) -> None:
        self.controller = controller

    async def send_leader_and_isr(
        self, partitions: set[TopicPartition], brokers: set[int] | None = None, *,
        update_metadata: bool = True, wait: bool = True,
    ) -> None:
        """LeaderAndIsr for `partitions` to their live replicas (or only to `brokers`), and
        with it (unless told not to) UpdateMetadata of them to every live broker, as Kafka's
        controller sends them together. Waits (unless told not to) for the answers, at most
        `BROKER_ANSWER_TIMEOUT_S`; a broker that does not apply its part, even later, is
        sent it again (`ControllerChannel`)."""
        controller = self.controller
        requests: dict[int, list[LeaderAndIsrRequest]] = {}
        for tp in partitions:
            if tp not in controller.states or tp.topic not in controller.assignments or (
                    tp.topic in controller.deleting):
                continue  # a topic being deleted: its replicas must not come back
            versioned = controller.states[tp]
            state = versioned.value
            request = LeaderAndIsrRequest(
                tp.topic, tp.partition, state.leader, state.leader_epoch, tuple(state.isr),
                controller.replicas(tp), controller.epoch, versioned.version,
                config=controller.raw_configs.get(tp.topic, {}))
            for replica in controller.replicas(tp):
                if replica in controller.live and (brokers is None or replica in brokers):
                    requests.setdefault(replica, []).append(request)
        calls = controller.channel.send_leader_and_isr(requests)
        if update_metadata and partitions:
            self.update_metadata(partitions)
        if not wait:
            return
        await controller.channel.wait_for_leader_and_isr(calls)

    async def on_leader_and_isr_resend(self, _event: LeaderAndIsrResend) -> None:
        controller = self.controller
        for broker, partitions in sorted(controller.channel.take_leader_and_isr_behind().items()):
            if broker in controller.live:
                # Not waited for: a broker that still does not answer must not hold up the
                # controller's events; its failure brings it back here.
                await self.send_leader_and_isr(partitions & set(controller.states), {broker},
                                               update_metadata=False, wait=False)

    def update_metadata(self, partitions: set[TopicPartition] | None = None,
                        deleted: tuple[str, ...] = ()) -> None:
        """UpdateMetadata to every live broker: `partitions` (everything for None) and the
        topics `deleted`; a broker a previous one did not reach gets everything. Their metadata
        caches answer clients, so no client request reads ZooKeeper. Sent, not waited for
        (`ControllerChannel.update_metadata`)."""
        self.controller.channel.update_metadata(self._metadata_message, partitions, deleted)

    def _metadata_message(self, partitions: set[TopicPartition] | None,
                          deleted: tuple[str, ...] = ()) -> UpdateMetadataRequest:
        """What UpdateMetadata says: `partitions` (every partition when None, which replaces
        what a broker knew) and the live brokers. Topics being deleted are left out."""
        controller = self.controller
        wanted = set(controller.states) if partitions is None else partitions
        described = {tp: PartitionMetadata(
            versioned.value.leader, versioned.value.leader_epoch, tuple(versioned.value.isr),
            controller.replicas(tp), versioned.version)
            for tp in wanted if (versioned := controller.states.get(tp)) is not None
            and tp.topic in controller.assignments and tp.topic not in controller.deleting}
        topic_ids = {topic: topic_id for topic in {tp.topic for tp in described}
                     if (topic_id := controller.assignments[topic].topic_id) is not None}
        return UpdateMetadataRequest(
            controller_id=controller.broker_id, controller_epoch=controller.epoch,
            brokers=dict(controller.live), partitions=described,
            deleted_topics=tuple(deleted) if partitions is not None else (),
            full=partitions is None, topic_ids=topic_ids)

    async def resync_metadata_forever(self) -> None:
        while True:
            await asyncio.sleep(channel.METADATA_RESYNC_S)
            if self.controller.channel.metadata_behind:
                self.controller.events.put_nowait(MetadataResync())
            if self.controller.channel.leader_and_isr_behind:
                self.controller.events.put_nowait(LeaderAndIsrResend())

    async def on_metadata_resync(self, _event: MetadataResync) -> None:
        if self.controller.channel.live_brokers_behind_on_metadata():
            self.update_metadata(set())
