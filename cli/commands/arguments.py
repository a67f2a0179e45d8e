"""Options that several commands take, declared and read in one place."""

from __future__ import annotations

import argparse

from rafka.cli.commands import state as cluster_state
from rafka.cli.commands.errors import EXIT_USAGE, CliError, checked_topic


def add_command(commands: argparse._SubParsersAction, name: str, *, help: str,
                doc: str) -> argparse.ArgumentParser:
    """A command's parser: `help` in `rafka --help`, and the second paragraph of the command
    module's docstring `doc` (the first names the command) as its own --help's description."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=doc.split("\n\n")[1])
    return parser


def add_name_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--name`: which cluster, as `rafka up` named it."""
    parser.add_argument("--name", default=cluster_state.default_name(),
                        help="the cluster's name (default: $RAFKA_CLUSTER or 'rafka')")


def add_topic_argument(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """The topic, as `--topic NAME` (Kafka's tools) or as a shorter positional name."""
    parser.add_argument("topic_name", nargs="?", metavar="TOPIC", help="the topic")
    parser.add_argument("--topic", help="the topic (Kafka's spelling)")
    parser.set_defaults(topic_required=required)


def topic_of(args: argparse.Namespace) -> str | None:
    """The topic given by `add_topic_argument`'s options, checked before anything connects."""
    if args.topic and args.topic_name and args.topic != args.topic_name:
        raise CliError(f"two topics given ({args.topic_name!r} and --topic {args.topic!r})",
                       EXIT_USAGE)
    topic = args.topic or args.topic_name
    if topic is None and args.topic_required:
        raise CliError("which topic? give its name (or --topic NAME)", EXIT_USAGE)
    return None if topic is None else checked_topic(topic)


def required_topic_of(args: argparse.Namespace) -> str:
    """`topic_of` for a command whose topic `add_topic_argument` made required."""
    topic = topic_of(args)
    assert topic is not None  # topic_of refuses a missing required topic
    return topic
