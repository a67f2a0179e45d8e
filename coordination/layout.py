"""Every znode path of a cluster, in one place (docs/zookeeper.md).

Paths are relative to the cluster's chroot (`/rafka/<cluster-name>` by default), and the names
are Kafka's, so a Kafka operator finds their way around with `zkCli.sh`. Every function validates
the names it splices into a path, so no caller can build a path that climbs out of its parent.
"""

from __future__ import annotations

from rafka.coordination import validation

DEFAULT_ROOT = "/rafka"
"""Clusters live side by side under this znode, each in `<root>/<cluster-name>`."""

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG = "/config"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
"""Kafka's per-broker dynamic settings (KIP-226): `<id>` holds `{"version": 1, "config": {...}}`."""
ENTITY_CONFIGS = ("users", "clients")
"""Kafka's client entity types (KIP-55, KIP-554): `/config/users/<user>`,
`/config/clients/<client-id>` and `/config/users/<user>/clients/<client-id>`, each
`{"version": 1, "config": {...}}`; `<default>` is the entity every user or client falls back to."""
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
"""Kafka's change notifications of entity configs: `config_change_0000000042`, each
`{"version": 2, "entity_path": "users/alice"}`."""
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
"""Kafka's reassignment request: `{"version": 1, "partitions": [{"topic", "partition",
"replicas"}]}`, written by an admin, shrunk by the controller as partitions finish, deleted when
empty. Created on demand, not by `ensure_layout`: its existence means "in progress"."""
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
"""Kafka's name for the sequential notification znodes: `isr_change_0000000042`."""
CONSUMERS = "/consumers"
DATA_PORTS = "/data_ports"
"""rafka's own: where each replica host's data port listens, as its broker published it
(`rafka.coordination.data_ports`). Kafka has no such znode: its replicas live in the broker."""

PERSISTENT_PATHS = (
    BROKER_IDS,
    TOPICS,
    TOPIC_CONFIGS,
    BROKER_CONFIGS,
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    CONSUMERS,
)
"""The persistent containers that `ClusterStore.ensure_layout()` creates (parents included)."""


def cluster_chroot(cluster: str, root: str = DEFAULT_ROOT) -> str:
    """The chroot of a cluster: `/rafka/<cluster>` by default."""
    return f"{root.rstrip('/')}/{validation.validate_cluster_name(cluster)}"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{validation.validate_broker_id(broker_id)}"


def data_port_path(host: str) -> str:
    return f"{DATA_PORTS}/{validation.validate_actor_name(host)}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{validation.validate_topic_name(topic)}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{validation.validate_partition(partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def broker_config_path(broker_id: int) -> str:
    return f"{BROKER_CONFIGS}/{validation.validate_broker_id(broker_id)}"


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS}/{validation.validate_topic_name(topic)}"


def entity_config_path(entity_path: str) -> str:
    """The znode of an entity's config, by its entity path (`users/alice`); the caller's
    `rafka.coordination.entity_config` sanitises the names it splices in."""
    return f"{CONFIG}/{entity_path}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{validation.validate_topic_name(topic)}"


def isr_change_path(name: str) -> str:
    """One notification, by the child name ZooKeeper gave it (`isr_change_0000000042`)."""
    if not name.startswith(ISR_CHANGE_PREFIX) or not name[len(ISR_CHANGE_PREFIX) :].isdigit():
        raise ValueError(
            f"{name!r} is not an ISR change notification name; expected "
            f"'{ISR_CHANGE_PREFIX}<sequence number>' as listed under {ISR_CHANGE_NOTIFICATION}"
        )
    return f"{ISR_CHANGE_NOTIFICATION}/{name}"


def group_path(group: str) -> str:
    return f"{CONSUMERS}/{validation.validate_group_id(group)}"


def group_ids_path(group: str) -> str:
    return f"{group_path(group)}/ids"


def member_path(group: str, member: str) -> str:
    return f"{group_ids_path(group)}/{validation.validate_member_id(member)}"


def group_kafka_marker_path(group: str) -> str:
    """Ephemeral, while Kafka clients are members of the group (not Kafka's: see
    actors/group/coordinator.py); rafka's own consumers may not join it meanwhile."""
    return f"{group_path(group)}/kafka_members"


def group_owners_path(group: str) -> str:
    return f"{group_path(group)}/owners"


def owner_topic_path(group: str, topic: str) -> str:
    return f"{group_owners_path(group)}/{validation.validate_topic_name(topic)}"


def owner_path(group: str, topic: str, partition: int) -> str:
    return f"{owner_topic_path(group, topic)}/{validation.validate_partition(partition)}"


def group_offsets_path(group: str) -> str:
    return f"{group_path(group)}/offsets"


def offset_topic_path(group: str, topic: str) -> str:
    return f"{group_offsets_path(group)}/{validation.validate_topic_name(topic)}"


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"{offset_topic_path(group, topic)}/{validation.validate_partition(partition)}"
