"""The built-in subcommands of the `rafka` command line, one module per command.

Each module has `register(subparsers)`, which adds its parser and sets `run`, a function of the
parsed arguments that returns the exit code. Shared parts: `connection` (how a command finds a
running cluster), `state` (what `rafka up` records for later commands), `progress` and `output`.
"""

from __future__ import annotations

import argparse
import importlib

BUILTIN = ("up", "down", "status", "brokers", "topics", "reassign", "produce", "consume",
           "groups", "bench")


def register_all(commands: argparse._SubParsersAction) -> None:
    for name in BUILTIN:
        importlib.import_module(f"actors.commands.{name}").register(commands)
