"""`rafka quotas --describe|--alter`: client quotas per user and client id, with
kafka-configs.sh's options (`--entity-type users|clients`, `--entity-name` or
`--entity-default`, `--add-config k=v,...`, `--delete-config k,...`).

The quotas are written to ZooKeeper, where every broker watches them, so a change holds within
seconds everywhere, without a restart.
"""

from __future__ import annotations

import argparse
from typing import Any

from rafka.actors.kafka.quota_store import ZooKeeperQuotas
from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.errors import CliError
from rafka.cli.commands.output import echo
from rafka.wire.quotas import (
    CLIENT_ID,
    DEFAULT,
    USER,
    QuotaEntity,
    QuotaRequestError,
    entity_from_components,
    matches_filter,
    quota_value,
)

ENTITY_TYPES = {"users": USER, "clients": CLIENT_ID}


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "quotas", help="describe or alter client quotas (users, client ids)",
        description="Kafka's client quotas, as kafka-configs.sh sets them: "
                    "rafka quotas --alter --entity-type users --entity-name alice "
                    "--add-config producer_byte_rate=1048576")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true",
                        help="show the quotas of the entities named (all of them if none)")
    action.add_argument("--alter", action="store_true", help="set or delete quotas")
    parser.add_argument("--entity-type", action="append", default=[],
                        choices=sorted(ENTITY_TYPES),
                        help="users or clients; twice (with a name or default each) for a "
                             "user's client id")
    parser.add_argument("--entity-name", action="append", dest="entity_names",
                        default=[], help="the name of the --entity-type before it")
    parser.add_argument("--entity-default", action="append_const", dest="entity_names",
                        const=None, help="the default entity of the --entity-type before it")
    parser.add_argument("--add-config", default="", metavar="K=V,...",
                        help="quotas to set: producer_byte_rate, consumer_byte_rate (bytes "
                             "a second), request_percentage")
    parser.add_argument("--delete-config", default="", metavar="K,...",
                        help="quotas to delete")
    add_connection_options(parser)
    parser.set_defaults(run=_run)


def _entity_filter(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    if len(args.entity_names) > len(args.entity_type):
        raise CliError("each --entity-name or --entity-default follows an --entity-type", 2)
    names = args.entity_names + [""] * (len(args.entity_type) - len(args.entity_names))
    return [(ENTITY_TYPES[kind], name) for kind, name in zip(args.entity_type, names,
                                                                 strict=True)]


def updates_of(add_config: str, delete_config: str) -> dict[str, float | None]:
    """kafka-configs' `--add-config a=1,b=2` and `--delete-config c,d` as quota updates."""
    updates: dict[str, float | None] = {}
    for pair in filter(None, add_config.split(",")):
        key, equals, value = pair.partition("=")
        key = key.strip()
        try:
            if not equals:
                raise QuotaRequestError(f"{pair!r} is not KEY=VALUE")
            updates[key] = quota_value(key, float(value))
        except (QuotaRequestError, ValueError) as error:
            raise CliError(f"--add-config: {error}", 2) from None
    for key in filter(None, (key.strip() for key in delete_config.split(","))):
        if key in updates:
            raise CliError(f"{key!r} is both added and deleted", 2)
        updates[key] = None
    return updates


def _run(args: argparse.Namespace) -> int:
    components = _entity_filter(args)
    if args.alter:
        if any(name == "" for _, name in components) or not components:
            raise CliError("--alter needs --entity-type with --entity-name or "
                           "--entity-default", 2)
        try:
            entity = entity_from_components(components)
        except QuotaRequestError as error:
            raise CliError(str(error), 2) from None
        updates = updates_of(args.add_config, args.delete_config)
        if not updates:
            raise CliError("nothing to alter: give --add-config K=V or --delete-config K", 2)
        with connected(args) as cluster:
            ZooKeeperQuotas(cluster.store).alter(entity, updates)
        echo(f"Completed updating quota configs for {_described(entity)}.")
        return 0
    with connected(args) as cluster:
        configs = ZooKeeperQuotas(cluster.store).read_all()
    filters = [(kind, 2 if name == "" else 1 if name is None else 0, name or None)
               for kind, name in components]
    for entity, values in sorted(configs.items(), key=lambda item: str(item[0])):
        if values and matches_filter(entity, filters, strict=bool(filters)):
            echo(f"Quota configs for {_described(entity)} are {_values(values)}")
    return 0


def _described(entity: QuotaEntity) -> str:
    parts = []
    for kind, name in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        if name is not None:
            label = "user-principal" if kind == USER else "client-id"
            parts.append(f"the default {label}" if name == DEFAULT else f"{label} '{name}'")
    return ", ".join(parts)


def _values(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value:g}" for key, value in sorted(values.items()))
