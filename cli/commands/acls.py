"""`rafka acls add|list|remove`: the cluster's ACLs, with kafka-acls.sh's option names.

Written to and read from the cluster's ZooKeeper, as kafka-acls.sh does with
`--authorizer-properties zookeeper.connect=...`; every broker sees a change within seconds
(its watch on the change notifications). `add` binds each of `--topic`, `--group`,
`--cluster` and `--transactional-id` to each `--operation` of each `--allow-principal` (on
each `--allow-host`, default `*`) and each `--deny-principal` (on each `--deny-host`);
`remove` deletes those bindings, or every ACL of the resources named when no principal is
given; `list` shows the ACLs of the resources named (`--principal` to narrow), or all.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator

from rafka.cli.commands import connection
from rafka.cli.commands.arguments import add_command
from rafka.cli.commands.errors import EXIT_USAGE, CliError
from rafka.cli.commands.output import echo
from rafka.common import acl
from rafka.coordination.acls import AclStore
from rafka.coordination.store import ClusterStore


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "acls", help="add, list and remove ACLs", doc=__doc__)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, run, help_text in (("add", _add, "add ACLs"), ("list", _list, "list ACLs"),
                                 ("remove", _remove, "remove ACLs")):
        action = actions.add_parser(name, help=help_text)
        resources = action.add_argument_group("resources")
        resources.add_argument("--topic", action="append", default=[], metavar="TOPIC")
        resources.add_argument("--group", action="append", default=[], metavar="GROUP")
        resources.add_argument("--cluster", action="store_true",
                               help=f"the cluster ({acl.CLUSTER_NAME})")
        resources.add_argument("--transactional-id", action="append", default=[],
                               metavar="ID")
        resources.add_argument(
            "--resource-pattern-type", default=None,
            choices=("literal", "prefixed", "match", "any"), type=str.lower,
            help="literal (default) or prefixed; list and remove also take match and any")
        if name != "list":
            entries = action.add_argument_group("entries")
            entries.add_argument("--allow-principal", action="append", default=[],
                                 metavar="TYPE:NAME")
            entries.add_argument("--deny-principal", action="append", default=[],
                                 metavar="TYPE:NAME")
            entries.add_argument("--allow-host", action="append", default=[], metavar="HOST")
            entries.add_argument("--deny-host", action="append", default=[], metavar="HOST")
            entries.add_argument("--operation", action="append", default=[],
                                 metavar="OPERATION",
                                 help="Read, Write, Create, Delete, Alter, Describe, "
                                      "ClusterAction, DescribeConfigs, AlterConfigs, "
                                      "IdempotentWrite, All (default: All)")
        else:
            action.add_argument("--principal", action="append", default=[],
                                metavar="TYPE:NAME", help="only the ACLs of this principal")
        connection.add_connection_options(action)
        action.set_defaults(run=run)


def _store(args: argparse.Namespace) -> ClusterStore:
    target = connection.resolve(args)
    address = connection.check_zookeeper(target.zk)
    store = ClusterStore(address, target.name,
                         credentials=connection.load_zk_credentials(target.zk_credentials_file))
    return store.start()


def _pattern_type(args: argparse.Namespace, default: acl.PatternType) -> acl.PatternType:
    return acl.PatternType.from_kafka_name(args.resource_pattern_type) \
        if args.resource_pattern_type else default


def _resources(args: argparse.Namespace) -> list[tuple[acl.ResourceType, str]]:
    return [*((acl.ResourceType.TOPIC, name) for name in args.topic),
            *((acl.ResourceType.GROUP, name) for name in args.group),
            *([(acl.ResourceType.CLUSTER, acl.CLUSTER_NAME)] if args.cluster else []),
            *((acl.ResourceType.TRANSACTIONAL_ID, name) for name in args.transactional_id)]


def _operations(args: argparse.Namespace) -> list[acl.AclOperation]:
    try:
        return [acl.AclOperation.from_kafka_name(name) for name in args.operation] \
            or [acl.AclOperation.ALL]
    except KeyError as error:
        raise CliError(f"no such operation {error}", EXIT_USAGE) from None


def _entries(args: argparse.Namespace) -> Iterator[acl.AccessControlEntry]:
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, acl.AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, acl.AclPermissionType.DENY)):
        for principal, host, operation in itertools.product(
                principals, hosts or [acl.WILDCARD_HOST], _operations(args)):
            yield acl.AccessControlEntry(principal, host, operation, permission)


def _add(args: argparse.Namespace) -> int:
    pattern_type = _pattern_type(args, acl.PatternType.LITERAL)
    resources = _resources(args)
    entries = list(_entries(args))
    if not resources or not entries:
        raise CliError("name a resource (--topic, --group, --cluster, --transactional-id) and "
                       "a principal (--allow-principal or --deny-principal)", EXIT_USAGE)
    added = [acl.AclBinding(acl.ResourcePattern(kind, name, pattern_type), entry)
             for kind, name in resources for entry in entries]
    store = _store(args)
    try:
        AclStore(store).add(added)
        _show(AclStore(store).read_all(), [_exactly(binding.pattern) for binding in added])
    except acl.InvalidAclError as error:
        raise CliError(str(error), EXIT_USAGE) from None
    finally:
        store.close()
    return 0


def _list(args: argparse.Namespace) -> int:
    resources = _resources(args)
    pattern_type = _pattern_type(
        args, acl.PatternType.LITERAL if resources else acl.PatternType.ANY)
    principals: list[str | None] = list(args.principal) or [None]
    named: list[tuple[acl.ResourceType, str | None]] = (
        list(resources) or [(acl.ResourceType.ANY, None)])
    filters = [acl.AclBindingFilter(kind, name, pattern_type, principal)
               for kind, name in named for principal in principals]
    store = _store(args)
    try:
        _show(AclStore(store).read_all(), filters)
    finally:
        store.close()
    return 0


def _remove(args: argparse.Namespace) -> int:
    resources = _resources(args)
    if not resources:
        raise CliError("name the resources to remove ACLs of (--topic, --group, --cluster, "
                       "--transactional-id)", EXIT_USAGE)
    pattern_type = _pattern_type(args, acl.PatternType.LITERAL)
    entries = list(_entries(args))
    filters = [acl.AclBindingFilter(kind, name, pattern_type, entry.principal, entry.host,
                                entry.operation, entry.permission_type)
               for kind, name in resources for entry in entries] if entries else [
        acl.AclBindingFilter(kind, name, pattern_type) for kind, name in resources]
    store = _store(args)
    try:
        removed = AclStore(store).remove(filters)
    finally:
        store.close()
    gone = sorted({binding for bindings in removed for binding in bindings})
    echo(f"Removed {len(gone)} ACL(s)")
    for binding in gone:
        echo(f"\t{_pattern_text(binding.pattern)}: {_entry_text(binding.entry)}")
    return 0


def _exactly(pattern: acl.ResourcePattern) -> acl.AclBindingFilter:
    return acl.AclBindingFilter(pattern.resource_type, pattern.name, pattern.pattern_type)


def _show(acls: dict[acl.ResourcePattern, frozenset[acl.AccessControlEntry]],
          filters: list[acl.AclBindingFilter]) -> None:
    """Kafka's layout: `Current ACLs for resource ...:` and an indented line per entry."""
    found = sorted({binding for wanted in filters for binding in acl.select(acls, wanted)})
    for pattern, bindings in itertools.groupby(found, key=lambda binding: binding.pattern):
        echo(f"Current ACLs for resource `{_pattern_text(pattern)}`:")
        for binding in bindings:
            echo(f" \t{_entry_text(binding.entry)}")
        echo("")


def _pattern_text(pattern: acl.ResourcePattern) -> str:
    return (f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
            f"patternType={pattern.pattern_type.name})")


def _entry_text(entry: acl.AccessControlEntry) -> str:
    return (f"(principal={entry.principal}, host={entry.host}, "
            f"operation={entry.operation.name}, permissionType={entry.permission_type.name})")
