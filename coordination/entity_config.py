"""Client entities' configs in ZooKeeper: Kafka's `/config/users`, `/config/clients` and
`/config/users/<user>/clients/<client-id>` (KIP-55 quotas, KIP-554 SCRAM credentials).

Each entity's znode holds `{"version": 1, "config": {...}}`, as Kafka writes it, and every change
is announced by a sequential `/config/changes/config_change_<seq>` holding
`{"version": 2, "entity_path": "users/alice"}`, as Kafka's `ZkConfigChangeNotifier` writes it:
a broker watches the notifications (`EntityConfigWatch`) and re-reads only the entities they
name, so it learns of a change without a restart. Names are sanitised into znode names as
Kafka's `Sanitizer` does (URL encoding), so `User:CN=app,O=team` is one znode; `<default>`
stays as it is, Kafka's name for the entity every user or client falls back to.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from rafka.coordination import layout
from rafka.coordination.config_znodes import alter_config_znode, read_config_znode
from rafka.coordination.models import Versioned
from rafka.coordination.store import ClusterStore
from rafka.coordination.watches import ChildrenWatch, Watch

log = logging.getLogger(__name__)

USERS = "users"
CLIENTS = "clients"
DEFAULT_ENTITY = "<default>"
CHANGE_NOTIFICATION_VERSION = 2
# Notifications kept after a change: enough that a broker a few changes behind still reads
# each (it re-reads everything after a new ZooKeeper session anyway), few enough that the
# znode's children stay cheap to list.
NOTIFICATIONS_KEPT = 100


class Entity(NamedTuple):
    """A client entity: `users/alice`, `clients/app`, or a user's client `users/alice/clients/app`
    (`user` and `client_id` both set). Either name may be `DEFAULT_ENTITY`."""

    user: str | None = None
    client_id: str | None = None

    @property
    def path(self) -> str:
        """The entity path, as in Kafka's change notifications: `users/alice`."""
        parts = []
        if self.user is not None:
            parts.append(f"{USERS}/{sanitize(self.user)}")
        if self.client_id is not None:
            parts.append(f"{CLIENTS}/{sanitize(self.client_id)}")
        if not parts:
            raise ValueError("an entity names a user, a client id, or both")
        return "/".join(parts)

    @classmethod
    def from_path(cls, entity_path: str) -> Entity:
        """The entity of an entity path (`users/alice/clients/app`); ValueError if it is none."""
        parts = entity_path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == USERS:
            return cls(user=desanitize(parts[1]))
        if len(parts) == 2 and parts[0] == CLIENTS:
            return cls(client_id=desanitize(parts[1]))
        if len(parts) == 4 and parts[0] == USERS and parts[2] == CLIENTS:
            return cls(user=desanitize(parts[1]), client_id=desanitize(parts[3]))
        raise ValueError(f"{entity_path!r} is not an entity path such as 'users/alice', "
                         f"'clients/app' or 'users/alice/clients/app'")


def sanitize(name: str) -> str:
    """A user or client id as a znode name (Kafka's `Sanitizer.sanitize`: URL encoding)."""
    if not name:
        raise ValueError("an entity name must not be empty")
    if name == DEFAULT_ENTITY:
        return name
    if name in (".", ".."):
        return name.replace(".", "%2E")  # ZooKeeper refuses these as a path's part
    return urllib.parse.quote(name, safe="")


def desanitize(name: str) -> str:
    """The user or client id a znode name stands for."""
    return name if name == DEFAULT_ENTITY else urllib.parse.unquote(name)


def read_entity_config(store: ClusterStore, entity: Entity) -> Versioned[dict[str, str]]:
    """The entity's config with its znode version (-1 and none if never set)."""
    return read_config_znode(store, layout.entity_config_path(entity.path))


def alter_entity_config(store: ClusterStore, entity: Entity,
                        updates: Mapping[str, object | None]) -> Versioned[dict[str, str]]:
    """Set keys of an entity's config (a value of None deletes one), announce the change, and
    return the whole config. Concurrent changes of different keys are all kept; an entity
    left with no keys keeps its (empty) znode, as Kafka's does."""
    written = alter_config_znode(store, layout.entity_config_path(entity.path), updates,
                                 f"the config of {entity.path}")
    _announce(store, entity)
    return written


def list_entities(store: ClusterStore, entity_type: str = USERS) -> list[Entity]:
    """The entities of a type (`users` or `clients`) that have a config znode, sorted; for
    users, each user's clients too (`Entity(user, client_id)`)."""
    if entity_type not in layout.ENTITY_CONFIGS:
        raise ValueError(f"entity type {entity_type!r}: expected one of "
                         f"{', '.join(layout.ENTITY_CONFIGS)}")
    found: list[Entity] = []
    for name in sorted(store.children_or_empty(f"{layout.CONFIG}/{entity_type}")):
        if entity_type == CLIENTS:
            found.append(Entity(client_id=desanitize(name)))
            continue
        user = desanitize(name)
        found.append(Entity(user=user))
        clients = store.children_or_empty(f"{layout.CONFIG}/{USERS}/{name}/{CLIENTS}")
        found.extend(Entity(user, desanitize(client)) for client in sorted(clients))
    return found


def read_all_entity_configs(store: ClusterStore) -> dict[Entity, dict[str, str]]:
    """Every entity's config, users' and clients' alike."""
    entities = [entity for kind in layout.ENTITY_CONFIGS for entity in list_entities(store, kind)]
    return {entity: read_entity_config(store, entity).value for entity in entities}


def _announce(store: ClusterStore, entity: Entity) -> None:
    """Write the change notification of `entity`, and drop the oldest beyond NOTIFICATIONS_KEPT."""
    created = store.create(f"{layout.CONFIG_CHANGES}/{layout.CONFIG_CHANGE_PREFIX}",
                           {"version": CHANGE_NOTIFICATION_VERSION, "entity_path": entity.path},
                           sequential=True)
    newest = _sequence(created.rsplit("/", 1)[-1])
    for name in store.children_or_empty(layout.CONFIG_CHANGES):
        sequence = _sequence(name)
        if sequence is not None and newest is not None and sequence <= newest - NOTIFICATIONS_KEPT:
            store.delete(f"{layout.CONFIG_CHANGES}/{name}")


def _sequence(name: str) -> int | None:
    digits = name[len(layout.CONFIG_CHANGE_PREFIX):]
    if not name.startswith(layout.CONFIG_CHANGE_PREFIX) or not digits.isdigit():
        return None
    return int(digits)


EntityConfigCallback = Callable[[Entity, dict[str, str]], object]


class EntityConfigWatch:
    """Calls `callback(entity, config)` for every entity when it starts (and after each new
    ZooKeeper session), then for each entity a change notification names: Kafka's
    `ZkConfigChangeNotifier` listener side. Callbacks run on the store's event thread, one at
    a time, and must be quick; an entity whose znode is gone comes with an empty config."""

    def __init__(self, store: ClusterStore, callback: EntityConfigCallback) -> None:
        self.store = store
        self._callback = callback
        self._lock = threading.Lock()
        self._last_seen: int | None = None  # the newest notification handled
        self._session: int | None = None
        self._watch: Watch[Any] | None = None

    def start(self) -> EntityConfigWatch:
        self._watch = ChildrenWatch(self.store, layout.CONFIG_CHANGES, self._on_notifications,
                                    sorted).start()
        return self

    def cancel(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    def _on_notifications(self, names: list[str]) -> None:
        sequences = sorted(s for s in map(_sequence, names) if s is not None)
        with self._lock:
            fresh_session = self._session != self.store.session_id
            if fresh_session or self._last_seen is None:
                # Changes may have been missed while there was no session: read everything.
                self._session = self.store.session_id
                self._last_seen = sequences[-1] if sequences else -1
                for entity, config in read_all_entity_configs(self.store).items():
                    self._callback(entity, config)
                return
            new = [s for s in sequences if s > self._last_seen]
            if new:
                self._last_seen = new[-1]
        for sequence in new:
            self._apply(f"{layout.CONFIG_CHANGES}/{layout.CONFIG_CHANGE_PREFIX}{sequence:010d}")

    def _apply(self, notification: str) -> None:
        found = self.store.read_optional(notification)
        if found is None:
            return  # already dropped: a newer one names what still matters
        try:
            entity = Entity.from_path(str((found.value or {})["entity_path"]))
        except (KeyError, TypeError, ValueError):
            log.warning("ignoring the malformed config change notification %s", notification)
            return
        self._callback(entity, read_entity_config(self.store, entity).value)
