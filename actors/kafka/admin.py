"""Kafka's topic administration for Kafka clients: CreateTopics, DeleteTopics, DescribeConfigs,
AlterConfigs and IncrementalAlterConfigs, served by the broker's Kafka listener through the same
calls as `Cluster.create_topic`, `delete_topic`, `describe_topic` and `alter_topic_config`.

As in ZooKeeper-era Kafka, CreateTopics answers once the topic is written to ZooKeeper (the
controller then creates the partitions; a client asks for metadata until they have leaders), and
DeleteTopics once the topic is gone or `timeout_ms` has passed (REQUEST_TIMED_OUT: the deletion
goes on). A config change answers once written; the replicas apply it within a second or so.
Only topics' configs change: a broker's settings are fixed when it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from rafka.actors.broker_view import BrokerView
from rafka.actors.config import TopicConfig
from rafka.actors.errors import ErrorCode
from rafka.actors.topics import alter_topic_config, create_topic
from rafka.common.config import InvalidConfigError
from rafka.common.waiting import Deadline, wait_until_async
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from rafka.wire.protocol import Api

_ERRORS: list[tuple[type[Exception], int]] = [
    (TopicExistsError, ErrorCode.TOPIC_ALREADY_EXISTS),
    (InvalidTopicError, ErrorCode.INVALID_TOPIC_EXCEPTION),
    (InvalidPartitionsError, ErrorCode.INVALID_PARTITIONS),
    (InvalidReplicationFactorError, ErrorCode.INVALID_REPLICATION_FACTOR),
    (InvalidReplicaAssignmentError, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (InvalidConfigError, ErrorCode.INVALID_CONFIG),
]
# DescribeConfigs' resource types and config sources.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# IncrementalAlterConfigs' operations; APPEND and SUBTRACT are for list settings, which no
# topic setting of rafka's is.
SET, DELETE = 0, 1
# Kafka's num.partitions and default.replication.factor, for a CreateTopics that asks for -1.
DEFAULT_PARTITIONS = 1
DEFAULT_REPLICATION_FACTOR = 1


class KafkaAdminHandler:
    """The handlers; `broker` gives the ZooKeeper session and this broker's own settings."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker

    @property
    def admin(self) -> TopicAdmin:
        assert self.broker.store is not None
        return TopicAdmin(self.broker.store)

    async def create_topics(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        result = api.response.CreatableTopicResult
        results = []
        for topic in request.topics:
            partitions = (DEFAULT_PARTITIONS if topic.num_partitions < 0
                          else topic.num_partitions)
            replication = (DEFAULT_REPLICATION_FACTOR if topic.replication_factor < 0
                           else topic.replication_factor)
            config = {entry.name: entry.value for entry in topic.configs or ()}
            error, message = 0, None
            if topic.assignments:
                error, message = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  "explicit replica assignments are not taken: give the "
                                  "partition count and replication factor")
            else:
                try:
                    await asyncio.to_thread(create_topic, self.broker.store, topic.name,
                                            partitions, replication, config,
                                            validate_only=bool(version >= 1
                                                               and request.validate_only))
                except Exception as failure:
                    error, message = _error_of(failure)
            results.append(result(name=topic.name, error_code=error, error_message=message,
                                  topic_config_error_code=0,
                                  num_partitions=partitions if error == 0 else -1,
                                  replication_factor=replication if error == 0 else -1,
                                  configs=None))
        return {"throttle_time_ms": 0, "topics": results}

    async def delete_topics(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        names = list(request.topic_names or ())
        deadline = Deadline(max(0, request.timeout_ms) / 1000)
        errors: dict[str, tuple[int, str | None]] = {}
        for name in names:
            try:
                await asyncio.to_thread(self.admin.request_topic_deletion, name)
                errors[name] = (0, None)
            except UnknownTopicError as failure:
                errors[name] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(failure))
            except Exception as failure:
                errors[name] = _error_of(failure)
        pending = [name for name, (error, _) in errors.items() if error == 0]

        async def all_gone() -> bool:
            pending[:] = [name for name in pending
                          if await asyncio.to_thread(self.admin.topic_exists, name)]
            return not pending

        with contextlib.suppress(TimeoutError):
            await wait_until_async(all_gone, deadline.remaining_s(), "the topics to go")
        for name in pending:
            errors[name] = (ErrorCode.REQUEST_TIMED_OUT,
                            f"topic {name!r} is being deleted, not yet gone")
        result = api.response.DeletableTopicResult
        return {"throttle_time_ms": 0, "responses": [
            result(name=name, error_code=error, error_message=message)
            for name, (error, message) in errors.items()]}

    async def describe_configs(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        result = api.response.DescribeConfigsResult
        results = []
        for resource in request.resources:
            error, message, configs = 0, None, []
            try:
                configs = await self._configs(resource.resource_type, resource.resource_name)
            except Exception as failure:
                error, message = _error_of(failure)
            wanted = resource.configuration_keys
            entry = result.DescribeConfigsResourceResult
            results.append(result(
                error_code=error, error_message=message, resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=[entry(name=name, value=value, read_only=False, config_source=source,
                               is_default=source == DEFAULT_CONFIG, is_sensitive=False,
                               synonyms=[], config_type=0, documentation=None)
                         for name, value, source in configs if not wanted or name in wanted]))
        return {"throttle_time_ms": 0, "results": results}

    async def alter_configs(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """Replace a topic's overrides with those given (Kafka's AlterConfigs: what is not
        named goes back to its default)."""
        async def changes(resource: Any) -> dict[str, str | None]:
            current = (await asyncio.to_thread(self.admin.read_config,
                                               resource.resource_name)).value
            return {**dict.fromkeys(current), **{entry.name: entry.value
                                                 for entry in resource.configs}}

        return await self._alter(api, request, changes)

    async def incremental_alter_configs(self, api: Api, version: int,
                                        request: Any) -> dict[str, Any]:
        """Set or delete the overrides named, keeping the others (KIP-339)."""
        async def changes(resource: Any) -> dict[str, str | None]:
            updates: dict[str, str | None] = {}
            for entry in resource.configs:
                if entry.config_operation not in (SET, DELETE):
                    raise InvalidConfigError(
                        f"{entry.name}: operation {entry.config_operation} (APPEND or SUBTRACT) "
                        f"is for list settings, and no topic setting is one: use SET")
                updates[entry.name] = entry.value if entry.config_operation == SET else None
            return updates

        return await self._alter(api, request, changes)

    async def _alter(self, api: Api, request: Any,
                     changes: Callable[[Any], Awaitable[dict[str, str | None]]],
                     ) -> dict[str, Any]:
        result = api.response.AlterConfigsResourceResponse
        results = []
        for resource in request.resources:
            error, message = 0, None
            try:
                if resource.resource_type != TOPIC_RESOURCE:
                    raise ValueError(
                        f"resource type {resource.resource_type} {resource.resource_name!r}: "
                        "only topics' configs change; a broker's settings are fixed when it "
                        "starts")
                await asyncio.to_thread(alter_topic_config, self.broker.store,
                                        resource.resource_name, await changes(resource),
                                        validate_only=request.validate_only)
            except Exception as failure:
                error, message = _error_of(failure)
            results.append(result(error_code=error, error_message=message,
                                  resource_type=resource.resource_type,
                                  resource_name=resource.resource_name))
        return {"throttle_time_ms": 0, "responses": results}

    async def _configs(self, resource_type: int, name: str) -> list[tuple[str, str | None, int]]:
        """`(name, value, source)` of every setting of a topic, or of this broker."""
        if resource_type == TOPIC_RESOURCE:
            overrides = (await asyncio.to_thread(self.admin.read_config, name)).value
            if not await asyncio.to_thread(self.admin.topic_exists, name):
                raise UnknownTopicError(f"topic {name!r} does not exist")
            settings = TopicConfig.from_dict(overrides).to_dict()
            return [(key, _text(value), DYNAMIC_TOPIC_CONFIG if key in overrides
                     else DEFAULT_CONFIG) for key, value in sorted(settings.items())]
        if resource_type == BROKER_RESOURCE and name in ("", str(self.broker.broker_id)):
            given = self.broker.raw_config
            return [(key, _text(value), STATIC_BROKER_CONFIG if key in given else DEFAULT_CONFIG)
                    for key, value in sorted(self.broker.config.to_dict().items())]
        raise ValueError(f"resource type {resource_type} {name!r} is not described here: ask "
                         "for a topic, or for a broker's settings on that broker")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _error_of(failure: Exception) -> tuple[int, str]:
    for kind, code in _ERRORS:
        if isinstance(failure, kind):
            return code, str(failure)
    if isinstance(failure, UnknownTopicError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(failure)
    return ErrorCode.INVALID_REQUEST, str(failure)
