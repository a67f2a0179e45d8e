"""rafka: a distributed commit log in the design of Apache Kafka's ZooKeeper era, on Ray.

The front door: ``from rafka import Cluster, Producer, Consumer, ...``, every error users catch,
and the Spark pipelines' entry points. The names load when first used, so ``import
rafka.logstore`` (as a replica host does) does not bring Ray, Spark or the clients with it.

The layers are sub-packages of this one: ``rafka.common`` (what every layer shares),
``rafka.logstore``, ``rafka.coordination``, ``rafka.wire``, ``rafka.actors``, ``rafka.pipelines``
and ``rafka.cli``. In the source tree each is a folder at the top (``actors/``, ``logstore/``,
...), beside this one, and ``rafka/<layer>`` is a symbolic link to it; an installed wheel holds
them under ``rafka/``.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it
_EXPORTS = {
    "Cluster": "rafka.actors.cluster",
    "Producer": "rafka.actors.clients.producer",
    "RecordMetadata": "rafka.actors.clients.producer",
    "Consumer": "rafka.actors.clients.consumer",
    "ConsumerRecord": "rafka.actors.clients.consumer",
    "GroupConsumer": "rafka.actors.clients.group_consumer",
    "ConsumerGroupHandle": "rafka.actors.clients.members",
    "PartitionAssignor": "rafka.actors.clients.assignors",
    "TopicPartition": "rafka.common.topic_partition",
    "read_topic": "rafka.pipelines.topics",
    "read_dataset": "rafka.pipelines.topics",
    "write_topic": "rafka.pipelines.topics",
    "write_dataset": "rafka.pipelines.topics",
    "stream_topic": "rafka.pipelines.streaming",
    "stream_dataset": "rafka.pipelines.dataset_streams",
    "start_spark": "rafka.pipelines.spark",
    "stop_spark": "rafka.pipelines.spark",
}
_ERRORS = (
    "BrokerUnavailableError", "BufferExhaustedError", "CommitFailedError", "CoordinationError",
    "CorruptRecordError", "ErrorCode", "FencedLeaderEpochError", "InvalidConfigError",
    "InvalidProducerEpochError", "InvalidRecordError", "InvalidRequiredAcksError",
    "InvalidTopicError", "KafkaStorageError", "LeaderNotAvailableError", "LogStoreError",
    "NotEnoughReplicasError",
    "NotEnoughReplicasAfterAppendError", "NotLeaderError", "OffsetNotAvailableError",
    "OffsetOutOfRangeError", "OutOfOrderSequenceError", "RafkaError", "RecordTooLargeError",
    "RequestTimedOutError", "UnknownLeaderEpochError", "UnknownPartitionError",
    "UnknownTopicError",
)
_EXPORTS.update(dict.fromkeys(_ERRORS, "rafka.actors.errors"))
# The root and the codes live at the bottom layer: importing them brings no Ray.
_EXPORTS.update(dict.fromkeys(("ErrorCode", "RafkaError"), "rafka.common.errors"))

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

