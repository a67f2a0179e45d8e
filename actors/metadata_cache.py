"""What a broker knows of the cluster to answer metadata requests without asking ZooKeeper
(Kafka's MetadataCache): the live brokers and where they serve, the controller, each topic's
id, and each partition's leader, leader epoch, ISR and replicas, as the controller last said in
an UpdateMetadata. No I/O: the broker applies the controller's updates and reads answers here.

The controller sends every live broker the partitions whose state it changed, and everything
(`full`) when it takes office or the brokers change. Updates of an older controller epoch are
refused; within an epoch a partition's state only moves forward (leader epoch, then the version
of its ZooKeeper znode), so an update that arrives late cannot undo a newer one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rafka.actors.messages import PartitionMetadata, UpdateMetadataRequest
from rafka.actors.naming import replica_host_name
from rafka.common.sentinels import NO_LEADER, UNDEFINED_EPOCH
from rafka.common.topic_partition import TopicPartition
from rafka.coordination import layout
from rafka.coordination.models import BrokerInfo, TopicAssignment
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.registration import read_brokers
from rafka.coordination.store import ClusterStore
from rafka.wire.listeners import CLIENT_LISTENER, parse_listener

NO_CONTROLLER_EPOCH = -1


class MetadataCache:
    """The last UpdateMetadata applied, answering in the shape of the broker's `metadata`."""

    def __init__(self) -> None:
        self.controller_id: int | None = None
        self.controller_epoch = NO_CONTROLLER_EPOCH
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, dict[int, PartitionMetadata]] = {}
        self.topic_ids: dict[str, str] = {}
        self.topic_names: dict[str, str] = {}  # the other way: id -> name

    def apply(self, update: UpdateMetadataRequest) -> bool:
        """Take the update; False (and nothing changed) if an older controller sent it."""
        if update.controller_epoch < self.controller_epoch:
            return False
        self.controller_epoch = update.controller_epoch
        self.controller_id = update.controller_id
        self.brokers = dict(update.brokers)
        if update.full:
            self.topics, self.topic_ids, self.topic_names = {}, {}, {}
        for topic in update.deleted_topics:
            self.topics.pop(topic, None)
            self.topic_names.pop(self.topic_ids.pop(topic, ""), None)
        for topic, topic_id in update.topic_ids.items():
            self._name(topic, topic_id)
        for tp, state in update.partitions.items():
            partitions = self.topics.setdefault(tp.topic, {})
            known = partitions.get(tp.partition)
            if known is None or state.newer_than(known):
                partitions[tp.partition] = state
        return True

    def fill(self, baseline: UpdateMetadataRequest) -> None:
        """Take what ZooKeeper said at start-up under whatever the controller has sent so far:
        the partitions (and brokers) not known yet, whatever the epoch. A controller's partial
        update that came first (it sends one to a broker as soon as it registers) would
        otherwise stand alone, topics with only the partitions it changed."""
        if self.controller_epoch == NO_CONTROLLER_EPOCH:
            self.apply(baseline)
            return
        for broker, info in baseline.brokers.items():
            self.brokers.setdefault(broker, info)
        for tp, state in baseline.partitions.items():
            if tp.topic not in baseline.deleted_topics:
                self.topics.setdefault(tp.topic, {}).setdefault(tp.partition, state)
        for topic, topic_id in baseline.topic_ids.items():
            if topic not in self.topic_ids:
                self._name(topic, topic_id)

    def _name(self, topic: str, topic_id: str) -> None:
        self.topic_names.pop(self.topic_ids.get(topic, ""), None)
        self.topic_ids[topic] = topic_id
        self.topic_names[topic_id] = topic

    def metadata(self, topics: Iterable[str] | None = None) -> dict[str, Any]:
        """Brokers, their Kafka endpoints and racks, the controller and, per topic asked (every
        topic for None; those that do not exist are left out), each partition's leader, the
        replica host that serves the leader's replica, leader epoch, ISR and replicas."""
        names = sorted(self.topics) if topics is None else topics
        found: dict[str, Any] = {}
        for topic in names:
            partitions = self.topics.get(topic)
            if partitions is None:
                continue
            found[topic] = {partition: self._describe(topic, partition, state)
                            for partition, state in sorted(partitions.items())}
        brokers = sorted(self.brokers)
        return {
            "brokers": brokers,
            "endpoints": {broker: self._endpoints(broker) for broker in brokers},
            "racks": {broker: self.brokers[broker].rack for broker in brokers},
            "controller": self.controller_id,
            "topics": found,
            "topic_ids": {topic: self.topic_ids[topic] for topic in found
                          if topic in self.topic_ids},
        }

    def _endpoints(self, broker: int) -> list[tuple[str, int]]:
        """`(host, port)` of the broker's Kafka endpoints: those of the listener the client
        asking came in on (a broker without one is left out, as Kafka leaves it out), or all
        of them outside a client's request."""
        wanted = CLIENT_LISTENER.get()
        endpoints = [parse_listener(e) for e in self.brokers[broker].endpoints]
        return [(e.host, e.port) for e in endpoints if wanted is None or e.name == wanted]

    def _describe(self, topic: str, partition: int, state: PartitionMetadata) -> dict[str, Any]:
        leader = self.brokers.get(state.leader)
        return {
            "leader": state.leader,
            "leader_host": None if leader is None else replica_host_name(
                state.leader, topic, partition, leader.replica_hosts),
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
            "replicas": list(state.replicas),
        }


def read_metadata(store: ClusterStore, topics: list[str] | None = None) -> UpdateMetadataRequest:
    """The cluster's metadata (of `topics` only, if given) as ZooKeeper holds it now, as an
    UpdateMetadata of no controller (any controller's own update replaces it): each topic's
    partition states read pipelined."""
    brokers = read_brokers(store)
    states_store = PartitionStateStore(store)
    controller = store.read_optional(layout.CONTROLLER)
    partitions: dict[TopicPartition, PartitionMetadata] = {}
    topic_ids: dict[str, str] = {}
    for topic in store.children_or_empty(layout.TOPICS) if topics is None else topics:
        assignment = store.read_optional(layout.topic_path(topic))
        if assignment is None:
            continue
        described = TopicAssignment.from_json(assignment.value)
        if described.topic_id is not None:
            topic_ids[topic] = described.topic_id
        assigned = described.partitions
        states = states_store.read_partition_states(topic, assigned)
        for partition, replicas in assigned.items():
            state = states[partition]
            partitions[TopicPartition(topic, partition)] = PartitionMetadata(
                state.value.leader if state else NO_LEADER,
                state.value.leader_epoch if state else UNDEFINED_EPOCH,
                tuple(state.value.isr) if state else (), tuple(replicas),
                state.version if state else -1)
    return UpdateMetadataRequest(
        controller_id=controller.value["brokerid"] if controller else -1,
        controller_epoch=NO_CONTROLLER_EPOCH, brokers=brokers, partitions=partitions,
        full=topics is None, topic_ids=topic_ids)
