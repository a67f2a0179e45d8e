"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): users' SCRAM
credentials in `/config/users/<user>`, as Kafka's admin client manages them.

An upsertion carries the password already salted by the client (`salted_password`, with its
salt and iterations), so neither the broker nor ZooKeeper ever sees a password; the broker
stores the credential Kafka stores (`salt=...,stored_key=...,server_key=...,iterations=...`).
Every broker picks the change up through the entity config's change notification. Nothing is
required of the caller yet: the ACLs will ask ALTER and DESCRIBE on the cluster.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from rafka.actors.broker_view import BrokerView
from rafka.coordination.entity_config import (
    Entity,
    alter_entity_config,
    list_entities,
    read_entity_config,
)
from rafka.coordination.errors import CoordinationError
from rafka.coordination.store import ClusterStore
from rafka.wire.protocol import Api
from rafka.wire.sasl.scram import (
    SCRAM_MECHANISMS,
    credential_from_salted_password,
    scram_iterations,
)

UNKNOWN_SERVER_ERROR = -1
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
# Kafka's ScramMechanism types, as the requests number them.
MECHANISM_TYPES = {1: SCRAM_MECHANISMS[0], 2: SCRAM_MECHANISMS[1]}
TYPE_OF_MECHANISM = {name: number for number, name in MECHANISM_TYPES.items()}


class ScramAdminHandler:
    """Answers the KIP-554 requests from the broker's ZooKeeper store."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker

    def _store(self) -> ClusterStore:
        store = self.broker.store
        assert store is not None, "the broker is not started"
        return store

    async def describe_user_scram_credentials(self, api: Api, _version: int,
                                              request: Any) -> dict[str, Any]:
        store = self._store()
        asked = [user.name for user in request.users] if request.users is not None else None
        if asked is None:
            entities = await asyncio.to_thread(list_entities, store, "users")
            asked = [e.user for e in entities if e.client_id is None and e.user is not None]
            described = await asyncio.to_thread(_describe, store, asked)
            results = [result for result in described if result["error_code"] == 0]
            return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "results": _described(api, results)}
        duplicated = {user for user, count in Counter(asked).items() if count > 1}
        described = await asyncio.to_thread(_describe, store, [u for u in asked
                                                               if u not in duplicated])
        results = described + [_user_error(user, DUPLICATE_RESOURCE,
                                           "the user is named more than once")
                               for user in sorted(duplicated)]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "results": _described(api, results)}

    async def alter_user_scram_credentials(self, api: Api, _version: int,
                                           request: Any) -> dict[str, Any]:
        store = self._store()
        changes: dict[str, dict[str, str | None]] = {}
        errors: dict[str, tuple[int, str]] = {}
        seen: Counter[tuple[str, int]] = Counter(
            (change.name, change.mechanism)
            for change in [*request.deletions, *request.upsertions])
        for deletion in request.deletions:
            mechanism = MECHANISM_TYPES.get(deletion.mechanism)
            if mechanism is None:
                errors[deletion.name] = (UNSUPPORTED_SASL_MECHANISM, "unknown SCRAM mechanism")
            else:
                changes.setdefault(deletion.name, {})[mechanism] = None
        for upsertion in request.upsertions:
            mechanism = MECHANISM_TYPES.get(upsertion.mechanism)
            if mechanism is None:
                errors[upsertion.name] = (UNSUPPORTED_SASL_MECHANISM, "unknown SCRAM mechanism")
                continue
            try:
                credential = credential_from_salted_password(
                    mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password),
                    upsertion.iterations)
            except ValueError as error:
                errors[upsertion.name] = (UNACCEPTABLE_CREDENTIAL, str(error))
                continue
            changes.setdefault(upsertion.name, {})[mechanism] = str(credential)
        for (user, _mechanism), count in seen.items():
            if count > 1:
                errors[user] = (DUPLICATE_RESOURCE, "a credential is altered more than once")
            if not user:
                errors[user] = (UNACCEPTABLE_CREDENTIAL, "the user name is empty")
        valid = {user: updates for user, updates in changes.items() if user not in errors}
        errors.update(await asyncio.to_thread(_alter, store, valid))
        users = list(dict.fromkeys([*changes, *errors]))
        results = []
        for user in users:
            code, message = errors.get(user, (0, None))
            results.append(api.response.AlterUserScramCredentialsResult(
                user=user, error_code=code, error_message=message))
        return {"throttle_time_ms": 0, "results": results}


def _describe(store: ClusterStore, users: list[str]) -> list[dict[str, Any]]:
    results = []
    for user in users:
        config = read_entity_config(store, Entity(user=user)).value if user else {}
        infos = [{"mechanism": TYPE_OF_MECHANISM[mechanism], "iterations": iterations}
                 for mechanism, iterations in scram_iterations(config).items()]
        if not infos:
            results.append(_user_error(user, RESOURCE_NOT_FOUND,
                                       f"attempt to describe a user credential that does not "
                                       f"exist: {user}"))
        else:
            results.append({"user": user, "error_code": 0, "error_message": None,
                            "credential_infos": infos})
    return results


def _alter(store: ClusterStore,
           changes: dict[str, dict[str, str | None]]) -> dict[str, tuple[int, str]]:
    errors = {}
    for user, updates in changes.items():
        entity = Entity(user=user)
        current = read_entity_config(store, entity).value
        missing = [m for m, value in updates.items() if value is None and m not in current]
        if missing:
            errors[user] = (RESOURCE_NOT_FOUND, f"attempt to delete a user credential that "
                                                f"does not exist: {user} {missing[0]}")
            continue
        try:
            alter_entity_config(store, entity, updates)
        except CoordinationError as error:
            errors[user] = (UNKNOWN_SERVER_ERROR, str(error))
    return errors


def _described(api: Api, results: list[dict[str, Any]]) -> list[Any]:
    """The schema's result structs of `_describe`'s dicts."""
    result = api.response.DescribeUserScramCredentialsResult
    return [result(**{**found, "credential_infos": [
        result.CredentialInfo(**info) for info in found["credential_infos"]]})
        for found in results]


def _user_error(user: str, code: int, message: str | None) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message,
            "credential_infos": []}
