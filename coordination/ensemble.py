"""A ZooKeeper ensemble of embedded servers: its configuration (pure) and one member (a JVM).

An ensemble is 3 or 5 servers (any odd number; Kafka's docs: 5 is typical, 7 the most worth
having), one per machine, so that no machine holds the only ZooKeeper: it serves while a
majority of its members are up, and a write is committed once a majority has it. Each member is
`org.apache.zookeeper.server.quorum.QuorumPeerMain` from the ZooKeeper 3.6.3 jars inside pyspark
3.5.7, the same jars as the standalone server, with a zoo.cfg of ZooKeeper 3.5+ syntax:

    tickTime=1000  initLimit=10  syncLimit=3  dataDir=<data dir>/data  (which holds `myid`)
    clientPort=2181  clientPortAddress=<host>
    server.1=zk1:2888:3888;zk1:2181   (host:quorumPort:electionPort;clientAddress:clientPort)
    server.2=zk2:2888:3888;zk2:2181
    server.3=zk3:2888:3888;zk3:2181

- `Ensemble.parse("zk1:2888:3888,zk2:2888:3888,zk3:2888:3888")`: the servers, ids 1, 2, 3 by
  position (or `1=zk1:...`), checked; `connect_string` is what clients, `Cluster.start(zk=...)`
  and `rafka up --zk` take; `warnings()` says what is legal but unwise (an even size);
  `local_server()` is the one at an address of this machine (`rafka zookeeper start --id auto`).
- `member_settings(ensemble, my_id)`: the lines a member adds to a standalone server's zoo.cfg.
- `EnsembleMember`: one member, an `EmbeddedZooKeeper` (the same process handling: start, stop,
  kill, restart and detach by PID) whose readiness is `srvr` answering `Mode: leader` or
  `Mode: follower`; `start(wait_for_quorum=False)` returns once it listens, since a member alone
  has no quorum until a majority is up. `rafka zookeeper start` runs one, detached.
- `server_mode(host, port)` and `ensemble_modes(address)`: what each server says it is.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from rafka.common.waiting import wait_until
from rafka.coordination.embedded import (
    QUORUM_MAIN,
    EmbeddedZooKeeper,
    ZooKeeperAddress,
    bind_problem,
    four_letter_word,
    free_port,
)
from rafka.coordination.errors import (
    CoordinationError,
    ZooKeeperPortInUseError,
    ZooKeeperServerError,
    ZooKeeperStartError,
)

DEFAULT_QUORUM_PORT = 2888
DEFAULT_ELECTION_PORT = 3888
DEFAULT_CLIENT_PORT = 2181
MAX_SERVER_ID = 255  # ZooKeeper's documented range for myid: 1 to 255
MIN_SIZE = 3
LARGEST_ADVISED_SIZE = 7
# A follower that hears nothing from the leader for syncLimit ticks drops it and elects another,
# so a leader cut off silently (its packets dropped, not refused) is replaced within about 3 s,
# well inside the brokers' 6 s sessions: with Kafka's documented timing (tickTime 2000,
# syncLimit 2) the ensemble stopped serving for 5 to 8 s, and every broker fenced itself as cut
# off. Session timeouts are their own (minSessionTimeout and maxSessionTimeout are set).
DEFAULT_TICK_TIME_MS = 1000
DEFAULT_INIT_LIMIT = 10
DEFAULT_SYNC_LIMIT = 3

# The modes `srvr` reports for a member that serves.
QUORUM_MODES = ("leader", "follower", "observer")
NOT_SERVING = "not serving"  # it answers, but has no quorum (it is looking for a leader)
UNREACHABLE = "unreachable"

_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]"
_SERVER = re.compile(
    rf"^(?:(?P<id>\d+)=)?(?P<host>{_HOST})"
    rf"(?::(?P<quorum>\d+):(?P<election>\d+))?"
    rf"(?:;(?:(?P<client_host>{_HOST}):)?(?P<client>\d+))?$"
)
_SERVER_LINE = re.compile(r"^server\.(?P<id>\d+)$")
_WILDCARDS = ("0.0.0.0", "[::]", "[0:0:0:0:0:0:0:0]")
_FORMAT = ("'host[:quorumPort:electionPort][;[clientAddress:]clientPort]', e.g. "
           "'zk1:2888:3888,zk2:2888:3888,zk3:2888:3888'")


class InvalidEnsembleError(CoordinationError, ValueError):
    """An ensemble's server list or a member's id is malformed or inconsistent."""


@dataclass(frozen=True)
class EnsembleServer:
    """One server of an ensemble: its `server.<id>` line."""

    id: int
    host: str
    quorum_port: int = DEFAULT_QUORUM_PORT
    election_port: int = DEFAULT_ELECTION_PORT
    client_port: int = DEFAULT_CLIENT_PORT
    # Where its clients connect, if not `host` (ZooKeeper's `;clientAddress:clientPort`).
    client_host: str | None = None

    @property
    def client_address(self) -> tuple[str, int]:
        """Where a client reaches this server: its client address, or its host if the client
        port listens on every interface."""
        host = self.client_host
        if host is None or host in _WILDCARDS:
            host = self.host
        return host, self.client_port

    def line(self, client_host: str | None = None) -> str:
        """The value of `server.<id>` (ZooKeeper 3.5+): `host:quorum:election;client:port`."""
        client = client_host or self.client_host or self.host
        if ":" in client and not client.startswith("["):
            client = f"[{client}]"  # an IPv6 address, as a bind address is given
        return (f"{self.host}:{self.quorum_port}:{self.election_port};"
                f"{client}:{self.client_port}")

    def __str__(self) -> str:
        """As `--servers` takes it."""
        client = f"{self.client_host}:" if self.client_host else ""
        return (f"{self.id}={self.host}:{self.quorum_port}:{self.election_port};"
                f"{client}{self.client_port}")


@dataclass(frozen=True)
class Ensemble:
    """The servers of a ZooKeeper ensemble, checked: ids 1..255 and unique, at least 3 servers,
    no two listeners on the same host and port."""

    servers: tuple[EnsembleServer, ...]

    def __post_init__(self) -> None:
        _check(self.servers)

    @classmethod
    def parse(cls, text: str, *, client_port: int = DEFAULT_CLIENT_PORT) -> Ensemble:
        """`host[:quorumPort:electionPort][;[clientAddress:]clientPort]`, comma-separated; ids
        are 1, 2, 3... by position unless every entry names its own (`2=zk2:2888:3888`).
        Ports left out are 2888, 3888 and `client_port`."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidEnsembleError(f"the ensemble's servers must be a list like {_FORMAT}, "
                                       f"got {text!r}")
        servers, named = [], set()
        for position, entry in enumerate(text.strip().split(","), start=1):
            match = _SERVER.match(entry.strip())
            if match is None:
                raise InvalidEnsembleError(
                    f"ensemble server {entry.strip()!r} is not {_FORMAT}"
                    + (" (observers are not supported)" if "observer" in entry else ""))
            named.add(match["id"] is not None)
            servers.append(EnsembleServer(
                int(match["id"]) if match["id"] else position,
                match["host"],
                quorum_port=int(match["quorum"] or DEFAULT_QUORUM_PORT),
                election_port=int(match["election"] or DEFAULT_ELECTION_PORT),
                client_port=int(match["client"] or client_port),
                client_host=match["client_host"],
            ))
        if len(named) > 1:
            raise InvalidEnsembleError(
                f"ensemble servers {text!r}: give every server its id ('1=zk1:2888:3888,...') "
                f"or none (ids are then 1, 2, 3... by position)")
        return cls(tuple(servers))

    @classmethod
    def from_settings(cls, settings: dict[str, str]) -> Ensemble:
        """The ensemble of a zoo.cfg's `server.<id>` lines (see `parse_config`)."""
        entries = []
        for key, value in settings.items():
            match = _SERVER_LINE.match(key)
            if match:
                entries.append(f"{int(match['id'])}={value}")
        if not entries:
            raise InvalidEnsembleError("the config has no server.<id> lines: not an ensemble")
        return cls.parse(",".join(entries))

    @classmethod
    def on_free_ports(cls, size: int = 3, host: str = "127.0.0.1") -> Ensemble:
        """`size` servers on this machine, each on free ports: for tests and trials."""
        ports = [free_port(host) for _ in range(3 * size)]
        if len(set(ports)) < len(ports):  # the kernel handed a port out twice: ask again
            return cls.on_free_ports(size, host)
        return cls(tuple(EnsembleServer(index + 1, host, ports[3 * index], ports[3 * index + 1],
                                        ports[3 * index + 2])
                         for index in range(size)))

    @property
    def ids(self) -> list[int]:
        return [server.id for server in self.servers]

    @property
    def majority(self) -> int:
        """How many members must be up for the ensemble to serve."""
        return len(self.servers) // 2 + 1

    def server(self, server_id: int) -> EnsembleServer:
        for server in self.servers:
            if server.id == server_id:
                return server
        raise InvalidEnsembleError(
            f"server id {server_id} is not in the ensemble (its ids: "
            f"{', '.join(map(str, self.ids))})")

    def local_server(self, is_local: Callable[[str], bool] | None = None) -> EnsembleServer:
        """The one server whose host is an address of this machine (`--id auto`: the same
        command on every machine). `is_local` decides (default: `is_local_address`)."""
        is_local = is_local or is_local_address
        mine = [server for server in self.servers if is_local(server.host)]
        if len(mine) == 1:
            return mine[0]
        if not mine:
            raise InvalidEnsembleError(
                f"no server of the ensemble ({', '.join(s.host for s in self.servers)}) is an "
                f"address of this machine: name this member's id")
        raise InvalidEnsembleError(
            f"servers {', '.join(str(s.id) for s in mine)} all name addresses of this "
            f"machine: name this member's id")

    @property
    def connect_string(self) -> ZooKeeperAddress:
        """Where clients connect: every server's client address, `zk1:2181,zk2:2181,...`."""
        return ZooKeeperAddress(tuple(server.client_address for server in self.servers))

    def warnings(self) -> list[str]:
        """What ZooKeeper accepts but is unwise, one sentence each."""
        size = len(self.servers)
        notes = []
        if size % 2 == 0:
            notes.append(
                f"an ensemble of {size} servers survives no more failures than one of {size - 1} "
                f"(a majority is {self.majority}): use an odd number, 3 or 5")
        if size > LARGEST_ADVISED_SIZE:
            notes.append(f"an ensemble of {size} servers makes every write wait for "
                         f"{self.majority} of them: 5 or 7 is usually enough")
        return notes

    def __str__(self) -> str:
        return ",".join(str(server) for server in self.servers)


def _check(servers: Sequence[EnsembleServer]) -> None:
    if len(servers) < MIN_SIZE:
        raise InvalidEnsembleError(
            f"an ensemble needs at least {MIN_SIZE} servers (3 or 5), got {len(servers)}: "
            f"with fewer it survives no failure, and one standalone server (`rafka up` runs "
            f"one) does as well")
    seen_ids: set[int] = set()
    listeners: dict[tuple[str, int], str] = {}
    for server in servers:
        validate_server_id(server.id)
        if server.id in seen_ids:
            raise InvalidEnsembleError(f"server id {server.id} appears twice in the ensemble")
        seen_ids.add(server.id)
        if server.host in _WILDCARDS:
            raise InvalidEnsembleError(
                f"server {server.id}'s host {server.host} is not an address the others can "
                f"reach: name the machine (its IP or hostname)")
        client_host, _ = server.client_address
        for what, host, port in (("quorum", server.host, server.quorum_port),
                                 ("election", server.host, server.election_port),
                                 ("client", client_host, server.client_port)):
            if not 0 < port < 65536:
                raise InvalidEnsembleError(f"server {server.id}'s {what} port {port} is not a "
                                           f"port (1 to 65535)")
            other = listeners.setdefault((host, port), f"server {server.id}'s {what} port")
            if other != f"server {server.id}'s {what} port":
                raise InvalidEnsembleError(
                    f"{host}:{port} is both {other} and server {server.id}'s {what} port: "
                    f"servers on one machine need ports of their own")


def validate_server_id(server_id: int) -> int:
    """A member's id (`myid`): an integer from 1 to 255."""
    if isinstance(server_id, bool) or not isinstance(server_id, int) or not (
            1 <= server_id <= MAX_SERVER_ID):
        raise InvalidEnsembleError(
            f"a ZooKeeper server id must be an integer from 1 to {MAX_SERVER_ID}, "
            f"got {server_id!r}")
    return server_id


def member_settings(
    ensemble: Ensemble,
    my_id: int,
    *,
    client_host: str | None = None,
    init_limit: int = DEFAULT_INIT_LIMIT,
    sync_limit: int = DEFAULT_SYNC_LIMIT,
) -> dict[str, object]:
    """What member `my_id` adds to a standalone server's zoo.cfg: the limits and the servers.

    Its own line carries `client_host`, the address its client port binds (its
    `clientPortAddress`: ZooKeeper refuses a config where the two differ).
    """
    me = ensemble.server(validate_server_id(my_id))
    for name, value in (("initLimit", init_limit), ("syncLimit", sync_limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidEnsembleError(f"{name} must be a positive number of ticks, "
                                       f"got {value!r}")
    settings: dict[str, object] = {
        "initLimit": init_limit,
        "syncLimit": sync_limit,
        # The servers are fixed by this file: ZooKeeper must not rewrite it (dynamic reconfig).
        "reconfigEnabled": "false",
    }
    for server in ensemble.servers:
        own = server.id == me.id
        settings[f"server.{server.id}"] = server.line(client_host if own else None)
    return settings


def parse_config(text: str) -> dict[str, str]:
    """zoo.cfg's settings (`key=value` lines; `#` comments and blank lines skipped)."""
    settings = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def mode_of(srvr_answer: str) -> str:
    """The mode in an answer to `srvr` ("leader", "follower", "standalone"), or NOT_SERVING
    (a member without a quorum answers "This ZooKeeper instance is not currently serving")."""
    for line in srvr_answer.splitlines():
        if line.startswith("Mode:"):
            return line.removeprefix("Mode:").strip()
    return NOT_SERVING


def server_mode(host: str, port: int, timeout_s: float = 2.0) -> str:
    """What the server at `host:port` says it is: a mode, NOT_SERVING or UNREACHABLE."""
    try:
        answer = four_letter_word(host.strip("[]"), port, "srvr", timeout_s)
    except OSError:
        return UNREACHABLE
    return mode_of(answer) if answer else UNREACHABLE


def ensemble_modes(address: ZooKeeperAddress | str, timeout_s: float = 2.0) -> dict[str, str]:
    """`host:port` -> mode, for every server of a connection string."""
    if isinstance(address, str):
        address = ZooKeeperAddress.parse(address)
    return {f"{host}:{port}": server_mode(host, port, timeout_s) for host, port in address.hosts}


def serving(modes: Iterable[str]) -> bool:
    """Whether any of these modes serves clients."""
    return any(mode in (*QUORUM_MODES, "standalone") for mode in modes)


def is_local_address(host: str) -> bool:
    """Whether `host` (a name or an address) is an address of this machine: one it can bind."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    for family, kind, _, _, address in infos:
        with socket.socket(family, kind) as sock:
            try:
                sock.bind((address[0], 0))
            except OSError:
                continue
            return True
    return False


class EnsembleMember(EmbeddedZooKeeper):
    """One member of a ZooKeeper ensemble in a child JVM, stopped by its PID and nothing else.

    >>> ensemble = Ensemble.parse("zk1:2888:3888,zk2:2888:3888,zk3:2888:3888")
    >>> member = EnsembleMember("/var/lib/rafka/zk", ensemble, 1).start(wait_for_quorum=False)
    >>> member.wait_for_quorum(60)       # "leader" or "follower", once a majority is up
    >>> str(member.address)              # zk1:2181,zk2:2181,zk3:2181: what clients connect to

    `host` is the address its client port binds (default: its own server's client address;
    "0.0.0.0" for every interface); a secure client port (`tls`) binds the server's address.
    The quorum and election ports bind its server's host, which must be an address of this
    machine. Everything else is `EmbeddedZooKeeper`'s.
    """

    main_class = QUORUM_MAIN

    def __init__(
        self,
        data_dir: str | Path,
        ensemble: Ensemble | str,
        my_id: int,
        *,
        host: str | None = None,
        tick_time_ms: int = DEFAULT_TICK_TIME_MS,
        init_limit: int = DEFAULT_INIT_LIMIT,
        sync_limit: int = DEFAULT_SYNC_LIMIT,
        **options: object,
    ) -> None:
        if isinstance(ensemble, str):
            ensemble = Ensemble.parse(ensemble)
        self.ensemble = ensemble
        self.id = validate_server_id(my_id)
        self.server = ensemble.server(my_id)
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        if "port" in options:
            raise TypeError("a member's client port is its server's: set it in the ensemble")
        bind = host or self.server.client_host or self.server.host
        super().__init__(data_dir, port=self.server.client_port, host=bind.strip("[]"),
                         tick_time_ms=tick_time_ms, **options)  # type: ignore[arg-type]
        # A secure client port is where other machines reach this member, whatever address
        # the plaintext one binds (127.0.0.1, where only the secure one may be reached).
        self.secure_host = (self.server.client_host or self.server.host).strip("[]")
        member_settings(ensemble, my_id, init_limit=init_limit, sync_limit=sync_limit)  # checks

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"ZooKeeper member {self.id}"

    @property
    def address(self) -> ZooKeeperAddress:
        """The ensemble's connection string: what clients connect to."""
        return self.ensemble.connect_string

    @property
    def myid_path(self) -> Path:
        return self.data_dir / "data" / "myid"

    def start(self, *, wait_for_quorum: bool = True) -> EnsembleMember:
        """Start the member; with `wait_for_quorum` wait (up to `start_timeout_s`) until it
        leads or follows, else only until it listens (the others may not be up yet)."""
        if self.running():
            return self
        self._check_ports()
        self._check_data_dir()
        self._launch(self.server.client_port)
        if wait_for_quorum:
            self._wait_or_stop()
        return self

    def exec_in_place(self) -> NoReturn:
        """As `EmbeddedZooKeeper.exec_in_place`, once its ports and data dir are checked as
        `start` checks them: the JVM joins a quorum once a majority of members is up."""
        self._check_ports()
        self._check_data_dir()
        super().exec_in_place()

    def restart(self, pause_s: float = 0.0, *, kill: bool = True,
                wait_for_quorum: bool = True) -> EnsembleMember:
        """As `EmbeddedZooKeeper.restart`; with `wait_for_quorum`, until it leads or follows."""
        super().restart(pause_s, kill=kill)
        if wait_for_quorum:
            self._wait_or_stop()
        return self

    def mode(self, timeout_s: float = 2.0) -> str:
        """What `srvr` says: "leader", "follower", NOT_SERVING, or UNREACHABLE."""
        return server_mode(self.host, self.server.client_port, timeout_s)

    def wait_for_quorum(self, timeout_s: float | None = None) -> str:
        """Wait until this member leads or follows; its mode. ZooKeeperStartError if it has no
        quorum within `timeout_s` (default `start_timeout_s`), or is not running."""
        timeout_s = self.start_timeout_s if timeout_s is None else timeout_s
        process = self._process

        def in_quorum() -> str | None:
            if process is None or process.poll() is not None:
                self._raise_start_failure("is not running")
            mode = self.mode()
            return mode if mode in QUORUM_MODES else None

        try:
            mode = wait_until(in_quorum, timeout_s, f"{self.label} to join a quorum",
                              interval_s=0.1)
            assert mode is not None  # wait_until answers only a truthy result
            return mode
        except TimeoutError:
            raise ZooKeeperStartError(
                f"{self.label} found no quorum within {timeout_s:g} s: a majority "
                f"({self.ensemble.majority} of {len(self.ensemble.servers)}) must be up and "
                f"reach each other's quorum and election ports; its log {self.log_path} ends "
                f"with:\n{self.log_tail()}") from None

    def _wait_or_stop(self) -> None:
        try:
            self.wait_for_quorum()
        except BaseException:
            self.stop()
            raise

    def _serving(self, srvr_answer: str) -> bool:
        # Launched: it answers on its client port (with or without a quorum).
        return bool(srvr_answer)

    def _ready(self, host: str, port: int) -> bool:
        if self.tls is None:
            return super()._ready(host, port)
        # With a secure port the server is Netty's, which answers no four-letter word until
        # the member leads or follows (it closes the connection, failing on the server it
        # does not have yet): launched is then its client port taking connections.
        with socket.create_connection((host, port), timeout=2.0):
            return True

    def _config(self, port: int) -> dict[str, object]:
        settings = super()._config(port)
        settings.update(member_settings(self.ensemble, self.id, client_host=self.host,
                                        init_limit=self.init_limit, sync_limit=self.sync_limit))
        return settings

    def _write_config(self, port: int) -> Path:
        path = super()._write_config(port)
        self.myid_path.write_text(f"{self.id}\n")
        return path

    def _check_data_dir(self) -> None:
        """A data dir holds one member's data: refuse to start another id on it."""
        with contextlib.suppress(FileNotFoundError, ValueError):
            recorded = int(self.myid_path.read_text().strip())
            if recorded != self.id:
                raise ZooKeeperServerError(
                    f"{self.data_dir} holds the data of ZooKeeper member {recorded}, not "
                    f"{self.id}: give each member a data dir of its own")

    def _check_ports(self) -> None:
        server = self.server
        for what, host, port in (("client", self.host, server.client_port),
                                 ("quorum", server.host, server.quorum_port),
                                 ("election", server.host, server.election_port)):
            problem = bind_problem(host, port, reuse_address=True)
            if problem is None:
                continue
            if "assign" in problem.lower() or "resolve" in problem.lower():
                raise ZooKeeperStartError(
                    f"{self.label} cannot listen on {host}:{port}, its {what} port ({problem}): "
                    f"server {server.id} of the ensemble must name an address of this machine")
            raise ZooKeeperPortInUseError(
                f"{self.label} cannot listen on {host}:{port}, its {what} port ({problem}): "
                f"stop what holds it, or give server {server.id} other ports")

    def _raise_start_failure(self, what: str) -> None:
        tail = self.log_tail()
        if "Address already in use" in tail:
            raise ZooKeeperPortInUseError(
                f"{self.label} could not bind one of its ports ({self.server.line(self.host)}): "
                f"another process took it; its log {self.log_path} ends with:\n{tail}")
        raise ZooKeeperStartError(
            f"{self.label} {what}; its log {self.log_path} ends with:\n{tail}")


def start_members(members: Sequence[EnsembleMember], timeout_s: float = 60.0) -> None:
    """Start members of one ensemble together and wait until each leads or follows; on failure
    every member started here is stopped again."""
    started: list[EnsembleMember] = []
    try:
        for member in members:
            started.append(member.start(wait_for_quorum=False))
        for member in members:
            member.wait_for_quorum(timeout_s)
    except BaseException:
        for member in started:
            member.stop()
        raise
