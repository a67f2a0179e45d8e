"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) answered from a users'
config held in memory: Kafka's error codes, and answers the schemas encode."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey

from rafka.actors.kafka import scram_admin
from rafka.coordination.entity_config import Entity
from rafka.coordination.models import Versioned
from rafka.wire.protocol import APIS, encode_response
from rafka.wire.sasl.scram import ScramCredential

ALTER = APIS[ApiKey.AlterUserScramCredentials]
DESCRIBE = APIS[ApiKey.DescribeUserScramCredentials]


@pytest.fixture
def users(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    held: dict[str, dict[str, str]] = {}

    def alter(_store: Any, entity: Entity, updates: dict[str, str | None]) -> None:
        config = held.setdefault(entity.user or "", {})
        for key, value in updates.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value

    monkeypatch.setattr(scram_admin, "read_entity_config",
                        lambda _store, entity: Versioned(dict(held.get(entity.user, {})), 0))
    monkeypatch.setattr(scram_admin, "alter_entity_config", alter)
    monkeypatch.setattr(scram_admin, "list_entities",
                        lambda _store, _kind: [Entity(user=user) for user in held])
    return held


def answer(api: Any, request: Any) -> dict[str, Any]:
    handler = scram_admin.ScramAdminHandler(SimpleNamespace(store=object()))  # type: ignore[arg-type]
    method = handler.alter_user_scram_credentials if api is ALTER \
        else handler.describe_user_scram_credentials
    fields = asyncio.run(method(api, 0, request))
    assert encode_response(api, 0, 1, **fields)  # the schemas encode it
    return fields


def test_alter_then_describe(users: dict[str, dict[str, str]]) -> None:
    upsert, delete = ALTER.request.ScramCredentialUpsertion, ALTER.request.ScramCredentialDeletion
    fields = answer(ALTER, ALTER.request(
        deletions=[delete(name="bob", mechanism=1)],
        upsertions=[upsert(name="alice", mechanism=2, iterations=8192, salt=b"s" * 16,
                           salted_password=b"p" * 64),
                    upsert(name="carol", mechanism=2, iterations=10, salt=b"s",
                           salted_password=b"p"),
                    upsert(name="dave", mechanism=9, iterations=4096, salt=b"s",
                           salted_password=b"p")]))
    codes = {result.user: result.error_code for result in fields["results"]}
    assert codes == {"bob": scram_admin.RESOURCE_NOT_FOUND, "alice": 0,
                     "carol": scram_admin.UNACCEPTABLE_CREDENTIAL,
                     "dave": scram_admin.UNSUPPORTED_SASL_MECHANISM}
    assert ScramCredential.parse(users["alice"]["SCRAM-SHA-512"]).iterations == 8192

    name = DESCRIBE.request.UserName
    fields = answer(DESCRIBE, DESCRIBE.request(users=[name(name="alice"), name(name="zed"),
                                                      name(name="x"), name(name="x")]))
    found = {result.user: result for result in fields["results"]}
    assert [(info.mechanism, info.iterations) for info in found["alice"].credential_infos] \
        == [(2, 8192)]
    assert found["zed"].error_code == scram_admin.RESOURCE_NOT_FOUND
    assert found["x"].error_code == scram_admin.DUPLICATE_RESOURCE
    everyone = answer(DESCRIBE, DESCRIBE.request(users=None))
    assert [result.user for result in everyone["results"]] == ["alice"]


def test_the_same_credential_twice_is_a_duplicate(users: dict[str, dict[str, str]]) -> None:
    upsert, delete = ALTER.request.ScramCredentialUpsertion, ALTER.request.ScramCredentialDeletion
    fields = answer(ALTER, ALTER.request(
        deletions=[delete(name="alice", mechanism=2)],
        upsertions=[upsert(name="alice", mechanism=2, iterations=4096, salt=b"s",
                           salted_password=b"p")]))
    assert [result.error_code for result in fields["results"]] == [
        scram_admin.DUPLICATE_RESOURCE]
    assert users == {}
