"""ZooKeeper coordination: the embedded server, the znode layout, registration, elections,
watches and fencing. No Ray."""

from rafka.coordination.admin import TopicAdmin
from rafka.coordination.assignment import assign_replicas, validate_assignment
from rafka.coordination.election import ControllerElection, read_controller, read_controller_epoch
from rafka.coordination.embedded import EmbeddedZooKeeper, ZooKeeperAddress
from rafka.coordination.errors import (
    BrokerIdInUseError,
    ControllerMovedError,
    CoordinationError,
    InvalidBrokerIdError,
    InvalidClusterNameError,
    InvalidGroupIdError,
    InvalidMemberIdError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicConfigError,
    InvalidTopicError,
    MemberIdInUseError,
    PartitionOwnedError,
    StaleVersionError,
    TopicExistsError,
    UnknownTopicError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeNotEmptyError,
    ZooKeeperAuthError,
    ZooKeeperUnavailableError,
)
from rafka.coordination.groups import GroupStore, MemberRegistration
from rafka.coordination.models import (
    BrokerInfo,
    ControllerFence,
    ControllerInfo,
    MemberSubscription,
    PartitionState,
    TopicAssignment,
    TopicDescription,
    Versioned,
)
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.registration import BrokerRegistration, EphemeralRegistration, read_brokers
from rafka.coordination.security import AclPolicy, ClusterCredentials
from rafka.coordination.store import ClusterStore, SessionEvent
from rafka.coordination.validation import (
    validate_broker_id,
    validate_cluster_name,
    validate_group_id,
    validate_member_id,
    validate_partition,
    validate_topic_name,
)
from rafka.coordination.watches import ClusterWatches, Watch

ZooKeeperStore = ClusterStore
"""The name the design notes also use for `ClusterStore`."""

__all__ = [
    "AclPolicy",
    "BrokerIdInUseError",
    "BrokerInfo",
    "BrokerRegistration",
    "ClusterCredentials",
    "ClusterStore",
    "ClusterWatches",
    "ControllerElection",
    "ControllerFence",
    "ControllerInfo",
    "ControllerMovedError",
    "CoordinationError",
    "EmbeddedZooKeeper",
    "EphemeralRegistration",
    "GroupStore",
    "InvalidBrokerIdError",
    "InvalidClusterNameError",
    "InvalidGroupIdError",
    "InvalidMemberIdError",
    "InvalidPartitionsError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidTopicConfigError",
    "InvalidTopicError",
    "MemberIdInUseError",
    "MemberRegistration",
    "MemberSubscription",
    "PartitionOwnedError",
    "PartitionState",
    "PartitionStateStore",
    "SessionEvent",
    "StaleVersionError",
    "TopicAdmin",
    "TopicAssignment",
    "TopicDescription",
    "TopicExistsError",
    "UnknownTopicError",
    "Versioned",
    "Watch",
    "ZNodeExistsError",
    "ZNodeMissingError",
    "ZNodeNotEmptyError",
    "ZooKeeperAddress",
    "ZooKeeperAuthError",
    "ZooKeeperStore",
    "ZooKeeperUnavailableError",
    "assign_replicas",
    "read_brokers",
    "read_controller",
    "read_controller_epoch",
    "validate_assignment",
    "validate_broker_id",
    "validate_cluster_name",
    "validate_group_id",
    "validate_member_id",
    "validate_partition",
    "validate_topic_name",
]
