"""How a server actor sees its own event loop held: a task that sleeps a moment at a time and
logs (info) when it woke much later than it asked. Everything a broker or a replica host does
runs on that loop, so a call that blocks it (a synchronous read, a long computation) delays
every answer at once; without this, a post-mortem sees only the callers' time-outs."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)

# How often the watch wakes, and how late it must wake to say so.
INTERVAL_S = 0.5
REPORTED_AFTER_S = 1.0


def watch_for_stalls(who: str) -> asyncio.Task | None:
    """Start watching the running loop, if its lines would be logged (RAFKA_LOG_LEVEL info or
    debug; an idle process otherwise wakes for nothing); `who` names the actor in them."""
    if not log.isEnabledFor(logging.INFO):
        return None
    return asyncio.get_running_loop().create_task(_watch(who))


async def _watch(who: str) -> None:
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + INTERVAL_S
        await asyncio.sleep(INTERVAL_S)
        late_s = loop.time() - due
        if late_s > REPORTED_AFTER_S:  # held by a call, or the whole process paused
            log.info("%s: its event loop was held %.1f s", who, late_s)
