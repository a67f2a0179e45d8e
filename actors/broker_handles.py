"""The actor handles of a cluster's brokers, looked up and warmed while Ray's GCS answers.

Looking an actor up by name asks the GCS, and so does the first call through a new handle (it
learns where the actor runs). The GCS lives on Ray's head, which may be restarting while every
broker and ZooKeeper are fine; a controller elected then must still reach every broker. So each
broker keeps these handles warm as brokers come and go, and the controller it may host uses
them rather than asking Ray at the moment it needs them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import ray

from rafka.actors.naming import broker_name

log = logging.getLogger(__name__)

# How long warming one broker's handle may take (a lookup and a ping).
WARM_TIMEOUT_S = 10.0


class BrokerHandles:
    """Broker actor handles by broker id, for one Ray namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._handles: dict[int, Any] = {}

    def get(self, broker_id: int) -> Any | None:
        """The broker's actor; looked up now (asking the GCS) if it is not warm. None if Ray
        knows no actor of that name."""
        handle = self._handles.get(broker_id)
        if handle is None:
            try:
                handle = ray.get_actor(broker_name(broker_id), namespace=self.namespace)
            except ValueError:
                return None
            self._handles[broker_id] = handle
        return handle

    def drop(self, broker_id: int) -> None:
        """Forget a broker's handle: it registered anew (it may be another actor) or left."""
        self._handles.pop(broker_id, None)

    async def warm(self, broker_ids: Iterable[int]) -> None:
        """Look up, and call once, each of these brokers not warm yet, off the event loop."""
        for broker_id in sorted(set(broker_ids) - set(self._handles)):
            try:
                handle = await asyncio.wait_for(asyncio.to_thread(
                    ray.get_actor, broker_name(broker_id), namespace=self.namespace),
                    WARM_TIMEOUT_S)
                await asyncio.wait_for(handle.ping.remote(), WARM_TIMEOUT_S)
            except Exception as error:  # not up yet, or gone: the next change tries again
                log.debug("could not warm the handle of broker %d: %r", broker_id, error)
                continue
            self._handles.setdefault(broker_id, handle)
