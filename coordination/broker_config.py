"""A broker's dynamic settings in ZooKeeper: Kafka's `/config/brokers/<id>` (KIP-226).

An admin writes them (AlterConfigs or IncrementalAlterConfigs on a broker resource); the broker
they name watches its znode and applies them while it runs. They outlive its restarts and take
precedence over the settings it was started with. Which settings may change so, and what
values they take, is for the broker's configuration to say (`rafka.actors.config`): this module
only stores them, in the format of a topic's overrides.
"""

from __future__ import annotations

from collections.abc import Mapping

from rafka.coordination import layout
from rafka.coordination.admin import merge_config, normalise_config
from rafka.coordination.errors import StaleVersionError, ZNodeExistsError
from rafka.coordination.models import Versioned, topic_config_json
from rafka.coordination.store import ClusterStore

# Tries of a read-modify-write that others' writes keep invalidating.
_CONFLICT_RETRIES = 10


def read_broker_config(store: ClusterStore, broker_id: int) -> Versioned[dict[str, str]]:
    """The broker's dynamic settings with the znode version (-1 and none if never set)."""
    found = store.read_optional(layout.broker_config_path(broker_id))
    if found is None:
        return Versioned({}, -1)
    return Versioned(dict((found.value or {}).get("config", {})), found.version)


def alter_broker_config(store: ClusterStore, broker_id: int,
                        updates: Mapping[str, object | None]) -> Versioned[dict[str, str]]:
    """Set dynamic settings of a broker (a value of None removes one) and return them all.

    A read-modify-write conditional on the version read, retried if another admin changed them
    meanwhile, so concurrent changes of different keys are all kept.
    """
    path = layout.broker_config_path(broker_id)
    for _ in range(_CONFLICT_RETRIES):
        current = read_broker_config(store, broker_id)
        config = normalise_config(merge_config(current.value, updates))
        try:
            if current.version < 0:
                store.create(path, topic_config_json(config))
                return Versioned(config, 0)
            return Versioned(config, store.write(path, topic_config_json(config),
                                                 current.version))
        except (StaleVersionError, ZNodeExistsError):
            continue
    raise StaleVersionError(
        f"the dynamic settings of broker {broker_id} kept changing under us: try again",
        path=path)
