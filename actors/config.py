"""Topic and broker configuration with Kafka's names.

A topic's config is its log's (`logstore.LogConfig`) plus the keys that replication reads: its
schema is the log's with those two added, so no key is declared twice. Overrides are stored in
ZooKeeper as strings, as Kafka does, so every parser takes strings too (`rafka.common.config`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rafka.common.config import ConfigDef, InvalidConfigError, Type, setting
from rafka.coordination.admin import config_value
from rafka.logstore.config import LogConfig
from rafka.wire.listeners import (
    DEFAULT_PROTOCOL_MAP,
    format_protocol_map,
    parse_listeners,
    parse_protocol_map,
    security_protocol,
)


@dataclass(frozen=True)
class TopicConfig:
    """Everything a partition of one topic is configured with."""

    CONFIG_DEF: ClassVar[ConfigDef]  # the log's keys, then the two below

    log: LogConfig = field(default_factory=LogConfig)
    min_insync_replicas: int = setting(
        "min.insync.replicas", Type.INT, 1, minimum=1,
        doc="How many in-sync replicas an acks=all write needs to succeed.")
    unclean_leader_election_enable: bool = setting(
        "unclean.leader.election.enable", Type.BOOLEAN, False,
        doc="Whether a replica outside the ISR may become leader, losing what it lacks.")

    def __post_init__(self) -> None:
        _REPLICATION_KEYS.normalise(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> TopicConfig:
        parsed = cls.CONFIG_DEF.parse(values)
        own = {key.attribute: parsed.pop(key.attribute)
               for key in _REPLICATION_KEYS if key.attribute in parsed}
        return cls(LogConfig(**parsed), **own)

    def to_dict(self) -> dict[str, Any]:
        """Every setting, by its Kafka name."""
        return {**self.log.to_dict(), **_REPLICATION_KEYS.to_dict(self)}

    def overrides(self) -> dict[str, str]:
        """The settings that differ from the defaults, as strings (what ZooKeeper stores)."""
        defaults = TopicConfig().to_dict()
        return {name: config_value(name, value) for name, value in self.to_dict().items()
                if value != defaults[name] and value is not None}


_REPLICATION_KEYS = ConfigDef.of(TopicConfig, "topic")
TopicConfig.CONFIG_DEF = ConfigDef([*LogConfig.CONFIG_DEF, *_REPLICATION_KEYS], "topic")


def default_replica_hosts() -> int:
    """One replica host per two cores of the broker's node: the hosts do the data path's work,
    and Python runs one thread of it per process at a time."""
    return max(1, (os.cpu_count() or 2) // 2)


def _listeners(text: str) -> str:
    """Listeners rafka can serve, written as Kafka writes them (InvalidListenerError, a
    ValueError, says why not)."""
    return ",".join(str(listener) for listener in parse_listeners(text))


def _protocol_map(text: str) -> str:
    return format_protocol_map(parse_protocol_map(text))


# The settings a broker takes while it runs, each broker its own (Kafka's per-broker dynamic
# configs, KIP-226): AlterConfigs on a broker resource stores them in ZooKeeper
# (`rafka.coordination.broker_config`) and the broker applies them (actors/server/broker.py);
# they take precedence over the settings it was started with. The others are fixed at start.
DYNAMIC_BROKER_SETTINGS = frozenset({"advertised.listeners"})
# What DescribeConfigs never shows (Kafka's PASSWORD settings: reported null, sensitive).
SENSITIVE_BROKER_SETTINGS = frozenset({"ssl.key.password", "plain.sasl.jaas.config"})
# Kafka's per-listener settings: `listener.name.<name>.ssl.client.auth` and the like set one
# listener's ssl.* (and SASL) settings, over the broker's own.
LISTENER_PREFIX = "listener.name."
LISTENER_SETTINGS = ("ssl.", "sasl.", "plain.sasl.", "connections.max.reauth.ms")


@dataclass(frozen=True)
class BrokerConfig:
    """A broker's settings. Defaults follow Kafka's, except where noted."""

    CONFIG_DEF: ClassVar[ConfigDef]

    # Kafka's default is 30 s; a shorter one makes a dead follower leave the ISR sooner here.
    replica_lag_time_max_ms: int = setting(
        "replica.lag.time.max.ms", Type.LONG, 10_000, minimum=0,
        doc="How long a follower may go without catching up before it leaves the ISR.")
    replica_fetch_max_bytes: int = setting(
        "replica.fetch.max.bytes", Type.INT, 1_048_576, minimum=0,
        doc="The bytes a follower fetches per partition in one request.")
    replica_fetch_response_max_bytes: int = setting(
        "replica.fetch.response.max.bytes", Type.INT, 10_485_760, minimum=0,
        doc="The bytes a follower fetches in one request, all partitions together.")
    # Kafka's default is 500 ms. An idle fetch costs a Ray call at each end (about 0.7 ms of
    # CPU here), so waiting longer keeps an idle cluster idle; records still go out as soon as
    # they are appended, and a partition that starts following cuts the wait short.
    replica_fetch_wait_max_ms: int = setting(
        "replica.fetch.wait.max.ms", Type.INT, 2_000, minimum=0,
        doc="How long a leader holds a follower's fetch that finds no new records.")
    replica_fetch_backoff_ms: int = setting(
        "replica.fetch.backoff.ms", Type.INT, 200, minimum=0,
        doc="How long a follower waits after a failed fetch before the next.")
    replica_socket_timeout_ms: int = setting(
        "replica.socket.timeout.ms", Type.INT, 30_000, minimum=0,
        doc="How long a follower waits for its leader's answer beyond "
            "replica.fetch.wait.max.ms before it drops the connection and makes a new one.")
    # Not Kafka's: how a follower's fetches reach the leader's host. "tcp", a connection each
    # follower host keeps to each leader host's data port (actors/dataport/server.py); "ray",
    # an actor call per fetch, as rafka replicated before. docs/latency.md has the figures.
    replica_fetch_transport: str = setting(
        "replica.fetch.transport", Type.STRING, "tcp", choices=("tcp", "ray"),
        doc="How a follower's fetches reach its leader: tcp (a kept connection) or ray "
            "(an actor call each).")
    # Not Kafka's: how a broker's Kafka listener hands Kafka clients' Produce, Fetch,
    # ListOffsets and OffsetFetch to its replica hosts. "tcp", over connections it keeps to
    # their data ports; "ray", an actor call each.
    # docs/kafka-protocol.md has the figures.
    kafka_listener_host_transport: str = setting(
        "kafka.listener.host.transport", Type.STRING, "tcp", choices=("tcp", "ray"),
        doc="How the Kafka listener reaches this broker's replica hosts: tcp (kept "
            "connections) or ray (an actor call each).")
    # Kafka's default is 18 s; brokers on one Ray cluster can afford a faster failure detector.
    zookeeper_session_timeout_ms: int = setting(
        "zookeeper.session.timeout.ms", Type.INT, 6_000, minimum=0,
        doc="How long ZooKeeper waits for a silent broker before its session expires.")
    request_timeout_ms: int = setting(
        "request.timeout.ms", Type.INT, 30_000, minimum=0,
        doc="How long the broker waits for an answer from another broker.")
    auto_leader_rebalance_enable: bool = setting(
        "auto.leader.rebalance.enable", Type.BOOLEAN, True,
        doc="Whether the controller moves leadership back to preferred replicas.")
    leader_imbalance_check_interval_seconds: int = setting(
        "leader.imbalance.check.interval.seconds", Type.LONG, 300, minimum=0,
        doc="How often the controller checks for leaders off their preferred replicas.")
    broker_rack: str | None = setting(
        "broker.rack", Type.STRING, None, nullable=True,
        doc="The broker's rack, so that a partition's replicas are spread across racks.")
    replica_selector_class: str | None = setting(
        "replica.selector.class", Type.STRING, None, nullable=True,
        choices=("org.apache.kafka.common.replica.RackAwareReplicaSelector",
                 "org.apache.kafka.common.replica.LeaderSelector"),
        doc="Which replica a Kafka consumer that names its client.rack is sent to read from "
            "(KIP-392): RackAwareReplicaSelector, one in its rack; unset or LeaderSelector, "
            "the leader.")
    # This broker's ZooKeeper connect string, chroot included (Kafka's zookeeper.connect); None:
    # the cluster's. Brokers of one cluster must reach the same ensemble and chroot; another
    # route to it (a proxy, in the fault tests) is what this is for.
    zookeeper_connect: str | None = setting(
        "zookeeper.connect", Type.STRING, None, nullable=True,
        doc="host:port[,host:port...][/chroot] of ZooKeeper; None: the cluster's.")
    # Kafka's wire protocol (actors/kafka/listener.py): where to serve it, as Kafka's
    # "NAME://host:port,..." (port 0: any free one), each listener a server socket of its own;
    # None serves none. advertised.listeners is what clients are told to connect to, per
    # listener name (default: each listener, with the port it bound).
    listeners: str | None = setting(
        "listeners", Type.STRING, None, nullable=True, validator=_listeners,
        doc="Where to serve Kafka's protocol, as NAME://host:port,...; None serves none.")
    advertised_listeners: str | None = setting(
        "advertised.listeners", Type.STRING, None, nullable=True, validator=_listeners,
        doc="What Kafka clients are told to connect to, per listener name; None: the "
            "listeners, as bound.")
    listener_security_protocol_map: str = setting(
        "listener.security.protocol.map", Type.STRING, DEFAULT_PROTOCOL_MAP,
        validator=_protocol_map,
        doc="The security protocol of each listener name, as NAME:PROTOCOL,...")
    # TLS of the SSL listeners (actors/kafka/tls.py), through Python's ssl module: where Kafka
    # names keystores and truststores, rafka reads PEM files.
    ssl_keystore_location: str | None = setting(
        "ssl.keystore.location", Type.STRING, None, nullable=True,
        doc="A PEM file with the broker's certificate chain and private key (Kafka's keystore).")
    ssl_key_password: str | None = setting(
        "ssl.key.password", Type.STRING, None, nullable=True,
        doc="The password of the private key in ssl.keystore.location, if it is encrypted.")
    ssl_truststore_location: str | None = setting(
        "ssl.truststore.location", Type.STRING, None, nullable=True,
        doc="A PEM bundle of the CAs whose client certificates are trusted (Kafka's "
            "truststore); None: the system's.")
    ssl_client_auth: str = setting(
        "ssl.client.auth", Type.STRING, "none", choices=("none", "requested", "required"),
        doc="Whether an SSL listener asks clients for a certificate: none, requested "
            "(verified if given) or required.")
    ssl_enabled_protocols: str = setting(
        "ssl.enabled.protocols", Type.LIST, "TLSv1.2,TLSv1.3", choices=("TLSv1.2", "TLSv1.3"),
        doc="The TLS versions an SSL listener accepts.")
    ssl_cipher_suites: str | None = setting(
        "ssl.cipher.suites", Type.STRING, None, nullable=True,
        doc="The TLSv1.2 cipher suites an SSL listener accepts, as an OpenSSL cipher list; "
            "None: Python's defaults (TLSv1.3's suites are OpenSSL's own).")
    ssl_principal_mapping_rules: str = setting(
        "ssl.principal.mapping.rules", Type.STRING, "DEFAULT", choices=("DEFAULT",),
        doc="How a client certificate's subject becomes a principal: DEFAULT, the subject's "
            "distinguished name.")
    # Not Kafka's (its handshakes run on the network threads, bounded by the connection's idle
    # time): how long an SSL listener waits for a client's TLS handshake before dropping it.
    ssl_handshake_timeout_ms: int = setting(
        "ssl.handshake.timeout.ms", Type.INT, 10_000, minimum=1,
        doc="How long an SSL listener waits for a client's TLS handshake.")
    # Kafka's name for how brokers talk to each other; here, what the replica hosts' data ports
    # speak to every client of theirs (actors/dataport/tls.py). SSL is mutual TLS from the
    # broker's ssl.keystore.location and ssl.truststore.location (not a listener's own).
    security_inter_broker_protocol: str = setting(
        "security.inter.broker.protocol", Type.STRING, "PLAINTEXT",
        choices=("PLAINTEXT", "SSL"),
        doc="What the replica hosts' data ports speak: PLAINTEXT, or SSL (mutual TLS with "
            "ssl.keystore.location and ssl.truststore.location, on every node).")
    # SASL on the SASL_PLAINTEXT and SASL_SSL listeners (actors/kafka/sasl.py). Kafka's default
    # mechanism is GSSAPI, which rafka does not serve: SCRAM is the default here.
    sasl_enabled_mechanisms: str = setting(
        "sasl.enabled.mechanisms", Type.LIST, "SCRAM-SHA-256,SCRAM-SHA-512",
        choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        doc="The SASL mechanisms a SASL listener serves.")
    # Kafka's JAAS line for PLAIN, read for its user_<name> options only (usually set per
    # listener: listener.name.<n>.plain.sasl.jaas.config).
    plain_sasl_jaas_config: str | None = setting(
        "plain.sasl.jaas.config", Type.STRING, None, nullable=True,
        doc="PLAIN's users, as Kafka's PlainLoginModule line: user_<name>=\"<password>\" ...")
    # A refusal held back slows down a guesser; the wait is the connection's, not the loop's.
    connection_failed_authentication_delay_ms: int = setting(
        "connection.failed.authentication.delay.ms", Type.INT, 100, minimum=0,
        doc="How long a failed authentication waits before its answer and the close.")
    # KIP-368: a long-lived connection proves again who it is.
    connections_max_reauth_ms: int = setting(
        "connections.max.reauth.ms", Type.LONG, 0, minimum=0,
        doc="The longest a SASL session lasts before the client must re-authenticate; 0: "
            "forever (a token's own expiry still ends it).")
    # OAUTHBEARER under KIP-768's names: unsecured tokens unless a key set is given.
    sasl_oauthbearer_jwks_endpoint_url: str | None = setting(
        "sasl.oauthbearer.jwks.endpoint.url", Type.STRING, None, nullable=True,
        doc="A file:// URL of the JWKS that signs OAUTHBEARER tokens; None: unsecured "
            "tokens (alg none), as Kafka's default validator takes them.")
    sasl_oauthbearer_expected_audience: str | None = setting(
        "sasl.oauthbearer.expected.audience", Type.STRING, None, nullable=True,
        doc="The audiences (comma-separated) a signed token must name one of.")
    # Checked only when set, as in Kafka.
    sasl_oauthbearer_expected_issuer: str | None = setting(
        "sasl.oauthbearer.expected.issuer", Type.STRING, None, nullable=True,
        doc="The issuer a signed token must name.")
    sasl_oauthbearer_sub_claim_name: str = setting(
        "sasl.oauthbearer.sub.claim.name", Type.STRING, "sub",
        doc="The claim that names a token's principal.")
    # Unsecured tokens get no skew, as Kafka's unsecured validator allows none by default.
    sasl_oauthbearer_clock_skew_seconds: int = setting(
        "sasl.oauthbearer.clock.skew.seconds", Type.INT, 30, minimum=0,
        doc="How far a signed token's times may be off this broker's clock.")
    # The largest request a Kafka client may send; a larger frame closes its connection.
    socket_request_max_bytes: int = setting(
        "socket.request.max.bytes", Type.INT, 104_857_600, minimum=0,
        doc="The largest request a Kafka client may send.")
    max_incremental_fetch_session_cache_slots: int = setting(
        "max.incremental.fetch.session.cache.slots", Type.INT, 1000, minimum=0,
        doc="How many incremental fetch sessions (KIP-227) the broker keeps for Kafka "
            "clients; 0: none, every fetch lists every partition.")
    transaction_partition_verification_enable: bool = setting(
        "transaction.partition.verification.enable", Type.BOOLEAN, True,
        doc="Whether a partition leader asks the transaction coordinator before it takes a "
            "transaction's first batch in the partition (KIP-890).")
    # What a broker's Kafka clients may hold (actors/kafka/limits.py): Kafka's names and
    # defaults, but for group.coordinator.max.groups, rafka's own (each group is kept in the
    # coordinating broker's memory; Kafka has no such bound).
    max_connections: int = setting(
        "max.connections", Type.INT, 2**31 - 1, minimum=1,
        doc="How many Kafka client connections a broker keeps; more are closed at once.")
    max_connections_per_ip: int = setting(
        "max.connections.per.ip", Type.INT, 2**31 - 1, minimum=1,
        doc="How many Kafka client connections from one address a broker keeps.")
    queued_max_request_bytes: int = setting(
        "queued.max.request.bytes", Type.LONG, -1,
        doc="How many bytes of requests a broker holds before answering them; -1: no bound. "
            "At least socket.request.max.bytes.")
    group_max_size: int = setting(
        "group.max.size", Type.INT, 2**31 - 1, minimum=1,
        doc="How many members a consumer group of Kafka clients may have.")
    group_coordinator_max_groups: int = setting(
        "group.coordinator.max.groups", Type.INT, 10_000, minimum=1,
        doc="How many groups of Kafka clients one broker coordinates; a join that would "
            "start one more is refused with POLICY_VIOLATION.")
    # How long a Kafka group starting from empty waits for more members before its first
    # generation (Kafka's default; Kafka clients' groups only, see actors/group/coordinator.py).
    group_initial_rebalance_delay_ms: int = setting(
        "group.initial.rebalance.delay.ms", Type.INT, 3000, minimum=0,
        doc="How long a new Kafka group waits for more members before its first generation.")
    group_min_session_timeout_ms: int = setting(
        "group.min.session.timeout.ms", Type.INT, 6000, minimum=0,
        doc="The shortest session timeout a Kafka group member may ask for.")
    group_max_session_timeout_ms: int = setting(
        "group.max.session.timeout.ms", Type.INT, 1_800_000, minimum=0,
        doc="The longest session timeout a Kafka group member may ask for.")
    # The new consumer group protocol (KIP-848, actors/group/consumer_group.py): Kafka's names
    # and defaults. The session timeout is the broker's here, not the client's.
    group_consumer_session_timeout_ms: int = setting(
        "group.consumer.session.timeout.ms", Type.INT, 45_000, minimum=1,
        doc="How long a member of a consumer group (group.protocol=consumer) stays in it "
            "without a heartbeat.")
    group_consumer_heartbeat_interval_ms: int = setting(
        "group.consumer.heartbeat.interval.ms", Type.INT, 5_000, minimum=1,
        doc="How often members of a consumer group (group.protocol=consumer) heartbeat.")
    group_consumer_max_size: int = setting(
        "group.consumer.max.size", Type.INT, 2**31 - 1, minimum=1,
        doc="How many members a consumer group (group.protocol=consumer) may have.")
    group_consumer_assignors: str = setting(
        "group.consumer.assignors", Type.LIST, "uniform,range", choices=("uniform", "range"),
        doc="The server assignors consumer groups may name; the first is the default.")
    # Kafka clients asking for metadata of a topic that does not exist create it, as Kafka does
    # by default, with num.partitions and default.replication.factor (also what a CreateTopics
    # asking for -1 gets).
    auto_create_topics_enable: bool = setting(
        "auto.create.topics.enable", Type.BOOLEAN, True,
        doc="Whether a Kafka client's metadata request creates a topic that does not exist.")
    num_partitions: int = setting(
        "num.partitions", Type.INT, 1, minimum=1,
        doc="The partitions of a topic created automatically or without a count.")
    default_replication_factor: int = setting(
        "default.replication.factor", Type.INT, 1, minimum=1,
        doc="The replication factor of a topic created automatically or without one.")
    # The authorizer of Kafka clients' requests (actors/kafka/authorization.py, docs/security.md):
    # empty, Kafka's default, allows everything.
    authorizer_class_name: str = setting(
        "authorizer.class.name", Type.STRING, "",
        choices=("", "kafka.security.authorizer.AclAuthorizer",
                 "kafka.security.auth.SimpleAclAuthorizer"),
        doc="The authorizer of Kafka clients' requests: kafka.security.authorizer.AclAuthorizer "
            "checks the cluster's ACLs; empty allows everything.")
    super_users: str = setting(
        "super.users", Type.STRING, "",
        doc="Principals the authorizer allows everything, separated by ';' "
            "(User:admin;User:CN=ops).")
    allow_everyone_if_no_acl_found: bool = setting(
        "allow.everyone.if.no.acl.found", Type.BOOLEAN, False,
        doc="Whether the authorizer allows what is asked of a resource no ACL names.")
    # Not Kafka's: how many replica-host actors (processes) hold this broker's partition
    # replicas. Each is a Ray worker process (about 65 MB, and about 0.6% of a core even idle);
    # 0 gives every replica an actor of its own, as rafka did before replicas shared hosts.
    num_replica_hosts: int = setting(
        "num.replica.hosts", Type.INT, default_factory=lambda: default_replica_hosts(),
        minimum=0, doc="How many processes hold this broker's replicas; 0: one per replica.")
    # The default config of new topics (Kafka's log.* broker settings, by their topic names).
    # Not a key of its own: given only when the config is built in Python.
    topic_defaults: Mapping[str, Any] = field(default_factory=dict)
    # The ssl.* settings of single listeners, by listener name (`listener.name.<name>.ssl.*`
    # in a dict given to from_dict).
    listener_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.CONFIG_DEF.normalise(self)
        for name, settings in self.listener_settings.items():
            if unknown := sorted(key for key in settings
                                 if not key.startswith(LISTENER_SETTINGS)):
                raise InvalidConfigError(
                    f"{LISTENER_PREFIX}{name.lower()}.{unknown[0]}: only ssl.* and SASL "
                    "settings are set per listener")
            self.CONFIG_DEF.parse(settings)  # InvalidConfigError names the key
        if 0 <= self.queued_max_request_bytes < self.socket_request_max_bytes:
            # Kafka's rule: a request socket.request.max.bytes allows would never fit.
            raise InvalidConfigError(
                f"queued.max.request.bytes={self.queued_max_request_bytes} is less than "
                f"socket.request.max.bytes={self.socket_request_max_bytes}: raise it, or set "
                "-1 for no bound")
        self._check_listeners()
        if self.security_inter_broker_protocol == "SSL" and not (
                self.ssl_keystore_location and self.ssl_truststore_location):
            raise InvalidConfigError(
                "security.inter.broker.protocol=SSL needs ssl.keystore.location and "
                "ssl.truststore.location: the data ports and their clients use the broker's "
                "certificate chain and key and the cluster's CA bundle, PEM files at the same "
                "paths on every node")

    def _check_listeners(self) -> None:
        """Kafka's rules across the listener settings: every listener's name in the protocol
        map, an advertised name for a listener only, a keystore for TLS, PLAIN's users."""
        protocol_map = parse_protocol_map(self.listener_security_protocol_map)
        listeners = parse_listeners(self.listeners) if self.listeners else []
        names = {listener.name for listener in listeners}
        for listener in listeners:
            try:
                protocol = security_protocol(listener, protocol_map)
            except ValueError as error:
                raise InvalidConfigError(str(error)) from None
            own = self.for_listener(listener.name)
            if protocol.uses_sasl and "PLAIN" in own.sasl_enabled_mechanisms.split(",") \
                    and "user_" not in (own.plain_sasl_jaas_config or ""):
                raise InvalidConfigError(
                    f"listener {listener} serves SASL/PLAIN and knows no users: set "
                    f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config to "
                    "PlainLoginModule's line, with user_<name>=\"<password>\" for each")
            if protocol.uses_tls and not self.for_listener(listener.name).ssl_keystore_location:
                raise InvalidConfigError(
                    f"listener {listener} speaks SSL and needs a certificate: set "
                    "ssl.keystore.location (or listener.name."
                    f"{listener.name.lower()}.ssl.keystore.location) to a PEM file with the "
                    "certificate chain and key")
        for advertised in parse_listeners(self.advertised_listeners) \
                if self.advertised_listeners else []:
            if advertised.name not in names and self.listeners:
                raise InvalidConfigError(
                    f"advertised.listeners names {advertised.name}, which listeners does not "
                    f"({self.listeners})")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> BrokerConfig:
        own: dict[str, Any] = {}
        per_listener: dict[str, dict[str, Any]] = {}
        for key, value in (values or {}).items():
            name, dot, setting_name = str(key).removeprefix(LISTENER_PREFIX).partition(".")
            if str(key).startswith(LISTENER_PREFIX) and dot and name:
                per_listener.setdefault(name.upper(), {})[setting_name] = value
            else:
                own[key] = value
        return cls(**cls.CONFIG_DEF.parse(own), listener_settings=per_listener)

    def to_dict(self) -> dict[str, Any]:
        return self.CONFIG_DEF.to_dict(self)

    def for_listener(self, name: str) -> BrokerConfig:
        """This config with the listener's own ssl.* and SASL settings over the broker's."""
        settings = self.listener_settings.get(name.upper())
        if not settings:
            return self
        # Without the per-listener settings: they are in it already.
        return dataclasses.replace(self, **self.CONFIG_DEF.parse(settings),
                                   listener_settings={})


BrokerConfig.CONFIG_DEF = ConfigDef.of(BrokerConfig, "broker")
