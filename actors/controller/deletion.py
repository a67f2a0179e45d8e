"""Topic deletion carried out: Kafka's controller deleting a topic's replicas, then its znodes.

As in Kafka, a topic whose replicas are on a broker that is down (or silent) waits for it: its
partitions lead nowhere meanwhile, and its name stays taken so that a new topic cannot pick up
the old one's logs. The controller's handlers call the `TopicDeleter` on its event task; the
topics being deleted are part of the controller's picture (`ControllerContext.deleting`).
"""

from __future__ import annotations

import logging

from rafka.actors.controller.channel import BrokerDidNotAnswer
from rafka.actors.controller.context import ControllerContext
from rafka.actors.controller.events import DeletionsRequested

log = logging.getLogger(__name__)


class TopicDeleter:
    """Deletes topics for one controller, through its channel and its fence."""

    def __init__(self, controller: ControllerContext) -> None:
        self.controller = controller

    async def on_deletions(self, event: DeletionsRequested) -> None:
        topics = event.topics
        for topic in sorted(topics):
            await self.delete_topic(topic)

    async def delete_topic(self, topic: str) -> None:
        """Delete the replicas of `topic` on the live brokers; once none is left anywhere (its
        brokers may have been down: Kafka's replicas ineligible for deletion), its znodes."""
        controller = self.controller
        controller.deleting.add(topic)
        assignment = controller.assignments.get(topic)
        if assignment is not None:
            hosts: dict[int, list[tuple[str, int]]] = {}
            for partition, replicas in assignment.partitions.items():
                for replica in replicas:
                    hosts.setdefault(replica, []).append((topic, partition))
            answers = await controller.channel.stop_replicas(hosts, True, f"StopReplica of {topic}")
            silent = {broker for broker, reply in answers.items()
                      if isinstance(reply, BrokerDidNotAnswer)}
            # A broker that did not answer may still hold its replicas: as one that is down,
            # the deletion waits for it (and goes on when it registers again).
            waiting_for = sorted((set(hosts) - set(controller.live)) | silent)
            if waiting_for:
                log.warning("controller %d: deleting topic %s waits for brokers %s, which hold "
                            "replicas of it", controller.broker_id, topic, waiting_for)
                return
        await controller.zk(controller.admin.delete_topic_znodes, topic, fence=controller.fence)
        controller.forget_topic(topic)
        controller.update_metadata(set(), deleted=(topic,))
        log.info("controller %d deleted topic %s", controller.broker_id, topic)
