"""`rafka groups list|describe`: consumer groups, their members, offsets and lag."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.errors import CliError
from rafka.cli.commands.output import echo, table


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("groups", help="list and describe consumer groups")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the consumer groups, one per line")
    listing.set_defaults(run=_list)
    describe = actions.add_parser("describe",
                                  help="members, owned partitions, committed offsets and lag")
    describe.add_argument("group_name", nargs="?", metavar="GROUP")
    describe.add_argument("--group", help="the group (Kafka's spelling)")
    describe.add_argument("--format", choices=("text", "json"), default="text")
    describe.set_defaults(run=_describe)
    for action in (listing, describe):
        add_connection_options(action)


def _list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        groups = cluster.list_groups()
    for group in sorted(groups):
        echo(group)
    return 0


def _describe(args: argparse.Namespace) -> int:
    group = args.group or args.group_name
    if group is None:
        raise CliError("which group? give its name (or --group NAME)", 2)
    with connected(args) as cluster:
        if group not in cluster.list_groups():
            raise CliError(f"consumer group {group!r} does not exist: `rafka groups list` "
                           f"shows those that do")
        description = cluster.describe_group(group)
    if args.format == "json":
        echo(json.dumps(description, indent=2, default=str))
    else:
        echo(_render(group, description))
    return 0


def _render(group: str, description: Any) -> str:
    if not isinstance(description, dict):
        return f"group {group}: {description}"
    members = description.get("members") or {}
    lines = [f"group {group}: {len(members)} member(s)"]
    for member, topics in sorted(members.items()):
        lines.append(f"  {member}: {', '.join(topics) if isinstance(topics, list) else topics}")
    partitions = description.get("partitions") or []
    if partitions:
        columns = list(dict.fromkeys(key for entry in partitions for key in entry))
        lines += ["", table([c.upper().replace("_", "-") for c in columns],
                            [[entry.get(c) for c in columns] for entry in partitions])]
    return "\n".join(lines)
