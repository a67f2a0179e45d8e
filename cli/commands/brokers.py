"""`rafka brokers list|add`: the registered brokers, and growing the cluster by more of them.

A broker added here is detached and keeps its log under the data dir `rafka up` recorded, as
those `up` started do. It holds no replicas until topics are created or partitions reassigned
to it (`rafka reassign`), as in Kafka.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rafka.actors.config import BrokerConfig
from rafka.cli.commands import state as cluster_state
from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.errors import CliError
from rafka.cli.commands.output import add_key_value_option, echo, key_values, table
from rafka.cli.commands.progress import wait_with_spinner


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("brokers", help="list the brokers, or add brokers")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the registered brokers and the controller")
    listing.add_argument("--format", choices=("text", "json"), default="text")
    listing.set_defaults(run=_list)
    add = actions.add_parser("add", help="start more brokers (the next free ids)")
    add.add_argument("--count", type=int, default=1, help="how many (default 1)")
    add.add_argument("--broker-id", type=int, help="the id of the one broker to add")
    add_key_value_option(add, "--broker-config",
                         help="a broker config setting, as given to `rafka up`; repeatable")
    add.add_argument("--broker-resource", metavar="NAME",
                     help="a custom Ray resource each broker needs, as given to `rafka up`")
    add.add_argument("--timeout", type=float, default=120.0,
                     help="seconds to wait for each broker to register (default 120)")
    add.set_defaults(run=_add)
    for action in (listing, add):
        add_connection_options(action)


def _list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        brokers, controller = cluster.brokers(), cluster.controller()
    if args.format == "json":
        echo(json.dumps({"brokers": brokers, "controller": controller}, indent=2))
        return 0
    echo(table(["ID", "HOST", "RACK", "CONTROLLER"],
               [[b["id"], b["host"], b["rack"] or "-", "yes" if b["id"] == controller else ""]
                for b in brokers]))
    return 0


def _add(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise CliError(f"--count must be at least 1, got {args.count}", 2)
    if args.broker_id is not None and args.count != 1:
        raise CliError("--broker-id names one broker: leave out --count", 2)
    broker_config = key_values(args.broker_config, "--broker-config")
    BrokerConfig.from_dict(broker_config)  # refused before anything starts
    recorded = cluster_state.load(args.name, args.data_dir)
    with connected(args) as cluster:
        # Like those `up` started: outliving this command, logs under the recorded data dir.
        cluster.detached = True
        cluster.broker_config = broker_config
        if args.broker_resource:
            cluster.broker_resources = {args.broker_resource: 1}
        if recorded is not None:
            cluster.data_dir = Path(recorded.data_dir)
        elif args.data_dir:
            cluster.data_dir = Path(args.data_dir)
        else:
            raise CliError("where should the new brokers keep their logs? this cluster was not "
                           "started by `rafka up` here: pass --data-dir DIR", 2)
        added = []
        for _ in range(args.count):
            added.append(wait_with_spinner(
                "starting a broker",
                lambda: cluster.add_broker(args.broker_id, timeout_s=args.timeout),
                announce=True))
    for broker_id in added:
        echo(f"added broker {broker_id}")
    return 0
