"""A client's blocking calls to replica hosts over connections kept to their data ports
(`TcpCalls`, `transport=tcp`, the default): a producer's `produce` and a consumer's `fetch`.
The other transport, an actor call each, is `rafka.actors.dataport.ray_calls.RayCalls`;
`rafka.actors.dataport.calls` has the interface both keep and picks one.

Nothing a client does over TCP blocks its thread but its own `wait`: a new connection's lookup
(where the host listens: an actor call), its connect and its writes all go on inside `wait`'s
`select`. A host that cannot answer (its node cut off, or its death unconfirmed while the GCS is
down) holds only the requests sent to it, as an actor call to it would
(`tests/actors/dataport/test_data_port.py`, `tests/harness/test_deployment.py`'s GCS-down test).

A connection
carries one request at a time, as Kafka's broker serves a connection, so a client keeps as many
to a host as it has requests there at once: a consumer usually one, a producer up to
`max.in.flight.requests.per.connection` (requests to one host carry every partition led there).

Over TCP the client learns where a host listens, and the token to open with, from an actor call
(`ReplicaHost.data_port_address`), or, when that call fails with the host still alive to Ray or
stays unanswered for `ZOOKEEPER_AFTER_S`, from the znode the host's broker published
(`rafka.coordination.data_ports`), if the client holds the cluster's ZooKeeper store: a
process whose connection to Ray's GCS is half-open calls a restarted host at its old address for
minutes. A connection that fails in any way, or whose answer is later than the deadline its
request was sent with, is dropped, and the request fails as a Ray call to a host that died
would: retriable, after which the client asks for the leaders again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import ray

from rafka.actors.dataport import frames
from rafka.actors.dataport.frames import FrameError, FrameReader
from rafka.actors.dataport.tls import TlsSession, client_context
from rafka.actors.errors import RafkaError
from rafka.actors.runtime import ZOOKEEPER_AFTER_S
from rafka.common.config import InvalidConfigError
from rafka.coordination.data_ports import read_data_port
from rafka.coordination.store import ClusterStore

# An answer carries at most what was asked (fetch.max.bytes), and one batch beyond it per
# partition.
ANSWER_SLACK_BYTES = 64 * 1024 * 1024
READ_CHUNK_BYTES = 1024 * 1024
# How often `wait` looks whether a host said where it listens.
LOOKUP_POLL_S = 0.002


class HostConnectionError(RafkaError):
    """A request over a host's data port failed (the connection broke, or the answer did not
    come in time): retriable, as Kafka's NetworkException is."""

    retriable = True


class _Lookup:
    """Where one host listens: asked of the host, and of ZooKeeper when the host's answer is
    an error that leaves it alive (Ray calling a restarted actor at its old address), or late.
    A host Ray knows died for good is not looked for in ZooKeeper: its error tells the client
    to find the host anew."""

    def __init__(self, name: str, host: Any,
                 read_zookeeper: Callable[[str], Future] | None) -> None:
        self.name = name
        self.started = time.monotonic()
        self.ray_ref: Any = None
        self.error: BaseException | None = None
        try:
            self.ray_ref = host.data_port_address.remote()
        except ray.exceptions.RayError as error:
            self.error = error
        self._read_zookeeper = read_zookeeper
        self._zookeeper: Future | None = None

    def poll(self, ray_answered: bool) -> tuple[str, int, bytes, Any] | None:
        """The address, once known (None until then); raises what went wrong when neither
        source can say."""
        if self.ray_ref is not None and ray_answered:
            try:
                return ray.get(self.ray_ref)
            except ray.exceptions.RayError as error:
                self.ray_ref, self.error = None, error
        if isinstance(self.error, ray.exceptions.ActorDiedError):
            raise self.error
        if (self._zookeeper is None and self._read_zookeeper is not None
                and (self.ray_ref is None or time.monotonic() - self.started >= ZOOKEEPER_AFTER_S)):
            self._zookeeper, self._read_zookeeper = self._read_zookeeper(self.name), None
        if self._zookeeper is not None and self._zookeeper.done():
            found = None if self._zookeeper.exception() else self._zookeeper.result()
            self._zookeeper = None
            if found is not None:
                return found.as_tuple()
        if self.ray_ref is None and self._zookeeper is None and self._read_zookeeper is None:
            raise self.error or HostConnectionError(
                f"{self.name} did not say where it listens, nor did ZooKeeper")
        return None


class _Connection:
    """One connection to a host's data port and the request it carries.

    A connection is made without blocking whoever sends: first the host is asked where it
    listens (`lookup`, an actor call's reference), then a non-blocking connect is watched for
    writability, and the hello and the request go out as the socket takes them (`outgoing`).
    `wait` drives all of it, so a host that cannot answer (its node cut off, or Ray unable to
    confirm it dead) holds only the requests sent to it. Over TLS (the host says whether), the
    plaintext goes through `tls` and what the socket takes is `sealed`: the handshake runs
    inside `wait` too.
    """

    def __init__(self, name: str, max_answer_bytes: int) -> None:
        self.name = name
        self.sock: socket.socket | None = None
        self.lookup: _Lookup | None = None
        self.connected = False
        self.outgoing = bytearray()
        self.tls: TlsSession | None = None
        self.sealed = bytearray()
        self.reader = FrameReader(max_answer_bytes)
        self.method = ""
        self.deadline = float("inf")
        self.answer: Any = None
        self.answered = False
        # The events the selector watches `sock` for (0: not registered). Kept here because
        # asking the selector's map about a socket it lacks formats the socket into a KeyError.
        self.watched = 0

    def close(self) -> None:
        self.lookup = None
        self.outgoing.clear()
        self.tls = None
        self.sealed.clear()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.connected = False


class TcpCalls:
    """Each request a frame on a connection kept to the host's data port; the key is the
    connection, which goes back to the idle ones once its answer is taken. Nothing here blocks
    the caller's thread but `wait`, and that only as long as it was told to."""

    def __init__(self, connect_timeout_s: float, max_answer_bytes: int,
                 zookeeper: Callable[[], ClusterStore | None] = lambda: None) -> None:
        self.connect_timeout_s = connect_timeout_s
        # The cluster's ZooKeeper store, if the client has one: where hosts' addresses are
        # published (read on a thread of its own, so that `wait` never blocks on it).
        self._zookeeper = zookeeper
        self._zookeeper_reads: ThreadPoolExecutor | None = None
        self.max_answer_bytes = max_answer_bytes + ANSWER_SLACK_BYTES
        self._idle: dict[str, list[_Connection]] = {}
        self._looking_up: list[_Connection] = []
        self._selector = selectors.DefaultSelector()
        # `wake` writes a byte here to end a `wait` early (another thread has work for the
        # waiting one).
        self._waking, self._waker = socket.socketpair()
        self._waking.setblocking(False)
        self._waker.setblocking(False)
        self._selector.register(self._waking, selectors.EVENT_READ, None)

    def wake(self) -> None:
        """End the `wait` under way (or the next one) now, with what has been answered."""
        # BlockingIOError: a wake-up is already pending; OSError: the calls are closed.
        with contextlib.suppress(OSError):
            self._waker.send(b"\0")

    def send(self, name: str, host: Any, method: str, arguments: tuple[Any, ...],
             timeout_s: float | None = None) -> _Connection:
        """Send `host.method(*arguments)` (or start to: the rest goes out in `wait`); with
        `timeout_s`, an answer later than that fails the request (and drops the connection)."""
        request = frames.REQUESTS[method](*arguments)
        idle = self._idle.get(name)
        connection = idle.pop() if idle else _Connection(name, self.max_answer_bytes)
        connection.method = method
        now = time.monotonic()
        connection.deadline = float("inf") if timeout_s is None else now + timeout_s
        connection.outgoing += request
        if connection.sock is None:
            # Connecting counts against the request's own deadline and the connect timeout.
            connection.deadline = min(connection.deadline, now + self.connect_timeout_s)
            connection.lookup = _Lookup(name, host, self._reader())
            self._looking_up.append(connection)
        else:
            self._write(connection)
        return connection

    def wait(self, keys: list[_Connection], timeout_s: float) -> list[_Connection]:
        """The keys answered (or failed), waiting up to `timeout_s` for the first."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._looking_up:
                self._take_lookups()
            now = time.monotonic()
            for key in keys:
                if not key.answered and now >= key.deadline:
                    self._fail(key, HostConnectionError(
                        f"no answer from {key.name} in time: the connection is dropped"))
            done = [key for key in keys if key.answered]
            if done or now >= deadline:
                return done
            wake = min(deadline, *(key.deadline for key in keys))
            if self._looking_up:
                # An actor call's answer cannot be selected on; lookups are rare (a host's
                # first request, or one after a failure), so look again soon.
                wake = min(wake, now + LOOKUP_POLL_S)
            woken = False
            for selected, events in self._selector.select(max(wake - now, 0)):
                if selected.data is None:
                    woken = self._drain_wake_ups()
                    continue
                if events & selectors.EVENT_WRITE:
                    self._write(selected.data)
                if events & selectors.EVENT_READ:
                    self._read(selected.data)
            if woken:
                return [key for key in keys if key.answered]

    def _reader(self) -> Callable[[str], Future] | None:
        """How to read a host's published address, if the client holds ZooKeeper."""
        store = self._zookeeper()
        if store is None:
            return None
        if self._zookeeper_reads is None:
            self._zookeeper_reads = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="rafka-data-port-lookup")
        reads = self._zookeeper_reads
        return lambda name: reads.submit(read_data_port, store, name)

    def _take_lookups(self) -> None:
        """Connect (without blocking) each connection whose host said where it listens."""
        self._looking_up = [c for c in self._looking_up if c.lookup is not None]
        if not self._looking_up:
            return
        refs = [c.lookup.ray_ref for c in self._looking_up
                if c.lookup is not None and c.lookup.ray_ref is not None]
        ready_refs = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else set()
        waiting = []
        for connection in self._looking_up:
            lookup = connection.lookup
            assert lookup is not None
            try:
                found = lookup.poll(lookup.ray_ref in ready_refs)
                if found is None:
                    waiting.append(connection)
                    continue
                address, port, token, tls = found
                connection.lookup = None
                if tls is not None:
                    connection.tls = TlsSession(client_context(tls))
                sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET,
                                     socket.SOCK_STREAM)
                connection.sock = sock
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                connection.outgoing[:0] = frames.hello(token)
                error = sock.connect_ex((address, port))
                if error not in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
                    raise OSError(error, os.strerror(error))
                self._watch(connection, selectors.EVENT_WRITE)
            except (OSError, ray.exceptions.RayError, InvalidConfigError,
                    HostConnectionError) as error:
                self._fail(connection, error)
        self._looking_up = waiting

    def _write(self, connection: _Connection) -> None:
        """Send what the socket takes of the connection's outgoing bytes; watch for the
        answer once all went (and for room to write until then)."""
        sock = connection.sock
        if sock is None:
            return  # failed in the same round
        try:
            if not connection.connected:
                error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    raise OSError(error, os.strerror(error))
                connection.connected = True
            wire = connection.outgoing
            if connection.tls is not None:
                connection.tls.send(wire)
                wire.clear()
                wire = connection.sealed
                wire += connection.tls.outgoing()
            sent = sock.send(wire)
            del wire[:sent]
        except BlockingIOError:
            pass
        except OSError as error:
            self._fail(connection, error)
            return
        events = selectors.EVENT_READ
        if connection.outgoing or connection.sealed:
            events |= selectors.EVENT_WRITE
        self._watch(connection, events)

    def _watch(self, connection: _Connection, events: int) -> None:
        """Have the selector watch the connection's socket for `events` (and only them)."""
        sock = connection.sock
        assert sock is not None, "only a connection with a socket is watched"
        if not connection.watched:
            self._selector.register(sock, events, connection)
        elif connection.watched != events:
            self._selector.modify(sock, events, connection)
        connection.watched = events

    def _drain_wake_ups(self) -> bool:
        with contextlib.suppress(BlockingIOError):
            while self._waking.recv(4096):
                pass
        return True

    def _read(self, connection: _Connection) -> None:
        if connection.answered or connection.sock is None:
            return  # failed while writing, in the same round
        try:
            data = connection.sock.recv(READ_CHUNK_BYTES)
            if not data:
                raise ConnectionResetError("the host closed the connection")
            if connection.tls is not None:
                data = connection.tls.receive(data)
                if connection.tls.has_outgoing():  # the handshake's, or the request held for it
                    self._write(connection)
                    if connection.sock is None:
                        return  # the write failed
            bodies = connection.reader.feed(data)
            if bodies:
                connection.answer = frames.ANSWER_READERS[connection.method](bodies[0])
                connection.answered = True
        except BlockingIOError:
            return
        except (OSError, FrameError) as error:
            self._fail(connection, error)
        if connection.answered:
            self._unregister(connection)

    def _fail(self, connection: _Connection, error: BaseException) -> None:
        """The request fails with `error`; the connection is closed (result() raises it)."""
        self._unregister(connection)
        connection.close()
        connection.answer, connection.answered = _as_host_error(error), True

    def _unregister(self, connection: _Connection) -> None:
        if connection.watched and connection.sock is not None:
            self._selector.unregister(connection.sock)
        connection.watched = 0

    def result(self, key: _Connection) -> Any:
        """The answer of a key `wait` returned; the connection is then free for another
        request (or closed, if it failed)."""
        answer, key.answer, key.answered = key.answer, None, False
        if isinstance(answer, BaseException):
            self.abandon(key)
            raise answer
        self._idle.setdefault(key.name, []).append(key)
        return answer

    def abandon(self, key: _Connection) -> None:
        """A request whose answer nobody wants any more: its connection goes."""
        self._unregister(key)
        key.close()

    def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        for connection in self._looking_up:
            connection.close()
        self._looking_up.clear()
        if self._zookeeper_reads is not None:
            self._zookeeper_reads.shutdown(wait=False, cancel_futures=True)
        for selected in list(self._selector.get_map().values()):
            if selected.data is not None:
                selected.data.close()
        self._selector.close()
        self._waking.close()
        self._waker.close()


def _as_host_error(error: BaseException) -> BaseException:
    """Ray's own errors as they are (the clients know them), and TLS files that cannot be
    loaded (no retry mends them); the rest as retriable."""
    if isinstance(error, ray.exceptions.RayError | HostConnectionError | InvalidConfigError):
        return error
    failed = HostConnectionError(f"a request over the host's data port failed: {error!r}")
    failed.__cause__ = error
    return failed

