"""Validation of every name that becomes a znode name: topics, groups, members, brokers, clusters.

A name is spliced into a ZooKeeper path, so anything outside a small alphabet could climb out of
its parent (`..`, `/`) or produce a path ZooKeeper rejects. The rules for topics are Kafka's
(`Topic.validate`): 1 to 249 characters of `[A-Za-z0-9._-]`, and neither `.` nor `..`.
"""

from __future__ import annotations

import re

from rafka.coordination.errors import (
    InvalidBrokerIdError,
    InvalidClusterNameError,
    InvalidGroupIdError,
    InvalidMemberIdError,
    InvalidPartitionsError,
    InvalidTopicError,
)

MAX_NAME_LENGTH = 249
"""Kafka's limit for topic names; used for every name here so one rule fits all."""

MAX_BROKER_ID = 2**31 - 1
"""Broker ids are Java ints in Kafka."""

_NAME = re.compile(r"[A-Za-z0-9._-]+")
# Kafka's old consumers name members `<group>_<host>-<time>-<uuid>`; Kafka's documentation writes
# `host:uuid`, so members may also use ':' (legal in a znode name).
_MEMBER = re.compile(r"[A-Za-z0-9._:-]+")

_ALLOWED = f"1 to {MAX_NAME_LENGTH} characters of ASCII letters, digits, '.', '_' and '-'"


def _problem(name: object, pattern: re.Pattern[str]) -> str | None:
    """Why `name` is not a legal znode name under `pattern`, or None if it is."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long"
    if name in (".", ".."):
        return "must not be '.' or '..'"
    if not pattern.fullmatch(name):
        bad = sorted({char for char in name if not pattern.fullmatch(char)})
        return f"contains {''.join(bad)!r}"
    return None


def _validated(
    name: str, pattern: re.Pattern[str], error: type[Exception], what: str, rule: str
) -> str:
    """Return `name` if it is legal under `pattern`, else raise `error` saying what and the rule."""
    problem = _problem(name, pattern)
    if problem:
        raise error(f"{what} {name!r} {problem}: {rule}")
    return name


def validate_topic_name(name: str) -> str:
    """Return `name` if it is a legal topic name, else raise `InvalidTopicError`."""
    return _validated(name, _NAME, InvalidTopicError, "topic name",
                      f"a topic name is {_ALLOWED}, and not '.' or '..'")


def is_valid_topic_name(name: str) -> bool:
    """Whether `name` is a legal topic name (`validate_topic_name` says why not)."""
    return _problem(name, _NAME) is None


def is_valid_group_id(group: str) -> bool:
    """Whether `group` may name a consumer group of rafka's (a Kafka client's may be any
    string)."""
    return not _problem(group, _NAME)


def validate_group_id(group: str) -> str:
    """Return `group` if it is a legal consumer group id, else raise `InvalidGroupIdError`."""
    return _validated(group, _NAME, InvalidGroupIdError, "consumer group id",
                      f"a group id is {_ALLOWED}, "
                      f"and not '.' or '..' (it becomes the znode /consumers/<group>)")


def validate_member_id(member: str) -> str:
    """Return `member` if it is a legal group member id, else raise `InvalidMemberIdError`."""
    return _validated(member, _MEMBER, InvalidMemberIdError, "consumer member id",
                      f"a member id is 1 to {MAX_NAME_LENGTH} "
                      f"characters of ASCII letters, digits, '.', '_', '-' and ':', such as "
                      f"'host:uuid', and not '.' or '..'")


def validate_cluster_name(name: str) -> str:
    """Return `name` if it is a legal cluster name, else raise `InvalidClusterNameError`."""
    return _validated(name, _NAME, InvalidClusterNameError, "cluster name",
                      f"a cluster name is {_ALLOWED}, and not '.' or "
                      f"'..' (the cluster lives under the ZooKeeper chroot /rafka/<name>)")


def validate_broker_id(broker_id: int) -> int:
    """Return `broker_id` if it is a non-negative 32-bit int, else raise `InvalidBrokerIdError`."""
    # bool is an int subclass, but True as a broker id is certainly a mistake.
    if (
        not isinstance(broker_id, int)
        or isinstance(broker_id, bool)
        or not 0 <= broker_id <= MAX_BROKER_ID
    ):
        raise InvalidBrokerIdError(
            f"broker id {broker_id!r} is not allowed: a broker id is an int from 0 to "
            f"{MAX_BROKER_ID} (Kafka's broker.id)"
        )
    return broker_id


def validate_partition(partition: int) -> int:
    """Return `partition` if it is a non-negative int index, else raise `InvalidPartitionsError`."""
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise InvalidPartitionsError(
            f"partition {partition!r} is not allowed: a partition is an int index from 0"
        )
    return partition


def validate_actor_name(name: str) -> str:
    """Return `name` if it may name a znode for one of rafka's actors (a replica host), else
    raise ValueError: rafka makes these names itself, from validated topic names."""
    return _validated(name, _NAME, ValueError, "actor name", f"an actor name is {_ALLOWED}")
