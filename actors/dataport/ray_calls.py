"""A client's calls to replica hosts as Ray actor calls (`transport=ray`), behind the same
interface as the data port's `TcpCalls` (`rafka.actors.dataport.calls.HostCalls`)."""

from __future__ import annotations

from typing import Any

import ray


class RayCalls:
    """Each request an actor call; the key is its object ref."""

    def send(self, name: str, host: Any, method: str, arguments: tuple[Any, ...],
             timeout_s: float | None = None) -> Any:
        return getattr(host, method).remote(*arguments)

    def wait(self, keys: list[Any], timeout_s: float) -> list[Any]:
        """The keys answered, waiting up to `timeout_s` for the first."""
        ready, _ = ray.wait(keys, num_returns=1, timeout=timeout_s, fetch_local=True)
        if not ready:
            return []
        done, _ = ray.wait(keys, num_returns=len(keys), timeout=0, fetch_local=True)
        return done

    def result(self, key: Any) -> Any:
        return ray.get(key)

    def abandon(self, key: Any) -> None:
        pass  # its answer is dropped with the ref

    def wake(self) -> None:
        pass  # Ray's wait cannot be woken: it waits out its timeout

    def close(self) -> None:
        pass
