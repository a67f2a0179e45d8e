"""Typed errors of the coordination layer. Each message says what happened and what to do."""

from __future__ import annotations


class CoordinationError(Exception):
    """Base class of every error raised by `coordination`."""


class InvalidZooKeeperAddressError(CoordinationError, ValueError):
    """A ZooKeeper connection string is not `host:port[,host:port...][/chroot]`."""


class ZooKeeperServerError(CoordinationError):
    """The embedded ZooKeeper server could not be started or stopped."""


class JavaNotFoundError(ZooKeeperServerError):
    """No Java runtime to run the embedded ZooKeeper (or Spark) with."""


class ZooKeeperPortInUseError(ZooKeeperServerError):
    """The port asked for the embedded ZooKeeper is already bound by another process."""


class ZooKeeperStartError(ZooKeeperServerError):
    """The embedded ZooKeeper exited or did not answer in time; the message holds its log tail."""
