"""Which TCP connections a process holds: how a test sees which way a request went (over a
port rafka opened, or not at all)."""

from __future__ import annotations

import psutil


def connections_to(pid: int, port: int) -> set[int]:
    """The local ports of `pid`'s established TCP connections to `port`."""
    return {connection.laddr.port
            for connection in psutil.Process(pid).net_connections(kind="tcp")
            if connection.raddr and connection.raddr.port == port
            and connection.status == psutil.CONN_ESTABLISHED}
