"""Kafka's topic administration for Kafka clients: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and ElectLeaders, served by the broker's
Kafka listener through the same calls as `Cluster.create_topic`, `delete_topic`,
`add_partitions`, `describe_topic`, `alter_topic_config` and `elect_preferred_leaders`; and the
topics a Metadata request creates (auto.create.topics.enable).

As Kafka's delayed operations do, CreateTopics and CreatePartitions answer once this broker's
metadata cache has a leader for every new partition (so the client's next Metadata finds them),
and DeleteTopics once the topic is gone from ZooKeeper and from the cache; each answers
REQUEST_TIMED_OUT at `timeout_ms` otherwise (the change goes on). A config change answers once
written; the replicas apply it within a second or so.
Only topics' configs change: a broker's settings are fixed when it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rafka.actors.broker_view import BrokerView
from rafka.actors.config import (
    DYNAMIC_BROKER_SETTINGS,
    SENSITIVE_BROKER_SETTINGS,
    BrokerConfig,
    TopicConfig,
)
from rafka.actors.errors import ErrorCode
from rafka.actors.kafka.topic_ids import uuid_of
from rafka.actors.messages import ErrorReply
from rafka.actors.topics import alter_topic_config, create_topic
from rafka.common.config import ConfigKey, InvalidConfigError, Type
from rafka.common.waiting import Deadline, wait_until_async
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.broker_config import alter_broker_config, read_broker_config
from rafka.coordination.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from rafka.coordination.store import ClusterStore
from rafka.coordination.topic_ids import topic_id_text
from rafka.coordination.validation import validate_broker_id, validate_topic_name
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
DYNAMIC_BROKER_CONFIG = 2
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# DescribeConfigs' config types (Kafka's ConfigType), by rafka's setting types.
UNKNOWN_CONFIG_TYPE = 0
CONFIG_TYPES = {Type.BOOLEAN: 1, Type.STRING: 2, Type.INT: 3, Type.LONG: 5, Type.LIST: 7}
# ElectLeaders' election types: preferred (0) and unclean (1).
PREFERRED_ELECTION = 0
# IncrementalAlterConfigs' operations; APPEND and SUBTRACT are for list settings, which no
# topic setting of rafka's is.
SET, DELETE = 0, 1


class KafkaAdminHandler:
    """The handlers; `broker` gives the ZooKeeper session and this broker's own settings."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker
        # The listener's advertised address once bound (DescribeConfigs reports it).
        self.advertised_listener: str | None = None

    @property
    def store(self) -> ClusterStore:
        assert self.broker.store is not None  # a broker's APIs are served once it has one
        return self.broker.store

    @property
    def admin(self) -> TopicAdmin:
        return TopicAdmin(self.store)

    async def create_topics(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """Answered once this broker's metadata cache has a leader for every new partition
        (Kafka's delayed CreateTopics), so the client's next Metadata finds the topic; topics
        not there by `timeout_ms` are answered REQUEST_TIMED_OUT (their creation goes on)."""
        validate_only = bool(version >= 1 and request.validate_only)
        outcomes: list[tuple[str, int, int, int, str | None]] = []
        ids: dict[str, str] = {}  # of the topics created (KIP-516, answered from v7)
        for topic in request.topics:
            # -1: the broker's num.partitions and default.replication.factor, as in Kafka.
            partitions = (self.broker.config.num_partitions if topic.num_partitions < 0
                          else topic.num_partitions)
            replication = (self.broker.config.default_replication_factor
                           if topic.replication_factor < 0 else topic.replication_factor)
            config = {entry.name: entry.value for entry in topic.configs or ()}
            error, message = 0, None
            if topic.assignments:
                error, message = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  "explicit replica assignments are not taken: give the "
                                  "partition count and replication factor")
            else:
                try:
                    topic_id = await asyncio.to_thread(
                        create_topic, self.store, topic.name, partitions, replication,
                        config, validate_only=validate_only)
                    if topic_id is not None:
                        ids[topic.name] = topic_id
                except Exception as failure:
                    error, message = _error_of(failure)
            outcomes.append((topic.name, partitions, replication, error, message))
        late = set() if validate_only else await self._until_cached(
            {name: partitions for name, partitions, _r, error, _m in outcomes if error == 0},
            request.timeout_ms)
        result = api.response.CreatableTopicResult
        results = []
        for name, partitions, replication, error, message in outcomes:
            if name in late:
                error, message = (ErrorCode.REQUEST_TIMED_OUT,
                                  f"topic {name!r} is created, its partitions not yet led")
            results.append(result(name=name, topic_id=uuid_of(ids, name),
                                  error_code=error, error_message=message,
                                  topic_config_error_code=0,
                                  num_partitions=partitions if error == 0 else -1,
                                  replication_factor=replication if error == 0 else -1,
                                  configs=None))
        return {"throttle_time_ms": 0, "topics": results}

    async def _until_cached(self, partitions: dict[str, int], timeout_ms: int) -> set[str]:
        """Wait until this broker's metadata cache has a leader for each partition of each
        topic (`{topic: partition count}`), or `timeout_ms`; the topics not there yet."""
        pending = dict(partitions)

        async def all_led() -> bool:
            for topic, count in list(pending.items()):
                known = self.broker.cached_partitions(topic) or {}
                if len(known) >= count and all(p["leader"] >= 0 for p in known.values()):
                    del pending[topic]
            return not pending

        with contextlib.suppress(TimeoutError):
            await wait_until_async(all_led, max(0, timeout_ms) / 1000, "the partitions led")
        return set(pending)

    async def create_topic_for_metadata(self, name: str) -> int:
        """Create `name` for a Metadata request that named it (Kafka's
        auto.create.topics.enable), with num.partitions and default.replication.factor: the
        error code to answer for the topic, LEADER_NOT_AVAILABLE once it is created (its
        partitions get leaders in a moment, and the client asks again)."""
        config = self.broker.config
        try:
            await asyncio.to_thread(create_topic, self.store, name,
                                    config.num_partitions, config.default_replication_factor)
        except TopicExistsError:
            pass  # another client's request created it first
        except Exception as failure:
            return _error_of(failure)[0]
        return ErrorCode.LEADER_NOT_AVAILABLE

    async def create_partitions(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """Grow topics to the counts asked, as `Cluster.add_partitions` does: over the live
        brokers, or on the brokers given for each new partition. Answered once this broker's
        metadata cache has a leader for each new partition, or REQUEST_TIMED_OUT at
        `timeout_ms`, as Kafka's delayed CreatePartitions."""
        outcomes: list[tuple[str, int, int, str | None]] = []
        for topic in request.topics:
            error, message = 0, None
            try:
                await asyncio.to_thread(self._add_partitions, topic.name, topic.count,
                                        topic.assignments, request.validate_only)
            except Exception as failure:
                error, message = _error_of(failure)
            outcomes.append((topic.name, topic.count, error, message))
        late = set() if request.validate_only else await self._until_cached(
            {name: count for name, count, error, _m in outcomes if error == 0},
            request.timeout_ms)
        result = api.response.CreatePartitionsTopicResult
        return {"throttle_time_ms": 0, "results": [
            result(name=name, error_code=ErrorCode.REQUEST_TIMED_OUT if name in late else error,
                   error_message=(f"topic {name!r} has its new partitions, not yet led"
                                  if name in late else message))
            for name, _count, error, message in outcomes]}

    def _add_partitions(self, name: str, count: int, assignments: list[Any] | None,
                        validate_only: bool) -> None:
        validate_topic_name(name)
        admin = self.admin
        if not admin.topic_exists(name):
            raise UnknownTopicError(f"topic {name!r} does not exist")
        current = admin.read_assignment(name).value.partition_count
        if count <= current:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions; asked for {count}: the number of "
                "partitions can only grow")
        if assignments is not None and len(assignments) != count - current:
            raise InvalidReplicaAssignmentError(
                f"{len(assignments)} assignments given for {count - current} new partitions: "
                "give one per new partition, or none")
        if validate_only:
            return
        if assignments is None:
            admin.add_partitions_auto(name, count)
        else:
            admin.add_partitions(name, {current + i: tuple(a.broker_ids)
                                        for i, a in enumerate(assignments)})

    async def elect_leaders(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """Preferred-leader election (election type 0) of the partitions named, or of all of
        them: on the controller only, as in Kafka. Unclean election (type 1) is refused: a
        replica out of the ISR never leads here."""
        partitions = None if request.topic_partitions is None else [
            (topic.topic, partition) for topic in request.topic_partitions
            for partition in topic.partitions]
        if version >= 1 and request.election_type != PREFERRED_ELECTION:
            return _elect_leaders_response(api, ErrorCode.INVALID_REQUEST, partitions or [])
        reply = await self.broker.elect_preferred_leaders(partitions)
        if isinstance(reply, ErrorReply):
            return _elect_leaders_response(api, reply.code, partitions or [])
        outcomes = {(topic, partition): error for topic, partition, error in reply["outcomes"]
                    # Asked for all, Kafka leaves out those already led by their preferred one.
                    if partitions is not None or error != ErrorCode.ELECTION_NOT_NEEDED}
        return _elect_leaders_response(api, 0, list(outcomes), outcomes)

    async def delete_topics(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """Answered once each topic is gone from ZooKeeper and from this broker's cache, or
        REQUEST_TIMED_OUT at `timeout_ms`. v6 may name a topic by its id (KIP-516): one no
        topic has is answered UNKNOWN_TOPIC_ID."""
        if version >= 6:
            names = [topic.name for topic in request.topics if topic.name is not None]
            unknown_ids = [topic.topic_id for topic in request.topics if topic.name is None]
        else:
            names, unknown_ids = list(request.topic_names or ()), []
        ids = (await self.broker.metadata(names))["topic_ids"] if names else {}
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

        async def all_gone() -> bool:  # from ZooKeeper, and from what clients are answered
            pending[:] = [name for name in pending
                          if self.broker.cached_partitions(name) is not None
                          or await asyncio.to_thread(self.admin.topic_exists, name)]
            return not pending

        with contextlib.suppress(TimeoutError):
            await wait_until_async(all_gone, deadline.remaining_s(), "the topics to go")
        for name in pending:
            errors[name] = (ErrorCode.REQUEST_TIMED_OUT,
                            f"topic {name!r} is being deleted, not yet gone")
        result = api.response.DeletableTopicResult
        return {"throttle_time_ms": 0, "responses": [
            result(name=name, topic_id=uuid_of(ids, name), error_code=error,
                   error_message=message)
            for name, (error, message) in errors.items()] + [
            result(name=None, topic_id=topic_id, error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                   error_message=f"no topic has id {topic_id_text(topic_id)}")
            for topic_id in unknown_ids]}

    async def describe_configs(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        result = api.response.DescribeConfigsResult
        entry = result.DescribeConfigsResourceResult
        results = []
        for resource in request.resources:
            error, message, configs = 0, None, []
            try:
                configs = await self._configs(resource.resource_type, resource.resource_name)
            except Exception as failure:
                error, message = _error_of(failure)
            wanted = resource.configuration_keys
            synonyms = version >= 1 and request.include_synonyms
            documented = version >= 3 and request.include_documentation
            results.append(result(
                error_code=error, error_message=message, resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=[entry(name=c.name, value=c.value, read_only=c.read_only,
                               config_source=c.source, is_default=c.source == DEFAULT_CONFIG,
                               is_sensitive=c.name in SENSITIVE_BROKER_SETTINGS,
                               synonyms=_synonyms(entry, c) if synonyms else [],
                               config_type=CONFIG_TYPES.get(c.key.type, UNKNOWN_CONFIG_TYPE),
                               documentation=c.key.doc if documented else None)
                         for c in configs if not wanted or c.name in wanted]))
        return {"throttle_time_ms": 0, "results": results}

    async def alter_configs(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """Replace a topic's overrides, or a broker's dynamic settings, with those given
        (Kafka's AlterConfigs: what is not named goes back to its default)."""
        def changes(resource: Any, current: dict[str, str]) -> dict[str, str | None]:
            return {**dict.fromkeys(current), **{entry.name: entry.value
                                                 for entry in resource.configs}}

        return await self._alter(api, request, changes)

    async def incremental_alter_configs(self, api: Api, version: int,
                                        request: Any) -> dict[str, Any]:
        """Set or delete the settings named, keeping the others (KIP-339)."""
        def changes(resource: Any, current: dict[str, str]) -> dict[str, str | None]:
            updates: dict[str, str | None] = {}
            for entry in resource.configs:
                if entry.config_operation not in (SET, DELETE):
                    raise InvalidConfigError(
                        f"{entry.name}: operation {entry.config_operation} (APPEND or SUBTRACT) "
                        f"is for list settings, and rafka changes none: use SET")
                updates[entry.name] = entry.value if entry.config_operation == SET else None
            return updates

        return await self._alter(api, request, changes)

    async def _alter(self, api: Api, request: Any,
                     changes: Callable[[Any, dict[str, str]], dict[str, str | None]],
                     ) -> dict[str, Any]:
        """Each resource's `changes(resource, its settings now)`, applied (with
        `validate_only`, checked only)."""
        result = api.response.AlterConfigsResourceResponse
        results = []
        for resource in request.resources:
            error, message = 0, None
            try:
                if resource.resource_type == TOPIC_RESOURCE:
                    current = (await asyncio.to_thread(self.admin.read_config,
                                                       resource.resource_name)).value
                    await asyncio.to_thread(alter_topic_config, self.store,
                                            resource.resource_name,
                                            changes(resource, current),
                                            validate_only=request.validate_only)
                elif resource.resource_type == BROKER_RESOURCE:
                    await self._alter_broker(resource, changes, request.validate_only)
                else:
                    raise ValueError(
                        f"resource type {resource.resource_type} {resource.resource_name!r}: "
                        "only topics' and brokers' settings change")
            except Exception as failure:
                error, message = _error_of(failure)
            results.append(result(error_code=error, error_message=message,
                                  resource_type=resource.resource_type,
                                  resource_name=resource.resource_name))
        return {"throttle_time_ms": 0, "responses": results}

    async def _alter_broker(self, resource: Any,
                            changes: Callable[[Any, dict[str, str]], dict[str, str | None]],
                            validate_only: bool) -> None:
        """A broker's dynamic settings (`DYNAMIC_BROKER_SETTINGS`), stored in ZooKeeper for
        the broker to apply (Kafka's per-broker dynamic configs; rafka has no cluster-wide
        ones)."""
        name = resource.resource_name
        dynamic = ", ".join(sorted(DYNAMIC_BROKER_SETTINGS))
        if not name.isdigit():
            raise ValueError(f"broker {name!r}: name the broker by its id; {dynamic} is set per "
                             "broker, and rafka has no cluster-wide broker settings")
        broker_id = validate_broker_id(int(name))
        current = (await asyncio.to_thread(read_broker_config, self.store,
                                           broker_id)).value
        updates = changes(resource, current)
        if fixed := sorted(set(updates) - DYNAMIC_BROKER_SETTINGS):
            raise ValueError(f"cannot change {', '.join(fixed)} while a broker runs: only "
                             f"{dynamic} can; the others are set when the broker starts")
        BrokerConfig.from_dict({key: value for key, value in updates.items()
                                if value is not None})  # InvalidConfigError: a bad value
        if not validate_only:
            await asyncio.to_thread(alter_broker_config, self.store, broker_id, updates)

    async def _configs(self, resource_type: int, name: str) -> list[DescribedConfig]:
        """Every setting of a topic, or of this broker, with its source and its default."""
        if resource_type == TOPIC_RESOURCE:
            overrides = (await asyncio.to_thread(self.admin.read_config, name)).value
            if not await asyncio.to_thread(self.admin.topic_exists, name):
                raise UnknownTopicError(f"topic {name!r} does not exist")
            settings = TopicConfig.from_dict(overrides).to_dict()
            defaults = TopicConfig.from_dict({}).to_dict()
            return [DescribedConfig(TopicConfig.CONFIG_DEF[key], _text(value),
                                    DYNAMIC_TOPIC_CONFIG if key in overrides else DEFAULT_CONFIG,
                                    _text(defaults[key]), read_only=False)
                    for key, value in sorted(settings.items())]
        if resource_type == BROKER_RESOURCE and name in ("", str(self.broker.broker_id)):
            given, dynamic = self.broker.raw_config, self.broker.dynamic_config
            settings = self.broker.config.to_dict()
            if self.advertised_listener is not None:  # what clients are told, as bound
                settings["advertised.listeners"] = self.advertised_listener
            for secret in SENSITIVE_BROKER_SETTINGS:
                settings[secret] = None  # as Kafka: a password is never told
            defaults = BrokerConfig().to_dict()
            # Only the dynamic settings change while a broker runs; the others are read-only,
            # as Kafka's static ones.
            return [DescribedConfig(BrokerConfig.CONFIG_DEF[key], _text(value),
                                    DYNAMIC_BROKER_CONFIG if key in dynamic
                                    else STATIC_BROKER_CONFIG if key in given
                                    else DEFAULT_CONFIG,
                                    _text(defaults[key]),
                                    read_only=key not in DYNAMIC_BROKER_SETTINGS)
                    for key, value in sorted(settings.items())
                    if key in BrokerConfig.CONFIG_DEF]
        raise ValueError(f"resource type {resource_type} {name!r} is not described here: ask "
                         "for a topic, or for a broker's settings on that broker")


@dataclass(frozen=True)
class DescribedConfig:
    """One setting as DescribeConfigs reports it."""

    key: ConfigKey
    value: str | None
    source: int
    default: str | None
    read_only: bool

    @property
    def name(self) -> str:
        return self.key.name


def _synonyms(entry: Any, config: DescribedConfig) -> list[Any]:
    """Where the value could come from, in order of precedence (Kafka's synonyms): the setting
    itself and, under an override, the default it overrides."""
    synonym = entry.DescribeConfigsSynonym
    found = [synonym(name=config.name, value=config.value, source=config.source)]
    if config.source != DEFAULT_CONFIG:
        found.append(synonym(name=config.name, value=config.default, source=DEFAULT_CONFIG))
    return found


def _elect_leaders_response(api: Api, error: int, partitions: list[tuple[str, int]],
                            outcomes: dict[tuple[str, int], int] | None = None,
                            ) -> dict[str, Any]:
    """ElectLeaders' answer: `error` for the whole request, else each partition's outcome."""
    result = api.response.ReplicaElectionResult
    by_topic: dict[str, list[Any]] = {}
    for topic, partition in partitions:
        code = error or (outcomes or {}).get((topic, partition), 0)
        by_topic.setdefault(topic, []).append(result.PartitionResult(
            partition_id=partition, error_code=code,
            error_message=None if code == 0 else ErrorCode(code).name))
    return {"throttle_time_ms": 0, "error_code": error, "replica_election_results": [
        result(topic=topic, partition_result=parts) for topic, parts in by_topic.items()]}


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
