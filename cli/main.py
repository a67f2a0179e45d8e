"""The `rafka` command line.

    rafka up [--brokers N]              a cluster that outlives the command (embedded ZooKeeper,
                                        a Ray head, detached brokers); `rafka down` stops it
    rafka status                        brokers, controller, partitions, under-replicated ones
    rafka brokers list|add [--count N]  the brokers; start more (to grow the cluster)
    rafka topics create|list|describe|alter|delete
    rafka reassign --topic T --replicas 0,3 [--partition P] | --reassignment-json-file FILE
                                        move replicas between brokers; --verify says if done
    rafka produce TOPIC [--key-separator :] < lines
    rafka consume TOPIC --from-beginning [--max-messages N] [--format json]
    rafka groups list|describe
    rafka acls add|list|remove          ACLs, with kafka-acls.sh's options
    rafka users create|delete|list      users' SCRAM credentials (SASL listeners)
    rafka bench

    rafka zookeeper start --id N --servers H1:2888:3888,H2:2888:3888,H3:2888:3888
                                        one member of a ZooKeeper ensemble here, detached;
    rafka zookeeper stop|status         then `rafka up --zk H1:2181,H2:2181,H3:2181`;
                                        `run`: the same member in the foreground, for
                                        `rafka supervise` (cluster.yaml)

    rafka zookeeper credentials --generate
                                        credentials that `rafka up` guards the znodes with

    rafka supervise start NAME -- COMMAND [ARG...]
                                        keep COMMAND running here, detached: restarted
    rafka supervise stop|status [NAME]  whenever it exits (cluster.yaml's `ray start --block`)

    rafka demo                          the click-stream pipeline on the embedded stack

The commands live in `rafka.cli.commands`, one module each.

An expected error (a cluster that is not up, a topic that exists already, no Java) is one line on
stderr and exit code 1 (2 for a usage error); `--debug`
shows the traceback too.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from importlib.metadata import version

from rafka.cli.commands import register
from rafka.cli.commands.errors import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXPECTED_ERRORS,
    CliError,
)
from rafka.cli.commands.output import data_stream, reserved_stdout


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; given the `command` about to run, only its module is imported."""
    parser = argparse.ArgumentParser(
        prog="rafka",
        description="A distributed commit log in the design of Kafka, on Ray.",
    )
    parser.add_argument("--version", action="version", version=f"rafka {version('rafka')}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error too")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(commands, command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The global options take no values, so the first other word is the command.
    command = next((word for word in argv if not word.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _run(args)  # a show, not data: it prints as it likes
    # kazoo narrates its reconnections at INFO; a command reports failures as typed errors.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    with reserved_stdout():  # stdout is for the command's data only
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`rafka consume ... | head`): stop quietly. Point stdout at
        # /dev/null so that the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), data_stream().fileno())
        return 0
    except CliError as error:
        return _report(error, args, error.exit_code)
    except EXPECTED_ERRORS as error:
        return _report(error, args, EXIT_ERROR)


def _report(error: BaseException, args: argparse.Namespace, code: int) -> int:
    if args.debug:
        traceback.print_exception(error)
    print(f"rafka: error: {error}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
