"""`rafka users create|delete|list`: users' SCRAM credentials, as Kafka's
`kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-512=[password=...]'` keeps
them: salted, in `/config/users/<user>` (never the password), picked up by every broker
without a restart."""

from __future__ import annotations

import argparse
import sys

from rafka.actors.cluster import Cluster
from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.errors import EXIT_USAGE, CliError
from rafka.cli.commands.output import table
from rafka.coordination.entity_config import (
    Entity,
    alter_entity_config,
    list_entities,
    read_entity_config,
)
from rafka.wire.sasl.scram import (
    DEFAULT_ITERATIONS,
    SCRAM_MECHANISMS,
    make_credential,
    scram_iterations,
)


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("users", help="create, delete, list SCRAM users")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="set a user's SCRAM credential")
    create.add_argument("--user", required=True, help="the user name")
    create.add_argument("--password",
                        help="the password (default: read from stdin); one beginning with '-' "
                             "takes the form --password=VALUE")
    create.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS,
                        help="SCRAM-SHA-256 or SCRAM-SHA-512; repeatable (default: both)")
    create.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                        help=f"iterations of the salted hash (default {DEFAULT_ITERATIONS})")
    create.set_defaults(run=_create)

    delete = actions.add_parser("delete", help="delete a user's SCRAM credentials")
    delete.add_argument("--user", required=True, help="the user name")
    delete.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS,
                        help="only this mechanism's; repeatable (default: all)")
    delete.set_defaults(run=_delete)

    listing = actions.add_parser("list", help="the users with SCRAM credentials")
    listing.set_defaults(run=_list)

    for action in (create, delete, listing):
        add_connection_options(action)


def _create(args: argparse.Namespace) -> int:
    password = args.password if args.password is not None else sys.stdin.readline().rstrip("\n")
    if not password:
        raise CliError("give the user a password: --password, or one line on stdin",
                       EXIT_USAGE)
    try:
        updates = {mechanism: str(make_credential(mechanism, password, args.iterations))
                   for mechanism in args.mechanism or SCRAM_MECHANISMS}
    except ValueError as error:
        raise CliError(str(error), EXIT_USAGE) from None
    with connected(args) as cluster:
        alter_entity_config(cluster.store, Entity(user=args.user), updates)
    print(f"user {args.user!r}: {', '.join(updates)} set", file=sys.stderr)
    return 0


def _delete(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        current = read_entity_config(cluster.store, Entity(user=args.user)).value
        found = [m for m in args.mechanism or SCRAM_MECHANISMS if m in current]
        if not found:
            raise CliError(f"user {args.user!r} has no SCRAM credential to delete")
        alter_entity_config(cluster.store, Entity(user=args.user), dict.fromkeys(found))
    print(f"user {args.user!r}: {', '.join(found)} deleted", file=sys.stderr)
    return 0


def _list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        rows = _scram_users(cluster)
    print(table(["USER", "MECHANISMS"], rows) if rows else "no SCRAM users")
    return 0


def _scram_users(cluster: Cluster) -> list[list[str]]:
    rows = []
    for entity in list_entities(cluster.store, "users"):
        if entity.user is None or entity.client_id is not None:
            continue
        found = scram_iterations(read_entity_config(cluster.store, entity).value)
        mechanisms = [f"{mechanism} (iterations={iterations})"
                      for mechanism, iterations in found.items()]
        if mechanisms:
            rows.append([entity.user, ", ".join(mechanisms)])
    return rows
