"""A thread that runs submitted functions one at a time, in the order they were submitted.

Kazoo calls connection-state listeners on its connection thread, which must never block (it is
the thread that would deliver the answer a blocking ZooKeeper call waits for). So the store
runs its ZooKeeper follow-up work (re-reading watched znodes, re-registering, re-electing) on
one `SerialExecutor`, and the users' callbacks on another: callbacks then arrive in the order
the events happened, and a slow callback delays other callbacks but never the coordination work.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_STOP = object()


class SerialExecutor:
    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, function: Callable[..., object], *args: object) -> None:
        """Run `function(*args)` on this executor's thread after everything submitted before."""
        if not self._closed:
            self._queue.put((function, args))

    def on_own_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def close(self, timeout: float = 5.0) -> None:
        """Run what is queued, then stop the thread (not waiting when called from it)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        if not self.on_own_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            function, args = item
            try:
                function(*args)
            except Exception:
                # One failing callback must not stop the ones after it.
                log.exception("%s: %r failed", self.name, function)
