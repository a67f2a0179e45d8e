"""How clients' requests reach the replica hosts: over connections kept to their data ports
(`TcpCalls`, `transport=tcp`) or as actor calls (`RayCalls`, `transport=ray`, the default): a
producer's `produce` and a consumer's `fetch`.

TCP is not the default yet because connecting blocks the caller's thread: it asks the host
where it listens (an actor call) and opens the connection before the request goes, and a host
Ray cannot confirm dead (its GCS down) or a node cut off holds that thread, and every partition
the client serves, meanwhile. Connecting without blocking (the lookup's reference and a
non-blocking connect watched by the same `select`) is what is left.

Both send a request and hand back a key for it, wait until some of the keys in flight are
answered, and give each answer (the host method's reply) or raise what went wrong. A connection
carries one request at a time, as Kafka's broker serves a connection, so a client keeps as many
to a host as it has requests there at once: a consumer usually one, a producer up to
`max.in.flight.requests.per.connection` (requests to one host carry every partition led there).

Over TCP the client learns where a host listens, and the token to open with, from an actor call
(`ReplicaHost.data_port_address`); a connection that fails in any way, or whose answer is later
than the deadline its request was sent with, is dropped, and the request fails as a Ray call to a
host that died would: retriable, after which the client asks for the leaders again.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from typing import Any

import ray

from rafka.actors import host_frames
from rafka.actors.errors import RafkaError
from rafka.actors.host_frames import FrameError, FrameReader

# An answer carries at most what was asked (fetch.max.bytes), and one batch beyond it per
# partition.
ANSWER_SLACK_BYTES = 64 * 1024 * 1024
READ_CHUNK_BYTES = 1024 * 1024


class HostConnectionError(RafkaError):
    """A request over a host's data port failed (the connection broke, or the answer did not
    come in time): retriable, as Kafka's NetworkException is."""

    retriable = True


class RayCalls:
    """Each request an actor call; the key is its object ref."""

    def send(self, name: str, host: Any, method: str, arguments: tuple[Any, ...],
             timeout_s: float | None = None) -> Any:
        return getattr(host, method).remote(*arguments)

    def wait(self, keys: list[Any], timeout_s: float) -> list[Any]:
        """The keys answered, waiting up to `timeout_s` for the first."""
        ready, _ = ray.wait(keys, num_returns=1, timeout=timeout_s, fetch_local=True)
        if not ready:
            return []
        done, _ = ray.wait(keys, num_returns=len(keys), timeout=0, fetch_local=True)
        return done

    def result(self, key: Any) -> Any:
        return ray.get(key)

    def abandon(self, key: Any) -> None:
        pass  # its answer is dropped with the ref

    def wake(self) -> None:
        pass  # Ray's wait cannot be woken: it waits out its timeout

    def close(self) -> None:
        pass


class _Connection:
    """One connection to a host's data port (None once it failed), and the request it
    carries."""

    def __init__(self, name: str, sock: socket.socket | None, max_answer_bytes: int) -> None:
        self.name = name
        self.sock = sock
        self.reader = FrameReader(max_answer_bytes)
        self.method = ""
        self.deadline = float("inf")
        self.answer: Any = None
        self.answered = False

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class TcpCalls:
    """Each request a frame on a connection kept to the host's data port; the key is the
    connection, which goes back to the idle ones once its answer is taken."""

    def __init__(self, connect_timeout_s: float, max_answer_bytes: int) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.max_answer_bytes = max_answer_bytes + ANSWER_SLACK_BYTES
        self._idle: dict[str, list[_Connection]] = {}
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
        """Send `host.method(*arguments)`; with `timeout_s`, an answer later than that fails
        the request (and drops the connection)."""
        frame = host_frames.REQUESTS[method](*arguments)
        idle = self._idle.get(name)
        connection = idle.pop() if idle else _Connection(name, None, self.max_answer_bytes)
        connection.method = method
        try:
            if connection.sock is None:
                connection.sock = self._connect(host)
            connection.sock.sendall(frame)
        except (OSError, ray.exceptions.RayError) as error:
            connection.close()
            self._fail(connection, error)  # wait() hands it back at once
            return connection
        connection.deadline = (float("inf") if timeout_s is None
                               else time.monotonic() + timeout_s)
        self._selector.register(connection.sock, selectors.EVENT_READ, connection)
        return connection

    def _connect(self, host: Any) -> socket.socket:
        address, port, token = ray.get(host.data_port_address.remote(),
                                       timeout=self.connect_timeout_s)
        sock = socket.create_connection((address, port), timeout=self.connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(host_frames.hello(token))
        return sock

    def wait(self, keys: list[_Connection], timeout_s: float) -> list[_Connection]:
        """The keys answered (or failed), waiting up to `timeout_s` for the first."""
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            for key in keys:
                if not key.answered and now >= key.deadline:
                    self._fail(key, HostConnectionError(
                        f"no answer from {key.name} in time: the connection is dropped"))
            done = [key for key in keys if key.answered]
            if done or now >= deadline:
                return done
            wake = min(deadline, *(key.deadline for key in keys))
            woken = False
            for selected, _events in self._selector.select(max(wake - now, 0)):
                if selected.data is None:
                    woken = self._drain_wake_ups()
                else:
                    self._read(selected.data)
            if woken:
                return [key for key in keys if key.answered]

    def _drain_wake_ups(self) -> bool:
        with contextlib.suppress(BlockingIOError):
            while self._waking.recv(4096):
                pass
        return True

    def _read(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(READ_CHUNK_BYTES)
            if not data:
                raise ConnectionResetError("the host closed the connection")
            bodies = connection.reader.feed(data)
            if bodies:
                connection.answer = host_frames.ANSWER_READERS[connection.method](bodies[0])
                connection.answered = True
        except (OSError, FrameError) as error:
            self._fail(connection, error)
        if connection.answered:
            self._unregister(connection)

    def _fail(self, connection: _Connection, error: BaseException) -> None:
        connection.answer, connection.answered = _as_host_error(error), True

    def _unregister(self, connection: _Connection) -> None:
        if connection.sock is not None and connection.sock in self._selector.get_map():
            self._selector.unregister(connection.sock)

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
        for selected in list(self._selector.get_map().values()):
            if selected.data is not None:
                selected.data.close()
        self._selector.close()
        self._waking.close()
        self._waker.close()


def _as_host_error(error: BaseException) -> BaseException:
    """Ray's own errors as they are (the clients know them); the rest as retriable."""
    if isinstance(error, ray.exceptions.RayError | HostConnectionError):
        return error
    failed = HostConnectionError(f"a request over the host's data port failed: {error!r}")
    failed.__cause__ = error
    return failed


def host_calls(transport: str, request_timeout_ms: int,
               max_answer_bytes: int) -> RayCalls | TcpCalls:
    """The calls of a client configured with `transport` ("tcp" or "ray"): connecting waits
    up to `request_timeout_ms`, and an answer may carry `max_answer_bytes` (and a batch per
    partition beyond)."""
    if transport == "tcp":
        return TcpCalls(request_timeout_ms / 1000, max_answer_bytes)
    return RayCalls()
