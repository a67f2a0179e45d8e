"""CreateAcls, DescribeAcls and DeleteAcls: the cluster's ACLs, written to and read from
ZooKeeper (`rafka.coordination.acls`), as Kafka's `AclAuthorizer` serves them.

Described and deleted from a fresh read of ZooKeeper, not from this broker's cache, so a client
that created an ACL sees it at once on any broker. A broker without an authorizer answers
SECURITY_DISABLED, as Kafka's does; an ACL that cannot be stored (a filter's ANY, a principal
that is not TYPE:NAME) is INVALID_REQUEST, and nothing of its request is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.actors.broker_view import BrokerView
from rafka.common.acl import (
    SECURITY_DISABLED,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    select,
)
from rafka.common.errors import ErrorCode
from rafka.coordination.acls import AclStore
from rafka.wire.protocol import Api


class KafkaAclHandler:
    """The ACL APIs of one broker (`enabled`: whether it has an authorizer)."""

    def __init__(self, broker: BrokerView, enabled: bool) -> None:
        self.broker = broker
        self.enabled = enabled

    def _store(self) -> AclStore:
        assert self.broker.store is not None  # requests come only once the broker started
        return AclStore(self.broker.store)

    async def create_acls(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        result = api.response.AclCreationResult
        if not self.enabled:
            return {"throttle_time_ms": 0, "results": [
                result(error_code=SECURITY_DISABLED, error_message=_DISABLED)
                for _ in request.creations]}
        created = [_binding(creation) for creation in request.creations]
        errors: list[tuple[int, str | None]] = []
        valid = []
        for binding in created:
            try:
                binding.validate()
            except InvalidAclError as error:
                errors.append((ErrorCode.INVALID_REQUEST, str(error)))
            else:
                errors.append((0, None))
                valid.append(binding)
        await asyncio.to_thread(self._store().add, valid)
        return {"throttle_time_ms": 0, "results": [
            result(error_code=code, error_message=message) for code, message in errors]}

    async def describe_acls(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        if not self.enabled:
            return {"throttle_time_ms": 0, "error_code": SECURITY_DISABLED,
                    "error_message": _DISABLED, "resources": []}
        wanted = _filter(request, request.resource_type_filter, request.resource_name_filter,
                         request.pattern_type_filter)
        found = select(await asyncio.to_thread(self._store().read_all), wanted)
        resource = api.response.DescribeAclsResource
        by_pattern: dict[ResourcePattern, list[AclBinding]] = {}
        for binding in found:
            by_pattern.setdefault(binding.pattern, []).append(binding)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": [
            resource(resource_type=pattern.resource_type, resource_name=pattern.name,
                     pattern_type=pattern.pattern_type, acls=[
                         resource.AclDescription(
                             principal=b.entry.principal, host=b.entry.host,
                             operation=b.entry.operation,
                             permission_type=b.entry.permission_type) for b in listed])
            for pattern, listed in by_pattern.items()]}

    async def delete_acls(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        result = api.response.DeleteAclsFilterResult
        if not self.enabled:
            return {"throttle_time_ms": 0, "filter_results": [
                result(error_code=SECURITY_DISABLED, error_message=_DISABLED, matching_acls=[])
                for _ in request.filters]}
        filters = [_filter(f, f.resource_type_filter, f.resource_name_filter,
                           f.pattern_type_filter) for f in request.filters]
        removed = await asyncio.to_thread(self._store().remove, filters)
        matching = result.DeleteAclsMatchingAcl
        return {"throttle_time_ms": 0, "filter_results": [
            result(error_code=0, error_message=None, matching_acls=[
                matching(error_code=0, error_message=None,
                         resource_type=b.pattern.resource_type, resource_name=b.pattern.name,
                         pattern_type=b.pattern.pattern_type, principal=b.entry.principal,
                         host=b.entry.host, operation=b.entry.operation,
                         permission_type=b.entry.permission_type) for b in bindings])
            for bindings in removed]}

    def handlers(self) -> dict[int, Callable[..., Any]]:
        return {ApiKey.CreateAcls: self.create_acls, ApiKey.DescribeAcls: self.describe_acls,
                ApiKey.DeleteAcls: self.delete_acls}


_DISABLED = "no authorizer is configured on the broker (authorizer.class.name)"


def _enum(kind: Any, value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind.UNKNOWN


def _binding(creation: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(_enum(ResourceType, creation.resource_type), creation.resource_name,
                        _enum(PatternType, creation.resource_pattern_type)),
        AccessControlEntry(creation.principal, creation.host,
                           _enum(AclOperation, creation.operation),
                           _enum(AclPermissionType, creation.permission_type)))


def _filter(entry: Any, resource_type: int, name: str | None,
            pattern_type: int) -> AclBindingFilter:
    return AclBindingFilter(
        _enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type),
        entry.principal_filter, entry.host_filter, _enum(AclOperation, entry.operation),
        _enum(AclPermissionType, entry.permission_type))
