"""A partition's name, Kafka's `TopicPartition`: the key of almost everything."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int
