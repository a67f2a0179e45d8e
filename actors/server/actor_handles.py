"""The handles of the actors a replica host calls (its broker, the leader hosts its fetchers
follow), each looked up once by name. On the host's event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.exceptions import ActorDiedError


class ActorHandles:
    """Ray actor handles by name, in one namespace, looked up once and kept."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._handles: dict[str, Any] = {}

    def put(self, name: str, handle: Any) -> None:
        self._handles[name] = handle

    async def get(self, name: str) -> Any:
        """The actor called `name`, looked up once. The lookup asks Ray's GCS, which may be
        down (its head restarting) and answer late: it runs off the event loop, so that only
        what needs this actor waits, not every replica of the host."""
        handle = self._handles.get(name)
        if handle is None:
            handle = await asyncio.to_thread(ray.get_actor, name, namespace=self.namespace)
            self._handles[name] = handle
        return handle

    def forget_if_dead(self, name: str, error: BaseException) -> None:
        """Drop a handle whose actor died for good (one of that name made since is another).
        Other failures keep it: a lookup asks Ray's GCS, which may be down while the actor
        is fine, and a handle stays good across Ray's restarts of its actor."""
        if isinstance(error, ActorDiedError):
            self._handles.pop(name, None)
