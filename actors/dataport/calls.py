"""How a client's requests reach the replica hosts (a producer's `produce`, a consumer's
`fetch`): the interface both transports keep (`HostCalls`), and the one a client's
`transport` setting picks (`host_calls`).

Each sends a request and hands back a key for it, waits until some of the keys in flight are
answered, and gives each answer (the host method's reply) or raises what went wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from rafka.actors.dataport.blocking_client import TcpCalls
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
