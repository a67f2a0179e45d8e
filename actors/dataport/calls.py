"""How a client's requests reach the replica hosts (a producer's `produce`, a consumer's
`fetch`): the interface both transports keep (`HostCalls`), and the one a client's
`transport` setting picks (`host_calls`).

Each sends a request and hands back a key for it, waits until some of the keys in flight are
answered, and gives each answer (the host method's reply) or raises what went wrong.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from rafka.actors.dataport.blocking_client import HostConnectionError, TcpCalls
from rafka.actors.dataport.ray_calls import RayCalls
from rafka.coordination.store import ClusterStore


class HostCalls(Protocol):
    """Requests to replica hosts, each known by the key `send` hands back."""

    def send(self, name: str, host: Any, method: str, arguments: tuple[Any, ...],
             timeout_s: float | None = None) -> Any:
        """Send `host.<method>(*arguments)` to the host called `name`; with `timeout_s`, an
        answer later than that may fail the request. The request's key."""
        ...

    def wait(self, keys: list[Any], timeout_s: float) -> list[Any]:
        """The keys answered (or failed), waiting up to `timeout_s` for the first."""
        ...

    def result(self, key: Any) -> Any:
        """The answer of a key `wait` returned (raises what went wrong)."""
        ...

    def abandon(self, key: Any) -> None:
        """A request whose answer nobody wants any more."""
        ...

    def wake(self) -> None:
        """End the `wait` under way (or the next one) early, where the transport can."""
        ...

    def close(self) -> None:
        ...


def host_calls(transport: str, request_timeout_ms: int, max_answer_bytes: int,
               zookeeper: Callable[[], ClusterStore | None] = lambda: None) -> HostCalls:
    """The calls of a client configured with `transport` ("tcp" or "ray"): connecting waits
    up to `request_timeout_ms`, and an answer may carry `max_answer_bytes` (and a batch per
    partition beyond). Over TCP, `zookeeper` gives the cluster's store, if the client has it,
    where a host's address is read when the host cannot say."""
    if transport == "tcp":
        return TcpCalls(request_timeout_ms / 1000, max_answer_bytes, zookeeper)
    return RayCalls()


def call_and_wait(calls: HostCalls, name: str, host: Any, method: str,
                  arguments: tuple[Any, ...], timeout_s: float) -> Any:
    """One request to a host over `calls`, and its answer, on the caller's thread (beside the
    requests in flight, whose answers stay for whoever waits on them); HostConnectionError if
    none came within `timeout_s`."""
    key = calls.send(name, host, method, arguments, timeout_s=timeout_s)
    deadline = time.monotonic() + timeout_s
    while key not in calls.wait([key], max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            calls.abandon(key)
            raise HostConnectionError(f"{name} did not answer {method} within {timeout_s:g} s")
    return calls.result(key)
