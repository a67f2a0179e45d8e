"""Watches as callbacks that survive reconnects and session expiry.

A ZooKeeper watch fires once, and kazoo forgets every watch when the connection drops (it does
not re-send them on reconnect), and the server forgets them when the session expires. A `Watch`
here therefore re-reads its znode, and sets a new watch, after every event and after every
(re)connection, and calls its callback with the current value whenever that differs from the
last value delivered. The first call comes soon after `start()`, with the value at that time.

Threading: callbacks run on the store's event thread (`ClusterStore.run_callback`), one at a
time, in the order the changes were seen; never on the caller's thread. They must be quick: an
actor hands the value to its own loop and returns. They may call the store synchronously.

Only the latest value is guaranteed: two changes in quick succession may arrive as one call,
as with any ZooKeeper watch. Kafka's controller works the same way (it re-reads on each event).
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from kazoo.protocol.states import EventType, WatchedEvent

from rafka.coordination import layout
from rafka.coordination.errors import (
    CoordinationError,
    ZNodeMissingError,
    ZooKeeperUnavailableError,
)
from rafka.coordination.models import (
    BrokerInfo,
    ControllerInfo,
    PartitionState,
    TopicAssignment,
    Versioned,
)
from rafka.coordination.store import ClusterStore, SessionEvent, decode

log = logging.getLogger(__name__)

T = TypeVar("T")
Callback = Callable[[T], object]
ZooKeeperWatcher = Callable[[WatchedEvent], None]


class Watch(abc.ABC, Generic[T]):
    """Calls `callback(value)` with the current value of something in ZooKeeper, on every change.

    Create it through `ClusterWatches`; `cancel()` stops it.
    """

    def __init__(self, store: ClusterStore, path: str, callback: Callback[T]) -> None:
        self.store = store
        self.path = path
        self._callback = callback
        self._lock = threading.Lock()
        self._cancelled = False
        self._delivered = False
        self._identity: Hashable = None

    def start(self) -> Watch[T]:
        self.store.add_session_listener(self._on_session)
        self.store.run_in_worker(self._refresh)
        return self

    def cancel(self) -> None:
        """No more callbacks after this returns (one already queued is dropped)."""
        self._cancelled = True
        self.store.remove_session_listener(self._on_session)

    @property
    def active(self) -> bool:
        return not self._cancelled

    @abc.abstractmethod
    def _read(self, watcher: ZooKeeperWatcher) -> tuple[T, Hashable]:
        """Read the current value, leaving `watcher` set on the znode; return (value, identity).

        The identity decides whether the value changed since the last delivery.
        """

    def _refresh(self) -> None:
        if self._cancelled or not self.store.connected:
            return  # a session event will call us again
        try:
            value, identity = self._read(self._on_zookeeper_event)
        except ZooKeeperUnavailableError:
            return  # the reconnect (or new session) event refreshes again
        except CoordinationError:
            log.exception("watch on %s could not read it", self.path)
            return
        with self._lock:
            if self._cancelled or (self._delivered and identity == self._identity):
                return
            self._delivered = True
            self._identity = identity
        self.store.run_callback(self._deliver, value)

    def _deliver(self, value: T) -> None:
        if not self._cancelled:
            self._callback(value)

    def _on_zookeeper_event(self, event: WatchedEvent) -> None:
        # Kazoo's callback thread. Kazoo also fires every watch with a NONE event when the
        # connection drops; the session listener handles that, so ignore it here.
        if event.type != EventType.NONE and not self._cancelled:
            self.store.run_in_worker(self._refresh)

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.CONNECTED, SessionEvent.RECONNECTED):
            self.store.run_in_worker(self._refresh)

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "active"
        return f"{type(self).__name__}({self.path!r}, {state})"


class DataWatch(Watch[T]):
    """The value of one znode, parsed by `parse`, as `Versioned(value, version)`; None if absent."""

    def __init__(
        self,
        store: ClusterStore,
        path: str,
        callback: Callback[Versioned[Any] | None],
        parse: Callable[[Any], Any] = lambda value: value,
    ) -> None:
        super().__init__(store, path, callback)  # type: ignore[arg-type]
        self._parse = parse

    def _read(self, watcher: ZooKeeperWatcher) -> tuple[Any, Hashable]:
        while True:
            try:
                data, stat = self.store.get(self.path, watcher)
            except ZNodeMissingError:
                # An exists-watch fires when the znode is created.
                if self.store.stat(self.path, watcher) is None:
                    return None, None
                continue  # created in between: read it
            # czxid tells a re-created znode from the old one at the same version.
            return Versioned(self._parse(decode(data)), stat.version), (stat.czxid, stat.version)


class ChildrenWatch(Watch[T]):
    """The children of one znode, turned into a value by `transform`; no children if absent."""

    def __init__(
        self,
        store: ClusterStore,
        path: str,
        callback: Callback[Any],
        transform: Callable[[list[str]], Any] = list,
    ) -> None:
        super().__init__(store, path, callback)
        self._transform = transform

    def _children(self, watcher: ZooKeeperWatcher) -> list[str]:
        while True:
            try:
                return self.store.children(self.path, watcher)
            except ZNodeMissingError:
                # A parent not created yet (a group without members): watch for its creation.
                if self.store.stat(self.path, watcher) is None:
                    return []

    def _read(self, watcher: ZooKeeperWatcher) -> tuple[Any, Hashable]:
        value = self._transform(self._children(watcher))
        identity = tuple(sorted(value)) if isinstance(value, (set, frozenset)) else repr(value)
        return value, identity


class BrokersWatch(ChildrenWatch[dict[int, BrokerInfo]]):
    """The live brokers, `{id: BrokerInfo}`, each with its broker epoch (registration czxid).

    A broker that re-registers (a bounce, or after its session expired) shows up with a new
    epoch even when the set of ids did not change, as Kafka's controller needs (KIP-380). A
    registration whose content changes (a broker's new advertised listener) is delivered too:
    each registration is watched, as Kafka's controller watches each for BrokerModifications.
    """

    def __init__(self, store: ClusterStore, callback: Callback[dict[int, BrokerInfo]]) -> None:
        super().__init__(store, layout.BROKER_IDS, callback)

    def _read(self, watcher: ZooKeeperWatcher) -> tuple[Any, Hashable]:
        brokers: dict[int, BrokerInfo] = {}
        versions: dict[int, int] = {}
        for name in self._children(watcher):
            try:
                data, stat = self.store.get(f"{layout.BROKER_IDS}/{name}", watcher)
                brokers[int(name)] = BrokerInfo.from_json(decode(data), epoch=stat.czxid)
                versions[int(name)] = stat.version
            except ZNodeMissingError:
                continue  # it left in between; the children watch fires again
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring malformed broker registration %s/%s", layout.BROKER_IDS, name)
        identity = tuple(sorted((b, info.epoch, versions[b]) for b, info in brokers.items()))
        return brokers, identity


def _names(children: list[str]) -> set[str]:
    return set(children)


def _broker_ids(children: list[str]) -> set[int]:
    return {int(name) for name in children if name.isdigit()}


def _isr_notifications(children: list[str]) -> list[str]:
    return sorted(c for c in children if c.startswith(layout.ISR_CHANGE_PREFIX))


def _config(value: Any) -> dict[str, str]:
    return dict((value or {}).get("config", {}))


class ClusterWatches:
    """Factories of the watches the actor layer needs; each returns a started `Watch`.

    Callbacks run on the store's event thread and must be quick (see the module docstring).
    """

    def __init__(self, store: ClusterStore) -> None:
        self.store = store

    def watch_brokers(self, callback: Callback[dict[int, BrokerInfo]]) -> Watch[Any]:
        """Brokers joining and leaving: `{broker id: BrokerInfo}` of the live brokers."""
        return BrokersWatch(self.store, callback).start()

    def watch_broker_ids(self, callback: Callback[set[int]]) -> Watch[Any]:
        """Only the ids of the live brokers (cheaper than `watch_brokers`)."""
        return ChildrenWatch(self.store, layout.BROKER_IDS, callback, _broker_ids).start()

    def watch_topics(self, callback: Callback[set[str]]) -> Watch[Any]:
        """Topics created and deleted: the set of topic names."""
        return ChildrenWatch(self.store, layout.TOPICS, callback, _names).start()

    def watch_topic_assignment(
        self, topic: str, callback: Callback[Versioned[TopicAssignment] | None]
    ) -> Watch[Any]:
        """A topic's replica assignment, hence its partition count; None once deleted."""
        path = layout.topic_path(topic)
        return DataWatch(self.store, path, callback, TopicAssignment.from_json).start()

    def watch_partition_state(
        self, topic: str, partition: int, callback: Callback[Versioned[PartitionState] | None]
    ) -> Watch[Any]:
        """A partition's leader, leader epoch and ISR; None until the controller writes it."""
        path = layout.partition_state_path(topic, partition)
        return DataWatch(self.store, path, callback, PartitionState.from_json).start()

    def watch_topic_config(
        self, topic: str, callback: Callback[Versioned[dict[str, str]] | None]
    ) -> Watch[Any]:
        """A topic's config overrides."""
        path = layout.topic_config_path(topic)
        return DataWatch(self.store, path, callback, _config).start()

    def watch_broker_config(
        self, broker_id: int, callback: Callback[Versioned[dict[str, str]] | None]
    ) -> Watch[Any]:
        """A broker's dynamic settings (`rafka.coordination.broker_config`)."""
        path = layout.broker_config_path(broker_id)
        return DataWatch(self.store, path, callback, _config).start()

    def watch_group_members(self, group: str, callback: Callback[set[str]]) -> Watch[Any]:
        """The member ids of a consumer group (empty while the group has none)."""
        path = layout.group_ids_path(group)
        return ChildrenWatch(self.store, path, callback, _names).start()

    def watch_isr_change_notifications(self, callback: Callback[list[str]]) -> Watch[Any]:
        """The pending ISR change notifications, oldest first, by name.

        The controller reads them with `PartitionStateStore.read_isr_change_notifications`
        and deletes them when handled (`delete_isr_change_notifications`).
        """
        path = layout.ISR_CHANGE_NOTIFICATION
        return ChildrenWatch(self.store, path, callback, _isr_notifications).start()

    def watch_topic_deletions(self, callback: Callback[set[str]]) -> Watch[Any]:
        """Topics whose deletion was requested (`/admin/delete_topics`)."""
        return ChildrenWatch(self.store, layout.DELETE_TOPICS, callback, _names).start()

    def watch_controller(self, callback: Callback[Versioned[ControllerInfo] | None]) -> Watch[Any]:
        """Who the controller is; None while there is none."""
        path = layout.CONTROLLER
        return DataWatch(self.store, path, callback, ControllerInfo.from_json).start()

    def watch_partition_reassignment(self, callback: Callback[Versioned[Any] | None]) -> Watch[Any]:
        """The pending reassignment request (`/admin/reassign_partitions`, raw JSON); None when
        there is none."""
        return DataWatch(self.store, layout.REASSIGN_PARTITIONS, callback).start()
