"""The built-in subcommands of the `rafka` command line, one module per command.

Each module has `register(subparsers)`, which adds its parser and sets `run`, a function of the
parsed arguments that returns the exit code. Shared parts: `connection` (how a command finds a
running cluster), `state` (what `rafka up` records for later commands), `progress` and `output`.
"""

from __future__ import annotations

import argparse
import importlib

COMMANDS = ("up", "down", "status", "brokers", "topics", "reassign", "produce", "consume",
            "groups", "acls", "users", "bench", "demo", "zookeeper", "supervise", "quotas")


def register(commands: argparse._SubParsersAction, name: str | None = None) -> None:
    """Add every command's parser; given the `name` about to run, import only that one (the
    demo's module imports RayDP, most of a second, which no other command needs)."""
    for command in COMMANDS if name not in COMMANDS else (name,):
        importlib.import_module(f"rafka.cli.commands.{command}").register(commands)
