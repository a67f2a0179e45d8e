"""A partition's name, Kafka's `TopicPartition`: the key of almost everything."""

from __future__ import annotations

from typing import NamedTuple, TypeVar


class TopicPartition(NamedTuple):
    topic: str
    partition: int


PartitionKey = TypeVar("PartitionKey", bound=tuple[str, int])
"""The key of a map by partition, a plain `(topic, partition)` or a `TopicPartition`: Mapping
keys are invariant, so a function that takes either is generic in this."""
