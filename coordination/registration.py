"""Ephemeral registrations kept alive across sessions: brokers (`/brokers/ids/<id>`) and, through
`rafka.coordination.groups`, consumer-group members.

An ephemeral znode lives as long as the session that created it. After a connection loss
(SUSPENDED) the session, and the znode, usually survive: nothing is done, and the registration
stays registered. When the session expires the znode is gone: the registration reports
`registered == False` and calls `on_unregistered` (a broker must then hold no leadership), and as
soon as a new session is up it creates the znode again and calls `on_registered`. If another
live session holds the znode meanwhile, it waits (watching the znode) until it is released.

A first `register()` that finds the znode held by another live session fails with the typed
error of the registration (`BrokerIdInUseError`), as Kafka refuses a second broker with the
same `broker.id`.

Callbacks run on the store's event thread and must be quick (see `rafka.coordination.watches`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

from rafka.coordination import layout
from rafka.coordination.errors import (
    BrokerIdInUseError,
    CoordinationError,
    StaleVersionError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZooKeeperUnavailableError,
)
from rafka.coordination.models import BrokerInfo
from rafka.coordination.store import ClusterStore, SessionEvent, decode

log = logging.getLogger(__name__)

Hook = Callable[[], object]


class EphemeralRegistration:
    """An ephemeral znode that this process keeps registered in whatever its session is now.

    `on_registered()` is called after every registration, the first one included, and
    `on_unregistered()` whenever it stops being registered (expiry, `unregister()`, close).
    """

    def __init__(
        self,
        store: ClusterStore,
        path: str,
        value: Any,
        *,
        on_registered: Hook | None = None,
        on_unregistered: Hook | None = None,
    ) -> None:
        self.store = store
        self.path = path
        self._value = value
        self._on_registered = on_registered
        self._on_unregistered = on_unregistered
        self._lock = threading.Lock()
        self._active = False
        self._session: int | None = None  # the session our znode lives in, if registered
        self._epoch: int | None = None

    # --- what subclasses say about a conflict ---------------------------------------------------

    def _conflict_error(self, stat: ZnodeStat) -> CoordinationError:
        return ZNodeExistsError(
            f"{self.path} is held by another live ZooKeeper session "
            f"(0x{stat.ephemeralOwner:x}): stop the other holder, or wait for its session to "
            f"time out ({self.store.session_timeout_ms} ms)"
        )

    # --- public ---------------------------------------------------------------------------------

    @property
    def registered(self) -> bool:
        """True while our znode exists in our current session (also while merely suspended).

        False after the session expired and until the znode is created again: a broker must
        hold no leadership meanwhile.
        """
        return self._session is not None and self._session == self.store.session_id

    @property
    def epoch(self) -> int | None:
        """The czxid of our znode: it changes at every registration (Kafka's broker epoch)."""
        return self._epoch if self.registered else None

    def register(self) -> EphemeralRegistration:
        """Create the znode now (raising the typed conflict error if another session holds it),
        and keep it registered across session expiry until `unregister()`."""
        with self._lock:
            if self._active:
                return self
            self._active = True
        self.store.add_session_listener(self._on_session)
        try:
            holder = self._create_or_find()
            if holder is not None:
                raise self._conflict_error(holder)
        except BaseException:
            with self._lock:
                self._active = False
            self.store.remove_session_listener(self._on_session)
            raise
        return self

    def unregister(self) -> None:
        """Delete our znode (only if it is ours) and stop registering it again."""
        with self._lock:
            was_registered = self.registered
            self._active = False
            session, self._session = self._session, None
        self.store.remove_session_listener(self._on_session)
        if session is not None and self.store.connected:
            self.store.delete_if_owned(self.path, session)
        if was_registered:
            self._notify(self._on_unregistered)

    close = unregister

    def update(self, value: Any) -> None:
        """Change the registered value (kept for re-registration too)."""
        self._value = value
        session = self._session
        if session is None:
            return
        with contextlib.suppress(ZNodeMissingError, StaleVersionError):
            stat = self.store.stat(self.path)
            if stat is not None and stat.ephemeralOwner == session:
                self.store.write(self.path, value, stat.version)

    # --- machinery ------------------------------------------------------------------------------

    def _create_or_find(self) -> ZnodeStat | None:
        """Make sure our znode exists; return None if it is ours, else the holder's stat."""
        for _ in range(10):
            stat = self.store.stat(self.path, self._on_node_event)
            if stat is None:
                with contextlib.suppress(ZNodeExistsError):
                    self.store.create(self.path, self._value, ephemeral=True)
                stat = self.store.stat(self.path, self._on_node_event)
            if stat is None:
                continue  # created and deleted in between: try again
            # Compared with the session of now: a request may have waited for a new session.
            session = self.store.session_id
            if stat.ephemeralOwner == session:
                self._mark_registered(session, stat.czxid)
                return None
            return stat
        raise ZooKeeperUnavailableError(f"{self.path} keeps disappearing: try again later")

    def _mark_registered(self, session: int | None, epoch: int) -> None:
        with self._lock:
            # A stale success from a session that ended meanwhile must not count.
            if not self._active or session is None or session != self.store.session_id:
                return
            was_registered = self.registered
            self._session = session
            self._epoch = epoch
        if not was_registered:
            log.info("registered %s (epoch %d)", self.path, epoch)
            self._notify(self._on_registered)

    def _mark_unregistered(self, reason: str) -> None:
        with self._lock:
            was_registered = self._session is not None
            self._session = None
        if was_registered:
            log.info("%s is no longer registered: %s", self.path, reason)
            self._notify(self._on_unregistered)

    def _reconcile(self) -> None:
        """Worker thread: make the znode ours again if it can be."""
        if not self._active or not self.store.connected:
            return
        try:
            holder = self._create_or_find()
        except ZooKeeperUnavailableError:
            return  # the next session event brings us back
        except CoordinationError:
            log.exception("could not register %s", self.path)
            return
        if holder is not None:
            self._mark_unregistered("another session holds it")
            # The holder's znode is watched: we try again when it goes.
            log.warning("%s; waiting for it to be released", self._conflict_error(holder))

    def _on_session(self, event: SessionEvent) -> None:
        # Kazoo's connection thread: no ZooKeeper calls here.
        if event in (SessionEvent.EXPIRED, SessionEvent.CLOSED):
            self._mark_unregistered(f"session {event.value}")
        elif event in (SessionEvent.CONNECTED, SessionEvent.RECONNECTED) and self._active:
            self.store.run_in_worker(self._reconcile)

    def _on_node_event(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE and self._active:
            self.store.run_in_worker(self._reconcile)

    def _notify(self, hook: Hook | None) -> None:
        if hook is not None:
            self.store.run_callback(hook)


class BrokerRegistration(EphemeralRegistration):
    """A broker's ephemeral `/brokers/ids/<id>`, registered again after every session expiry.

    >>> registration = BrokerRegistration(store, BrokerInfo(1, "broker-1", "10.0.0.5"),
    ...                                   on_unregistered=drop_leadership).register()
    """

    def __init__(
        self,
        store: ClusterStore,
        info: BrokerInfo,
        *,
        on_registered: Hook | None = None,
        on_unregistered: Hook | None = None,
    ) -> None:
        super().__init__(
            store,
            layout.broker_path(info.node_id),
            info.to_json(),
            on_registered=on_registered,
            on_unregistered=on_unregistered,
        )
        self._info = info

    @property
    def info(self) -> BrokerInfo:
        return self._info

    @property
    def broker_id(self) -> int:
        return self._info.node_id

    @property
    def broker_epoch(self) -> int | None:
        """Kafka's broker epoch: the czxid of the current registration, None if unregistered."""
        return self.epoch

    def register(self) -> BrokerRegistration:
        super().register()
        return self

    def update_info(self, info: BrokerInfo) -> None:
        """Change what the registration says (same broker id)."""
        if info.node_id != self._info.node_id:
            raise ValueError(
                f"cannot move registration of broker {self._info.node_id} to id {info.node_id}: "
                f"unregister and register a new BrokerRegistration instead"
            )
        self._info = info
        self.update(info.to_json())

    def _conflict_error(self, stat: ZnodeStat) -> CoordinationError:
        holder = ""
        with contextlib.suppress(CoordinationError, ValueError, KeyError, TypeError):
            other = BrokerInfo.from_json(decode(self.store.get(self.path)[0]))
            holder = f" (actor {other.actor!r} on host {other.host!r})"
        return BrokerIdInUseError(
            f"broker id {self.broker_id} is already registered by another live broker{holder}, "
            f"ZooKeeper session 0x{stat.ephemeralOwner:x}: give this broker another broker id, "
            f"or stop the other one; a crashed broker's registration disappears when its "
            f"session times out (about {self.store.session_timeout_ms} ms)"
        )


def read_brokers(store: ClusterStore) -> dict[int, BrokerInfo]:
    """The live brokers now, `{id: BrokerInfo}` with their broker epochs."""
    brokers: dict[int, BrokerInfo] = {}
    for name in store.children_or_empty(layout.BROKER_IDS):
        with contextlib.suppress(ZNodeMissingError):  # it left in between
            data, stat = store.get(f"{layout.BROKER_IDS}/{name}")
            brokers[int(name)] = BrokerInfo.from_json(decode(data), epoch=stat.czxid)
    return brokers
