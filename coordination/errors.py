"""Typed errors of the coordination layer. Each message says what happened and what to do."""

from __future__ import annotations

from rafka.common.errors import ErrorCode, RafkaError


class CoordinationError(RafkaError):
    """Base class of every error raised by `coordination`."""


class InvalidZooKeeperAddressError(CoordinationError, ValueError):
    """A ZooKeeper connection string is not `host:port[,host:port...][/chroot]`."""


class ZooKeeperServerError(CoordinationError):
    """The embedded ZooKeeper server could not be started or stopped."""


class JavaNotFoundError(ZooKeeperServerError):
    """No Java runtime to run the embedded ZooKeeper (or Spark) with."""


class ZooKeeperPortInUseError(ZooKeeperServerError):
    """The port asked for the embedded ZooKeeper is already bound by another process."""


class ZooKeeperStartError(ZooKeeperServerError):
    """The embedded ZooKeeper exited or did not answer in time; the message holds its log tail."""


# --- Errors of the cluster's ZooKeeper state (layout, registration, elections, admin) ---


class ZooKeeperUnavailableError(CoordinationError):
    """ZooKeeper could not be reached in time, or the connection dropped during a request."""


class ZooKeeperAuthError(CoordinationError):
    """ZooKeeper refused a request because of the cluster's ACLs (ZooKeeper's NoAuth): the
    client has no credentials, or not the cluster's."""


class ZooKeeperTlsConfigError(CoordinationError, ValueError):
    """The environment asks for TLS to ZooKeeper without the files it needs
    (`rafka.coordination.zookeeper_tls`)."""


class CredentialsFileError(CoordinationError, ValueError):
    """A ZooKeeper credentials file that cannot be used: missing, open to other users, empty or
    not `user:password`."""


class ZNodeMissingError(CoordinationError, LookupError):
    """A znode that a request needs does not exist (ZooKeeper's NoNode)."""


class ZNodeExistsError(CoordinationError):
    """A znode to create exists already (ZooKeeper's NodeExists)."""


class ZNodeNotEmptyError(CoordinationError):
    """A znode to delete still has children (ZooKeeper's NotEmpty)."""


class StaleVersionError(CoordinationError):
    """A conditional write found the znode at another version than the one read (BadVersion).

    Someone else changed the state since it was read: read it again and decide afresh.
    """

    def __init__(self, message: str, *, path: str = "", expected_version: int | None = None):
        super().__init__(message)
        self.path = path
        self.expected_version = expected_version


class ControllerMovedError(CoordinationError):
    """A controller's fenced write found `/controller_epoch` changed: another controller won."""


class BrokerIdInUseError(CoordinationError):
    """Another live broker holds the registration `/brokers/ids/<id>`."""


class MemberIdInUseError(CoordinationError):
    """Another live session holds the consumer-group member registration of this id."""


class TopicExistsError(CoordinationError):
    """The topic to create exists already."""

    code = ErrorCode.TOPIC_ALREADY_EXISTS


class UnknownTopicError(CoordinationError, LookupError):
    """The topic does not exist in this cluster."""


class InvalidTopicError(CoordinationError, ValueError):
    """A topic name that is not allowed (it would become a znode name)."""

    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class InvalidGroupIdError(CoordinationError, ValueError):
    """A consumer group id that is not allowed (it would become a znode name)."""

    code = ErrorCode.INVALID_GROUP_ID


class InvalidMemberIdError(CoordinationError, ValueError):
    """A consumer-group member id that is not allowed (it would become a znode name)."""


class InvalidBrokerIdError(CoordinationError, ValueError):
    """A broker id that is not a non-negative 32-bit integer."""


class InvalidClusterNameError(CoordinationError, ValueError):
    """A cluster name that is not allowed (it becomes the chroot `/rafka/<name>`)."""


class InvalidPartitionsError(CoordinationError, ValueError):
    """A partition count or partition index that is not allowed (fewer than 1, or shrinking)."""

    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(CoordinationError, ValueError):
    """A replication factor below 1 or above the number of brokers."""

    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(CoordinationError, ValueError):
    """A replica assignment that is malformed (gaps, duplicates, unequal replication factors)."""

    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidTopicConfigError(CoordinationError, ValueError):
    """A topic config override whose name or value cannot be stored."""


class InconsistentGroupProtocolError(CoordinationError):
    """A group id in use by the other kind of group: Kafka clients' (Kafka's group protocol)
    or rafka's own consumers' (in ZooKeeper). Kafka's INCONSISTENT_GROUP_PROTOCOL."""

    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class PartitionOwnedError(CoordinationError):
    """Another member of the consumer group owns the partition."""


class UnknownTopicOrPartitionError(UnknownTopicError):
    """A partition the topic does not have (Kafka's UnknownTopicOrPartitionException)."""


class UnknownBrokerError(InvalidReplicaAssignmentError):
    """A replica assignment names a broker that is not registered."""


class ReassignmentInProgressError(CoordinationError):
    """A partition reassignment is under way; another one must wait until it is done."""

    code = ErrorCode.REASSIGNMENT_IN_PROGRESS
