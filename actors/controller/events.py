"""What the controller reacts to: one type per event, queued by watches and timers and handled
one at a time, in order, as Kafka's controller event thread does
(`actors/controller/controller.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rafka.coordination.models import BrokerInfo, TopicAssignment, Versioned


@dataclass(frozen=True)
class BrokersChanged:
    """`/brokers/ids` changed: the live brokers now, with their registration epochs."""

    brokers: dict[int, BrokerInfo]


@dataclass(frozen=True)
class TopicsChanged:
    """`/brokers/topics` changed: the topics now."""

    topics: set[str]


@dataclass(frozen=True)
class AssignmentChanged:
    """A topic's replica assignment changed (partitions added), or its znode went (None)."""

    topic: str
    assignment: Versioned[TopicAssignment] | None


@dataclass(frozen=True)
class TopicConfigChanged:
    """A topic's config overrides (`/config/topics/<t>`) changed, or their znode went (None)."""

    topic: str
    config: Versioned[dict[str, str]] | None


@dataclass(frozen=True)
class DeletionsRequested:
    """`/admin/delete_topics` changed: the topics marked for deletion now."""

    topics: set[str]


@dataclass(frozen=True)
class IsrChangesNotified:
    """Leaders changed ISRs and said so under `/isr_change_notification`."""

    notifications: list[str]


@dataclass(frozen=True)
class MetadataResync:
    """Time to send a whole UpdateMetadata to the brokers a previous one did not reach."""


@dataclass(frozen=True)
class LeaderAndIsrResend:
    """Time to send LeaderAndIsr again to the brokers that failed to apply one."""


@dataclass(frozen=True)
class PreferredLeaderCheck:
    """Time to give leadership back to preferred replicas (auto.leader.rebalance)."""


@dataclass(frozen=True)
class ReassignmentsRequested:
    """`/admin/reassign_partitions` changed: the request now, or None once it is gone."""

    request: Versioned[Any] | None


@dataclass(frozen=True)
class ReassignmentCheck:
    """Time to see whether reassignments in progress can take their next step."""


ControllerEvent = (BrokersChanged | TopicsChanged | AssignmentChanged | TopicConfigChanged
                   | DeletionsRequested | IsrChangesNotified | PreferredLeaderCheck
                   | ReassignmentsRequested | ReassignmentCheck | MetadataResync
                   | LeaderAndIsrResend)
