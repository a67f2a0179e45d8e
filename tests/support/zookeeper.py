"""A real ZooKeeper in tests: a chroot of a test's own, and faults: expire a session, cut a
connection.

- `make_chroot(zookeeper, name)`: the server's address under `/tests/<name>`, created empty.
- `expire_session(store)`: the standard trick to expire a live session from outside: open a
  second client with the victim's session id and password (which makes the server drop the
  victim's connection), then close it, which closes the session on the server. The victim's
  ephemeral znodes go, and its next reconnect is told the session expired.
- `TcpProxy`: a TCP forwarder between a client and the server; `cut()` drops every connection
  through it (and refuses new ones) until `restore()`, to lose the connection without losing
  the session when restored within the session timeout.

No Ray and nothing of pytest here, so every layer's tests can use them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from kazoo.client import KazooClient

from rafka.coordination.embedded import EmbeddedZooKeeper, ZooKeeperAddress
from rafka.coordination.store import ClusterStore


def make_chroot(zookeeper: EmbeddedZooKeeper, name: str) -> ZooKeeperAddress:
    """The server's address under `/tests/<name>`, created empty."""
    address = zookeeper.address.child(f"tests/{name}")
    client = KazooClient(hosts=zookeeper.address.servers)
    client.start(timeout=15)
    try:
        client.ensure_path(address.chroot)
    finally:
        client.stop()
        client.close()
    return address


def expire_session(
    target: ClusterStore | KazooClient,
    *,
    servers: str | ZooKeeperAddress | None = None,
    timeout_s: float = 15.0,
) -> None:
    """Expire the target's current ZooKeeper session on the server, now.

    `servers` is where to reach the server directly, when the target connects through a proxy.
    """
    client = target.client if isinstance(target, ClusterStore) else target
    if isinstance(servers, ZooKeeperAddress):
        servers = servers.servers
    elif servers is None and isinstance(target, ClusterStore):
        servers = target.base_address.servers
    elif servers is None:
        servers = ",".join(f"{host}:{port}" for host, port in client.hosts)
    # kazoo's `client_id` is None while disconnected, but a suspended session is still alive
    # on the server and can be expired: take its id and password directly.
    session_id, password = client._session_id, client._session_passwd
    if not session_id:
        raise RuntimeError("the client has no session to expire: start it first")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        imposter = KazooClient(hosts=servers, client_id=(session_id, password), timeout=10)
        imposter.start(timeout=timeout_s)
        took_over = imposter.client_id is not None and imposter.client_id[0] == session_id
        imposter.stop()  # closes the session it took over
        imposter.close()
        if not took_over:
            return  # the server no longer knows the session: it is expired
    raise RuntimeError(f"session 0x{session_id:x} did not expire within {timeout_s} s")


class TcpProxy:
    """Forward `127.0.0.1:<port>` to a ZooKeeper server; `cut()` and `restore()` the link.

    With `source_host` (another loopback address, such as 127.0.0.2) the proxy reaches the
    server from there, so that ZooKeeper's `ip` ACLs can single out the client behind it.
    """

    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1",
                 source_host: str | None = None) -> None:
        self.target = (target_host, target_port)
        self.host = host
        self.source = (source_host, 0) if source_host else None
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, 0))
        self._listener.listen(64)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    @classmethod
    def to(cls, address: ZooKeeperAddress) -> TcpProxy:
        host, port = address.hosts[0]
        return cls(host, port)

    def address(self, chroot: str = "") -> ZooKeeperAddress:
        """The proxy's address, with a chroot."""
        return ZooKeeperAddress(((self.host, self.port),), chroot)

    def cut(self) -> None:
        """Drop every connection now, and refuse new ones until `restore()`."""
        with self._lock:
            self._cut = True
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._thread.join(2)
        _close(self._listener)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._cut:
                _close(downstream)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2,
                                                    source_address=self.source)
            except OSError:
                _close(downstream)
                continue
            upstream.settimeout(None)
            downstream.settimeout(None)
            with self._lock:
                if self._cut:
                    _close(downstream)
                    _close(upstream)
                    continue
                self._sockets.update((downstream, upstream))
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name="tcp-proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
