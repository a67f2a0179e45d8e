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
from rafka.coordination.config_znodes import alter_config_znode, read_config_znode
from rafka.coordination.models import Versioned
from rafka.coordination.store import ClusterStore


def read_broker_config(store: ClusterStore, broker_id: int) -> Versioned[dict[str, str]]:
    """The broker's dynamic settings with the znode version (-1 and none if never set)."""
    return read_config_znode(store, layout.broker_config_path(broker_id))


def alter_broker_config(store: ClusterStore, broker_id: int,
                        updates: Mapping[str, object | None]) -> Versioned[dict[str, str]]:
    """Set dynamic settings of a broker (a value of None removes one) and return them all;
    concurrent changes of different keys are all kept."""
    return alter_config_znode(store, layout.broker_config_path(broker_id), updates,
                              f"the dynamic settings of broker {broker_id}")
