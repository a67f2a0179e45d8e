"""The `rafka` command line.

Subcommands that need layers above `actors` (the demo needs Spark, from `pipelines`) are plugged
in through the `rafka.commands` entry-point group, so imports keep running one way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points, version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rafka",
        description="A distributed commit log in the design of Kafka, on Ray.",
    )
    parser.add_argument("--version", action="version", version=f"rafka {version('rafka')}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for plugin in sorted(entry_points(group="rafka.commands"), key=lambda entry: entry.name):
        plugin.load()(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
