"""Client quotas where Kafka keeps them: the `producer_byte_rate`, `consumer_byte_rate` and
`request_percentage` keys of the entity configs in ZooKeeper (`/config/users/<user>`,
`/config/clients/<client-id>`, `/config/users/<user>/clients/<client-id>`, and `<default>`;
`rafka.coordination.entity_config`), as numbers, and a watch that gives a broker all of them
again whenever one changes. Other keys of the same znodes (SCRAM credentials) are left alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from rafka.coordination.entity_config import (
    Entity,
    EntityConfigWatch,
    alter_entity_config,
    read_all_entity_configs,
)
from rafka.coordination.store import ClusterStore
from rafka.wire.quotas import QUOTA_KEYS, REQUEST_PERCENTAGE, QuotaEntity

log = logging.getLogger(__name__)

Quotas = dict[QuotaEntity, dict[str, float]]


class ZooKeeperQuotas:
    """Reads and writes the quotas of the entity configs in `store` (blocking: call it in a
    thread from an event loop)."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store

    def read_all(self) -> Quotas:
        found: Quotas = {}
        for entity, config in read_all_entity_configs(self.store).items():
            quotas = quotas_of(entity, config)
            if quotas:
                found[QuotaEntity(entity.user, entity.client_id)] = quotas
        return found

    def alter(self, entity: QuotaEntity, updates: Mapping[str, float | None]) -> None:
        """Set each key to its value, deleting those whose value is None; every broker hears
        of it through the change notification this writes."""
        alter_entity_config(self.store, Entity(entity.user, entity.client_id), {
            key: None if value is None else stored_value(key, value)
            for key, value in updates.items()})

    def watch(self, on_change: Callable[[Quotas], object]) -> QuotaWatch:
        """Call `on_change` with every quota now, and again after each change (on the store's
        event thread: hand it on quickly)."""
        return QuotaWatch(self.store, on_change).start()


class QuotaWatch:
    """Keeps every entity's quotas from the entity configs' change notifications, and hands
    all of them on after each."""

    def __init__(self, store: ClusterStore, on_change: Callable[[Quotas], object]) -> None:
        self._on_change = on_change
        self._quotas: Quotas = {}
        self._lock = threading.Lock()
        self._watch = EntityConfigWatch(store, self._on_entity)

    def start(self) -> QuotaWatch:
        self._watch.start()
        return self

    def cancel(self) -> None:
        self._watch.cancel()

    def _on_entity(self, entity: Entity, config: dict[str, str]) -> None:
        key = QuotaEntity(entity.user, entity.client_id)
        quotas = quotas_of(entity, config)
        with self._lock:
            if quotas == self._quotas.get(key, {}):
                return
            if quotas:
                self._quotas[key] = quotas
            else:
                self._quotas.pop(key, None)
            every = {entity: dict(values) for entity, values in self._quotas.items()}
        self._on_change(every)


def quotas_of(entity: Entity, config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's config, as numbers; one that is not a positive number
    (written past AlterClientQuotas) is left out, and said so."""
    quotas = {}
    for key in QUOTA_KEYS:
        if key not in config:
            continue
        try:
            value = float(config[key])
        except ValueError:
            value = -1.0
        if value > 0:
            quotas[key] = value
        else:
            log.warning("ignoring the quota %s=%r of %s: not a positive number", key,
                        config[key], entity.path)
    return quotas


def stored_value(key: str, value: float) -> str:
    """A quota as Kafka writes it: the byte rates as whole numbers (LONG configs), the
    request percentage as a decimal (a DOUBLE)."""
    return repr(float(value)) if key == REQUEST_PERCENTAGE else str(int(value))
