"""`ClusterStore`: one ZooKeeper session of one cluster, under the cluster's chroot.

The store is a thin layer over a `KazooClient`:

- it roots the client at `<address chroot>/rafka/<cluster>` (created on first start, with the
  cluster's ACL, see `rafka.coordination.security`);
- it stores JSON (Kafka's field names, see `rafka.coordination.models`) and returns every value with
  its znode version (`Versioned`); `write` is conditional on the version read and raises
  `StaleVersionError` (ZooKeeper's BadVersion) when someone changed the znode in between;
- it turns kazoo's exceptions into the typed errors of `rafka.coordination.errors`, and bounds every
  request by `request_timeout_s`, so a caller never hangs on a ZooKeeper that is gone;
- it reports the session's life as `SessionEvent`s, telling a reconnect of the same session
  (ephemeral znodes still ours) from a new session after expiry (ephemerals gone, watches gone).

Threads: kazoo runs its connection thread and a callback thread. Session listeners are called on
the connection thread (they must be quick and must not call ZooKeeper); follow-up ZooKeeper work
runs on the store's worker thread (`run_in_worker`), and the users' callbacks of watches,
registrations and elections on the store's event thread (`run_callback`), one at a time, in the
order the events happened. Callbacks must be quick: an actor hands them to its own loop.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

from rafka.common.waiting import wait_until
from rafka.coordination import layout
from rafka.coordination.embedded import ZooKeeperAddress
from rafka.coordination.errors import (
    CoordinationError,
    StaleVersionError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeNotEmptyError,
    ZooKeeperAuthError,
    ZooKeeperUnavailableError,
)
from rafka.coordination.models import Versioned
from rafka.coordination.security import (
    CREDENTIALS_FILE_ENV,
    AclPolicy,
    ClusterCredentials,
    as_credentials,
    cluster_acl,
)
from rafka.coordination.serial import SerialExecutor
from rafka.coordination.zookeeper_tls import client_tls

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 18_000
"""Kafka's default `zookeeper.session.timeout.ms` (since 2.5)."""
DEFAULT_CONNECT_TIMEOUT_S = 15.0

_CONNECTION_ERRORS = (
    ConnectionLoss,
    SessionExpiredError,
    ConnectionClosedError,
    OperationTimeoutError,
    KazooTimeoutError,
)


class SessionEvent(str, enum.Enum):
    """What happened to the store's ZooKeeper session."""

    CONNECTED = "connected"
    """A new session: the first one, or the one after an expiry. Nothing ephemeral exists yet."""
    RECONNECTED = "reconnected"
    """The connection is back and the session survived: ephemerals are still ours."""
    SUSPENDED = "suspended"
    """The connection dropped; the session may still be alive (or expire meanwhile)."""
    EXPIRED = "expired"
    """The session is gone: its ephemeral znodes are deleted and its watches dropped."""
    CLOSED = "closed"
    """`close()` was called; no event follows."""


SessionListener = Callable[[SessionEvent], None]


def encode(value: Any) -> bytes:
    """The bytes stored for `value`: bytes as they are, anything else as compact JSON."""
    if isinstance(value, bytes):
        return value
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def decode(data: bytes | None) -> Any:
    """Parse a znode's JSON; an empty znode (such as a deletion request) reads as None."""
    if not data:
        return None
    return json.loads(data.decode("utf-8"))



class BoundedConnectHandler(SequentialThreadingHandler):
    """Kazoo's threading handler, but a TCP connection to one server is given up after
    `connect_timeout_s`.

    Kazoo waits the whole session timeout for a connection to one server. A server whose
    packets are dropped silently (a network partition, not a refusal) then costs a disconnected
    client its session before it ever tries the next one, although a majority of the ensemble
    serves: on the test bed, every broker connected to a member that was cut off was fenced. The
    Java client waits the session timeout divided by the number of servers; so does this.
    """

    def __init__(self, connect_timeout_s: float) -> None:
        super().__init__()
        self.connect_timeout_s = connect_timeout_s

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        timeout = kwargs.get("timeout")
        kwargs["timeout"] = (self.connect_timeout_s if timeout is None
                             else min(timeout, self.connect_timeout_s))
        return super().create_connection(*args, **kwargs)


class ClusterStore:
    """A ZooKeeper session for one cluster, rooted at `<address chroot>/rafka/<cluster>`.

    Why this class is large: it is the one door to ZooKeeper, and what it does is one thing
    seen from three sides that share the same kazoo client, lock and threads: the session's
    life (connect, reconnect, expiry, reported as `SessionEvent`s), the requests made on it
    (each bounded by `request_timeout_s`, retried across a connection loss where idempotent),
    and the translation of kazoo's errors into rafka's, which depends on both. What each
    concern stores where is already elsewhere, by concern (`layout`, `registration`,
    `partition_state`, `admin`, `groups`, `watches`); splitting the session from its requests
    would only make each request reach into the other half.

    >>> store = ClusterStore("127.0.0.1:2181", "prod").start()
    >>> store.ensure_layout()
    >>> store.read("/controller_epoch")       # Versioned(value=0, version=0)
    """

    def __init__(
        self,
        address: ZooKeeperAddress | str,
        cluster: str,
        *,
        root: str = layout.DEFAULT_ROOT,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        request_timeout_s: float | None = None,
        credentials: ClusterCredentials | str | None = None,
        acl_policy: AclPolicy | str = AclPolicy.WORLD_READABLE,
        reconnect_max_delay_s: float = 1.0,
    ) -> None:
        base = address if isinstance(address, ZooKeeperAddress) else ZooKeeperAddress.parse(address)
        self.cluster = cluster
        self.base_address = base
        self.address = base.child(layout.cluster_chroot(cluster, root))
        self.root = root
        if session_timeout_ms <= 0:
            raise ValueError(f"session_timeout_ms must be positive, got {session_timeout_ms}")
        self.requested_session_timeout_ms = session_timeout_ms
        self.connect_timeout_s = connect_timeout_s
        # A request may wait while the client reconnects; past a session timeout the answer
        # can only be "expired", so waiting longer than that (plus slack) is pointless.
        self.request_timeout_s = request_timeout_s or max(10.0, session_timeout_ms / 1000 + 5)
        self.reconnect_max_delay_s = reconnect_max_delay_s
        self.credentials = as_credentials(credentials)
        self.acl_policy = AclPolicy(acl_policy)
        self.acl = cluster_acl(self.credentials, self.acl_policy)
        # Over TLS when this process's environment says so (Kafka's zookeeper.ssl.*).
        tls = client_tls()
        self._tls_options = tls.kazoo_options() if tls else {}
        self._client: KazooClient | None = None
        self._lock = threading.Lock()
        self._listeners: list[SessionListener] = []
        self._session_id: int | None = None
        self._connected = False
        self._closing = False
        self._worker: SerialExecutor | None = None
        self._events: SerialExecutor | None = None
        # How many znodes this client has read, its watches' reads included: what the tests
        # count to show that a request is answered without asking ZooKeeper.
        self.reads = 0

    # --- life cycle ---------------------------------------------------------------------------

    def start(self) -> ClusterStore:
        """Connect (within `connect_timeout_s`) and create the cluster's chroot if missing."""
        if self._client is not None:
            return self
        self._closing = False
        self._worker = SerialExecutor(f"rafka-zk-worker-{self.cluster}")
        self._events = SerialExecutor(f"rafka-zk-events-{self.cluster}")
        session_timeout_s = self.requested_session_timeout_ms / 1000
        client = KazooClient(
            hosts=str(self.address),
            timeout=session_timeout_s,
            handler=BoundedConnectHandler(
                max(session_timeout_s / len(self.base_address.hosts), 1.0)),
            connection_retry=KazooRetry(
                max_tries=-1, delay=0.05, backoff=2, max_delay=self.reconnect_max_delay_s
            ),
            auth_data=self.credentials.auth_data if self.credentials else None,
            default_acl=self.acl,
            **self._tls_options,
        )
        client.add_listener(self._on_kazoo_state)
        self._client = client
        try:
            with warnings.catch_warnings():
                # Kazoo warns when the chroot is missing; creating it is our next step.
                warnings.filterwarnings("ignore", message="No chroot path exists")
                client.start(timeout=self.connect_timeout_s)
        except KazooTimeoutError:
            # kazoo has stopped and closed its client already.
            self._client = None
            self._stop_executors()
            raise ZooKeeperUnavailableError(
                f"could not connect to ZooKeeper at {self.base_address.servers} within "
                f"{self.connect_timeout_s:g} s: check the address and that ZooKeeper is "
                f"running there (or start the embedded one)"
            ) from None
        except BaseException:
            self.close()
            raise
        try:
            if not self._call("exists", "/", lambda: client.exists_async("/")):
                self._create_chroot()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Close the session (its ephemeral znodes go at once) and stop the store's threads."""
        client = self._client
        if client is None:
            return
        self._closing = True
        self._emit(SessionEvent.CLOSED)
        with self._lock:
            self._connected = False
            self._session_id = None
        with contextlib.suppress(Exception):
            client.stop()
        with contextlib.suppress(Exception):
            client.close()
        self._client = None
        self._stop_executors()

    def __enter__(self) -> ClusterStore:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _stop_executors(self) -> None:
        for executor in (self._worker, self._events):
            if executor is not None:
                executor.close()
        self._worker = self._events = None

    def _create_chroot(self) -> None:
        """Create `<chroot>/rafka/<cluster>` with a short-lived client outside the chroot.

        Kazoo cannot create the chroot it is rooted at. `/rafka` is shared by every cluster, so
        it stays open; the cluster's own node gets the cluster's ACL.
        """
        bootstrap = KazooClient(
            hosts=self.base_address.servers,
            timeout=self.requested_session_timeout_ms / 1000,
            auth_data=self.credentials.auth_data if self.credentials else None,
            **self._tls_options,
        )
        try:
            bootstrap.start(timeout=self.connect_timeout_s)
        except KazooTimeoutError:
            raise ZooKeeperUnavailableError(
                f"could not connect to ZooKeeper at {self.base_address.servers} to create the "
                f"chroot {self.address.chroot}: check that ZooKeeper is running"
            ) from None
        try:
            parent = self.address.chroot.rsplit("/", 1)[0]
            with self._errors("create", parent):
                bootstrap.ensure_path(parent, acl=OPEN_ACL_UNSAFE)
            with self._errors("create", self.address.chroot), contextlib.suppress(NodeExistsError):
                bootstrap.create(self.address.chroot, acl=self.acl)
        finally:
            bootstrap.stop()
            bootstrap.close()

    def ensure_layout(self) -> None:
        """Create the layout's persistent containers (docs/zookeeper.md) and `/controller_epoch`.

        Idempotent, and it only checks what exists, so a read-only client may call it too.
        """
        for path in layout.PERSISTENT_PATHS:
            if not self.exists(path):
                self.ensure_path(path)
        if not self.exists(layout.CONTROLLER_EPOCH):
            with contextlib.suppress(ZNodeExistsError):
                self.create(layout.CONTROLLER_EPOCH, 0)

    # --- session --------------------------------------------------------------------------------

    @property
    def client(self) -> KazooClient:
        """The underlying kazoo client (rooted at the cluster's chroot)."""
        if self._client is None:
            raise ZooKeeperUnavailableError(
                f"the ZooKeeper store of cluster {self.cluster!r} is not started: call start()"
            )
        return self._client

    @property
    def started(self) -> bool:
        return self._client is not None

    @property
    def connected(self) -> bool:
        """Whether the session is connected now (not suspended, expired or closed)."""
        return self._connected

    @property
    def session_id(self) -> int | None:
        """The current session's id (also while suspended); None once expired or closed."""
        return self._session_id

    @property
    def session_timeout_ms(self) -> int:
        """The session timeout the server granted (the requested one before connecting)."""
        client = self._client
        if client is not None and client.connected:
            # kazoo keeps the negotiated value only in this private attribute.
            return int(client._session_timeout)
        return self.requested_session_timeout_ms

    def add_session_listener(self, listener: SessionListener) -> None:
        """Call `listener(SessionEvent)` on every session change.

        It runs on kazoo's connection thread: it must be quick and must not call ZooKeeper
        (hand work to `run_in_worker`).
        """
        with self._lock:
            self._listeners.append(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def run_in_worker(self, function: Callable[..., object], *args: object) -> None:
        """Run ZooKeeper follow-up work on the store's worker thread, in submission order."""
        if self._worker is not None:
            self._worker.submit(function, *args)

    def run_callback(self, function: Callable[..., object], *args: object) -> None:
        """Run a user's callback on the store's event thread, in submission order."""
        if self._events is not None:
            self._events.submit(function, *args)

    def wait_connected(self, timeout_s: float | None = None) -> bool:
        """Wait until the session is connected; True if it is."""
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: self._connected or self._closing,
                       self.request_timeout_s if timeout_s is None else timeout_s,
                       "the ZooKeeper session to connect", interval_s=0.02)
        return self._connected

    def _on_kazoo_state(self, state: str) -> None:
        # Kazoo's connection thread: record the change and tell the listeners, nothing more.
        if self._closing or self._client is None:
            return
        events: list[SessionEvent] = []
        with self._lock:
            if state == KazooState.CONNECTED:
                client_id = self._client.client_id
                session_id = client_id[0] if client_id else None
                previous, self._session_id = self._session_id, session_id
                self._connected = True
                if previous is not None and previous != session_id:
                    # A new session without a LOST seen first: the old one expired.
                    events = [SessionEvent.EXPIRED, SessionEvent.CONNECTED]
                elif previous == session_id:
                    events = [SessionEvent.RECONNECTED]
                else:
                    events = [SessionEvent.CONNECTED]
            elif state == KazooState.SUSPENDED:
                self._connected = False
                events = [SessionEvent.SUSPENDED]
            else:  # LOST: the session expired (close() is filtered out above)
                self._connected = False
                self._session_id = None
                events = [SessionEvent.EXPIRED]
        for event in events:
            log.info("cluster %s: ZooKeeper session %s", self.cluster, event.value)
            self._emit(event)

    def _emit(self, event: SessionEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.exception("session listener %r failed on %s", listener, event)

    # --- requests -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, operation: str, path: str, version: int | None = None) -> Iterator[None]:
        """Turn kazoo's exceptions into the typed errors of `rafka.coordination.errors`."""
        try:
            yield
        except BadVersionError:
            raise StaleVersionError(
                f"{path} is no longer at version {version}: someone else changed it since it "
                f"was read; read it again and decide afresh (ZooKeeper BadVersion)",
                path=path,
                expected_version=version,
            ) from None
        except NoNodeError:
            raise ZNodeMissingError(
                f"{operation} {path}: the znode (or its parent) does not exist in cluster "
                f"{self.cluster!r}; create it first (ensure_layout() creates the containers)"
            ) from None
        except NodeExistsError:
            raise ZNodeExistsError(f"create {path}: the znode exists already") from None
        except NotEmptyError:
            raise ZNodeNotEmptyError(
                f"delete {path}: the znode has children; delete them first (recursive=True)"
            ) from None
        except (NoAuthError, AuthFailedError):
            held = ("this client has no credentials" if self.credentials is None else
                    f"the credentials of user {self.credentials.user!r} are not the cluster's")
            raise ZooKeeperAuthError(
                f"ZooKeeper refused to {operation} {path}: the znodes of cluster "
                f"{self.cluster!r} are protected by digest ACLs and {held}; pass the cluster "
                f"credentials: on the command line its credentials file with "
                f"--zk-credentials-file FILE or ${CREDENTIALS_FILE_ENV}, in Python "
                f"zk_credentials='user:password' to Cluster.start or Cluster.connect"
            ) from None
        except _CONNECTION_ERRORS as error:
            raise ZooKeeperUnavailableError(
                f"ZooKeeper at {self.base_address.servers} did not answer {operation} {path} "
                f"({type(error).__name__}): the connection dropped or the session expired; "
                f"retry once reconnected, and check that ZooKeeper is running"
            ) from None

    def _call(
        self, operation: str, path: str, start: Callable[[], Any], version: int | None = None
    ) -> Any:
        """Run one kazoo request, bounded by `request_timeout_s`, with typed errors."""
        with self._errors(operation, path, version):
            return start().get(timeout=self.request_timeout_s)

    def _retrying(self, operation: str, path: str, start: Callable[[], Any]) -> Any:
        """A read, retried across a connection loss (reads are idempotent)."""
        self.reads += 1
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            try:
                return self._call(operation, path, start)
            except ZooKeeperUnavailableError:
                if self._closing or time.monotonic() >= deadline:
                    raise
                self.wait_connected(max(0.0, deadline - time.monotonic()))

    def exists(self, path: str) -> bool:
        return self.stat(path) is not None

    def stat(self, path: str, watch: Callable[..., object] | None = None) -> ZnodeStat | None:
        """The znode's stat (version, ephemeralOwner, czxid, ...), or None if it does not exist."""
        client = self.client
        return self._retrying("stat", path, lambda: client.exists_async(path, watch))

    def get(
        self, path: str, watch: Callable[..., object] | None = None
    ) -> tuple[bytes, ZnodeStat]:
        """The raw bytes and stat of a znode (`ZNodeMissingError` if it does not exist)."""
        client = self.client
        return self._retrying("read", path, lambda: client.get_async(path, watch))

    def children(self, path: str, watch: Callable[..., object] | None = None) -> list[str]:
        """The sorted child names of a znode (`ZNodeMissingError` if it does not exist)."""
        client = self.client
        return sorted(self._retrying("list", path, lambda: client.get_children_async(path, watch)))

    def children_or_empty(self, path: str) -> list[str]:
        try:
            return self.children(path)
        except ZNodeMissingError:
            return []

    def read(self, path: str, watch: Callable[..., object] | None = None) -> Versioned[Any]:
        """The JSON value of a znode with its version (`ZNodeMissingError` if missing)."""
        data, stat = self.get(path, watch)
        return Versioned(decode(data), stat.version)

    def read_optional(self, path: str) -> Versioned[Any] | None:
        try:
            return self.read(path)
        except ZNodeMissingError:
            return None

    def read_many_optional(self, paths: list[str]) -> list[Versioned[Any] | None]:
        """Decoded values of many znodes (None where missing), pipelined: every request is sent
        before the first answer is awaited, so a thousand reads cost about one round trip."""
        client = self.client
        self.reads += len(paths)
        pending = [(path, client.get_async(path)) for path in paths]
        found: list[Versioned[Any] | None] = []
        for path, result in pending:
            try:
                with self._errors("read", path):
                    data, stat = result.get(timeout=self.request_timeout_s)
            except ZNodeMissingError:
                found.append(None)
                continue
            found.append(Versioned(decode(data), stat.version))
        return found

    def write(self, path: str, value: Any, version: int) -> int:
        """Set a znode if it is still at `version`; return the new version.

        Raises `StaleVersionError` if someone changed it since. If the connection drops before
        the answer, it looks again once reconnected: finding our value at `version + 1` means
        the write went through (Kafka's controller does the same check).
        """
        data = encode(value)
        client = self.client
        try:
            stat = self._call(
                "write", path, lambda: client.set_async(path, data, version), version
            )
            return int(stat.version)
        except ZooKeeperUnavailableError:
            if self._closing or not self.wait_connected():
                raise
        current, stat = self.get(path)
        if stat.version == version + 1 and current == data:
            return int(stat.version)
        if stat.version == version:
            stat = self._call(
                "write", path, lambda: client.set_async(path, data, version), version
            )
            return int(stat.version)
        raise StaleVersionError(
            f"{path} is no longer at version {version}: someone else changed it since it was "
            f"read; read it again and decide afresh (ZooKeeper BadVersion)",
            path=path,
            expected_version=version,
        )

    def set(self, path: str, value: Any) -> int:
        """Set a znode whatever its version (for values with one writer); return the version."""
        data = encode(value)
        client = self.client
        return int(self._call("write", path, lambda: client.set_async(path, data, -1)).version)

    def create(
        self,
        path: str,
        value: Any = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = True,
        private: bool = False,
    ) -> str:
        """Create a znode holding `value` (bytes as they are, else JSON); return its path.

        `ZNodeExistsError` if it exists. Missing parents are created (persistent) if `makepath`.
        A `private` znode holds a secret: only the cluster's credentials may read it.
        """
        data = b"" if value is None else encode(value)
        client = self.client
        acl = cluster_acl(self.credentials, AclPolicy.CLOSED) if private else self.acl

        def start() -> Any:
            return client.create_async(
                path, data, acl=acl, ephemeral=ephemeral, sequence=sequential
            )

        try:
            return self._call("create", path, start)
        except ZNodeMissingError:
            if not makepath:
                raise
        self.ensure_path(path.rsplit("/", 1)[0] or "/")
        return self._call("create", path, start)

    def ensure_path(self, path: str) -> None:
        """Create `path` and its missing parents as empty persistent znodes."""
        client = self.client
        current = ""
        for part in [p for p in path.split("/") if p]:
            current = f"{current}/{part}"
            if self.stat(current) is None:
                with contextlib.suppress(ZNodeExistsError):
                    self._call(
                        "create", current, functools.partial(client.create_async, current,
                                                             acl=self.acl)
                    )

    def delete(self, path: str, *, version: int | None = None, recursive: bool = False) -> bool:
        """Delete a znode (at `version` if given); False if it did not exist."""
        client = self.client
        try:
            if recursive:
                for child in self.children(path):
                    self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
            self._call(
                "delete",
                path,
                lambda: client.delete_async(path, -1 if version is None else version),
                version,
            )
        except ZNodeMissingError:
            return False
        return True

    def delete_if_owned(self, path: str, session: int) -> None:
        """Delete the ephemeral znode at `path` if `session` still owns it: a best effort, for a
        session giving up what it holds (on any coordination error the znode is left to go
        with the session)."""
        with contextlib.suppress(CoordinationError):
            stat = self.stat(path)
            if stat is not None and stat.ephemeralOwner == session:
                self.delete(path, version=stat.version)

    def transaction(self) -> TransactionRequest:
        """A kazoo multi-op; run it with `commit()`. Creates get the cluster's ACL by default."""
        return self.client.transaction()

    def commit(self, transaction: TransactionRequest) -> list[Any]:
        """Run a multi-op atomically, raising the typed error of the first operation that failed.

        The error has the failing operation's path (`StaleVersionError.path`), so a caller can
        tell a fencing check from its own write.
        """
        results = self._call("commit", "(transaction)", transaction.commit_async)
        for operation, result in zip(transaction.operations, results, strict=False):
            if isinstance(result, Exception) and not isinstance(
                result, (RolledBackError, RuntimeInconsistency)
            ):
                path = self.client.unchroot(operation.path)
                version = getattr(operation, "version", None)
                with self._errors(type(operation).__name__.lower(), path, version):
                    raise result
        return list(results)
