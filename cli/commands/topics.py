"""`rafka topics create|list|describe|delete|alter`, with kafka-topics' option names."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rafka.actors.cluster import Cluster
from rafka.cli.commands.arguments import add_topic_argument, required_topic_of, topic_of
from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.errors import CliError, checked_count
from rafka.cli.commands.output import add_key_value_option, echo, key_values, table
from rafka.cli.commands.progress import wait_with_spinner
from rafka.coordination.errors import TopicExistsError, UnknownTopicError


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("topics", help="create, list, describe, alter, delete topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic")
    add_topic_argument(create)
    create.add_argument("--partitions", type=int, default=1, help="partitions (default 1)")
    create.add_argument("--replication-factor", type=int, default=1,
                        help="replicas of each partition, at most the live brokers (default 1)")
    add_key_value_option(create, "--config", help="a topic config override; repeatable")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed, doing nothing, if the topic exists already")
    create.set_defaults(run=_create)

    listing = actions.add_parser("list", help="the topics, one per line")
    listing.set_defaults(run=_list)

    describe = actions.add_parser("describe", help="partitions with leader, replicas and ISR")
    add_topic_argument(describe, required=False)
    describe.add_argument("--under-replicated-partitions", action="store_true",
                          help="only partitions whose ISR is smaller than their replicas")
    describe.add_argument("--replicas", action="store_true",
                          help="also every replica as its broker sees it: role, epoch, log "
                               "end, high watermark, and how its fetching goes")
    describe.add_argument("--format", choices=("text", "json"), default="text")
    describe.set_defaults(run=_describe)

    delete = actions.add_parser("delete", help="delete a topic and its data")
    add_topic_argument(delete)
    delete.set_defaults(run=_delete)

    alter = actions.add_parser("alter", help="change config overrides (or grow partitions)")
    add_topic_argument(alter)
    add_key_value_option(alter, "--config", "--add-config",
                         help="set a config override; repeatable")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="remove a config override (back to the default); repeatable")
    alter.add_argument("--partitions", type=int,
                       help="grow the topic to this many partitions (never shrinks)")
    alter.set_defaults(run=_alter)

    for action in (create, listing, describe, delete, alter):
        add_connection_options(action)


def _with_cluster(args: argparse.Namespace, work: Any) -> int:
    with connected(args) as cluster:
        return work(cluster)


def _create(args: argparse.Namespace) -> int:
    topic = required_topic_of(args)
    checked_count(args.partitions, "--partitions", 1)
    checked_count(args.replication_factor, "--replication-factor", 1)
    config = key_values(args.config, "--config")

    def create(cluster: Cluster) -> int:
        try:
            wait_with_spinner(f"creating {topic}", lambda: cluster.create_topic(
                topic, partitions=args.partitions, replication_factor=args.replication_factor,
                config=config))
        except TopicExistsError:
            if args.if_not_exists:
                print(f"topic {topic!r} exists already; left as it is", file=sys.stderr)
                return 0
            raise CliError(f"topic {topic!r} exists already: choose another name, or pass "
                           f"--if-not-exists") from None
        echo(f"created topic {topic!r}: {args.partitions} partition(s), "
             f"replication factor {args.replication_factor}")
        return 0

    return _with_cluster(args, create)


def _list(args: argparse.Namespace) -> int:
    def listing(cluster: Cluster) -> int:
        for topic in sorted(cluster.list_topics()):
            echo(topic)
        return 0

    return _with_cluster(args, listing)


def _describe(args: argparse.Namespace) -> int:
    topic = topic_of(args)

    def describe(cluster: Cluster) -> int:
        topics = [topic] if topic else sorted(cluster.list_topics())
        descriptions = [_describe_one(cluster, name) for name in topics]
        if args.under_replicated_partitions:
            for description in descriptions:
                description["partitions"] = [p for p in description["partitions"]
                                             if len(p["isr"]) < len(p["replicas"])]
        if args.replicas:
            for description in descriptions:
                shown = {p["partition"] for p in description["partitions"]}
                description["replica_states"] = [
                    r for r in cluster.describe_replicas(description["name"])
                    if r["partition"] in shown]
        if args.format == "json":
            echo(json.dumps(descriptions, indent=2))
        else:
            echo("\n\n".join(_render(d) for d in descriptions))
        return 0

    return _with_cluster(args, describe)


def _describe_one(cluster: Cluster, topic: str) -> dict[str, Any]:
    try:
        return cluster.describe_topic(topic)
    except UnknownTopicError:
        raise CliError(f"topic {topic!r} does not exist: `rafka topics list` shows those "
                       f"that do") from None


def _render(description: dict[str, Any]) -> str:
    partitions = description["partitions"]
    replication = max((len(p["replicas"]) for p in partitions), default=0)
    configs = ",".join(f"{k}={v}" for k, v in sorted(description["config"].items()))
    # Kafka's kafka-topics.sh --describe header, topic id included.
    header = (f"Topic: {description['name']}\tTopicId: {description.get('topic_id') or ''}\t"
              f"PartitionCount: {len(partitions)}\t"
              f"ReplicationFactor: {replication}\tConfigs: {configs}")
    if description.get("marked_for_deletion"):
        header += "\tMarkedForDeletion: true"
    rows = [[p["partition"], p["leader"] if p["leader"] >= 0 else "none", p["replicas"],
             p["isr"], p["leader_epoch"], p["high_watermark"]] for p in partitions]
    text = header + "\n" + table(
        ["PARTITION", "LEADER", "REPLICAS", "ISR", "EPOCH", "HIGH-WATERMARK"], rows)
    if "replica_states" in description:
        text += "\n\n" + table(
            ["PARTITION", "BROKER", "ROLE", "EPOCH", "LOG-END", "HIGH-WATERMARK", "FETCHING"],
            [[r["partition"], r["broker"], r["role"], r["leader_epoch"], r["log_end_offset"],
              r["high_watermark"], _fetching(r.get("fetching"))]
             for r in sorted(description["replica_states"],
                             key=lambda r: (r["partition"], r["broker"]))])
    return text


def _fetching(state: dict[str, Any] | None) -> str:
    """A follower's fetching in a few words: when its leader last answered a fetch of it,
    and what failed last."""
    if state is None:
        return "-"
    fetched = state["fetched_s_ago"]
    words = ["no fetch answered" if fetched is None else f"fetched {fetched:g} s ago"]
    if state["truncating"]:
        words.append("truncating")
    if state["last_error"]:
        words.append(state["last_error"])
    return "; ".join(words)


def _delete(args: argparse.Namespace) -> int:
    topic = required_topic_of(args)

    def delete(cluster: Cluster) -> int:
        try:
            wait_with_spinner(f"deleting {topic}", lambda: cluster.delete_topic(topic))
        except UnknownTopicError:
            raise CliError(f"topic {topic!r} does not exist: `rafka topics list` shows those "
                           f"that do") from None
        echo(f"deleted topic {topic!r}")
        return 0

    return _with_cluster(args, delete)


def _alter(args: argparse.Namespace) -> int:
    topic = required_topic_of(args)
    updates: dict[str, str | None] = dict(key_values(args.config, "--config"))
    for key in args.delete_config:
        if key in updates:
            raise CliError(f"{key!r} is both set (--config) and deleted (--delete-config)", 2)
        updates[key] = None
    if not updates and args.partitions is None:
        raise CliError("nothing to alter: give --config KEY=VALUE, --delete-config KEY or "
                       "--partitions N", 2)

    def alter(cluster: Cluster) -> int:
        if not cluster.topic_exists(topic):
            raise CliError(f"topic {topic!r} does not exist: `rafka topics list` shows those "
                           f"that do")
        if args.partitions is not None:
            _grow(cluster, topic, args.partitions)
        if updates:
            config = cluster.alter_topic_config(topic, updates)
            shown = ",".join(f"{k}={v}" for k, v in sorted(config.items())) or "(defaults)"
            echo(f"topic {topic!r} config: {shown}")
        return 0

    return _with_cluster(args, alter)


def _grow(cluster: Cluster, topic: str, partitions: int) -> None:
    # Kafka's --partitions is the new total, and so is add_partitions' count.
    wait_with_spinner(f"growing {topic} to {partitions} partitions",
                      lambda: cluster.add_partitions(topic, partitions))
    echo(f"topic {topic!r} has {partitions} partitions")
