"""Creating a topic and changing its config, checked as rafka checks them whoever asks
(`Cluster.create_topic` and `alter_topic_config`, a Kafka client's CreateTopics, AlterConfigs and
IncrementalAlterConfigs): the name, the config, the replication factor against the live brokers
and against min.insync.replicas. The controller then creates the partitions, or tells the
brokers holding them of the new config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rafka.actors.config import TopicConfig
from rafka.common.config import InvalidConfigError
from rafka.coordination.admin import TopicAdmin, merge_config, normalise_config
from rafka.coordination.assignment import assign_replicas
from rafka.coordination.errors import InvalidReplicationFactorError, TopicExistsError
from rafka.coordination.registration import read_brokers
from rafka.coordination.store import ClusterStore
from rafka.coordination.validation import validate_topic_name


def create_topic(store: ClusterStore, name: str, partitions: int, replication_factor: int,
                 config: Mapping[str, Any] | None = None, *, validate_only: bool = False
                 ) -> str | None:
    """Write the topic's assignment and config to ZooKeeper (or, with `validate_only`, only
    check that it could be): `InvalidTopicError`, `InvalidConfigError`,
    `InvalidReplicationFactorError`, `InvalidPartitionsError` or `TopicExistsError` if not.
    Returns the new topic's id (None with `validate_only`)."""
    validate_topic_name(name)
    topic_config = TopicConfig.from_dict(config)
    live = len(read_brokers(store))
    if replication_factor > live:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {live} live "
            f"brokers: start more brokers or lower the replication factor"
        )
    if problem := _min_insync_above(topic_config, replication_factor):
        # Kafka accepts it, but then acks=all can never succeed; say so now.
        raise InvalidReplicationFactorError(problem)
    admin = TopicAdmin(store)
    if validate_only:
        if admin.topic_exists(name):
            raise TopicExistsError(f"topic {name!r} exists already: choose another name")
        brokers = {broker: info.rack for broker, info in read_brokers(store).items()}
        assign_replicas(brokers, partitions, replication_factor)  # raises what it cannot do
        return None
    return admin.create_topic_auto(name, partitions, replication_factor,
                                   topic_config.overrides()).topic_id


def alter_topic_config(store: ClusterStore, name: str, updates: Mapping[str, Any | None], *,
                       validate_only: bool = False) -> dict[str, str]:
    """Set (or, where the value is None, remove) config overrides of an existing topic and
    return its overrides after the change, or with `validate_only` what they would be:
    `UnknownTopicError`, or `InvalidConfigError` for what a replica would refuse."""
    validate_topic_name(name)
    admin = TopicAdmin(store)
    merged = merge_config(admin.read_config(name).value, updates)
    topic_config = TopicConfig.from_dict(merged)
    if problem := _min_insync_above(topic_config,
                                    admin.read_assignment(name).value.replication_factor):
        raise InvalidConfigError(problem)
    if validate_only:
        return normalise_config(merged)
    return dict(admin.alter_config(name, updates).value)


def _min_insync_above(topic_config: TopicConfig, replication_factor: int) -> str | None:
    """What is wrong when min.insync.replicas exceeds the replication factor, else None."""
    if topic_config.min_insync_replicas <= replication_factor:
        return None
    return (f"min.insync.replicas={topic_config.min_insync_replicas} is larger than the "
            f"replication factor {replication_factor}: acks=all writes could never succeed")
