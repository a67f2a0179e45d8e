"""Config znodes in Kafka's format (`{"version": 1, "config": {...}}`): read one, and change
some of its keys with a read-modify-write that concurrent admins cannot lose keys to.
Brokers' dynamic settings (`broker_config`) and client entities' configs (`entity_config`)
are both stored so."""

from __future__ import annotations

from collections.abc import Mapping

from rafka.coordination.admin import merge_config, normalise_config
from rafka.coordination.errors import StaleVersionError, ZNodeExistsError
from rafka.coordination.models import Versioned, topic_config_json
from rafka.coordination.store import ClusterStore

# Tries of a read-modify-write that others' writes keep invalidating.
_CONFLICT_RETRIES = 10


def read_config_znode(store: ClusterStore, path: str) -> Versioned[dict[str, str]]:
    """The config at `path` with the znode version (-1 and none if never set)."""
    found = store.read_optional(path)
    if found is None:
        return Versioned({}, -1)
    return Versioned(dict((found.value or {}).get("config", {})), found.version)


def alter_config_znode(store: ClusterStore, path: str, updates: Mapping[str, object | None],
                       what: str) -> Versioned[dict[str, str]]:
    """Set keys of the config at `path` (a value of None removes one) and return it all.

    Conditional on the version read, and retried if another admin changed it meanwhile, so
    concurrent changes of different keys are all kept; `what` names it in the error of one
    that kept changing.
    """
    for _ in range(_CONFLICT_RETRIES):
        current = read_config_znode(store, path)
        config = normalise_config(merge_config(current.value, updates))
        try:
            if current.version < 0:
                store.create(path, topic_config_json(config))
                return Versioned(config, 0)
            return Versioned(config, store.write(path, topic_config_json(config),
                                                 current.version))
        except (StaleVersionError, ZNodeExistsError):
            continue
    raise StaleVersionError(f"{what} kept changing under us: try again", path=path)
