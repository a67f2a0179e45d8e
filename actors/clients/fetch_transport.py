"""How a consumer's fetches reach the replica hosts: over connections it keeps to their data ports
(`TcpFetches`, `fetch.transport=tcp`, the default) or as actor calls (`RayFetches`).

Both send a fetch and hand back a key for it, wait until some of the keys in flight are answered,
and give each answer (`ReplicaHost.fetch`'s reply, one entry per partition asked) or raise what
went wrong. A connection carries one fetch at a time, so a consumer keeps as many to a host as it
has fetches there at once (one per round of partitions that became ready; usually one).

Over TCP the consumer learns where a host listens, and the token to open with, from an actor call
(`ReplicaHost.data_port_address`); a connection that fails in any way, or whose answer is later
than `fetch.max.wait.ms` + `request.timeout.ms`, is dropped, and the fetch fails as a Ray call to
a host that died would: retriable, after which the consumer asks for the leaders again.
"""

from __future__ import annotations

import selectors
import socket
import time
from typing import Any

import ray

from rafka.actors import host_frames
from rafka.actors.errors import RafkaError
from rafka.actors.host_frames import FrameError, FrameReader, Reply
from rafka.actors.messages import PartitionFetch

# An answer carries at most fetch.max.bytes, and one batch beyond it per partition.
ANSWER_SLACK_BYTES = 64 * 1024 * 1024
READ_CHUNK_BYTES = 1024 * 1024


class FetchConnectionError(RafkaError):
    """A fetch over a host's data port failed (the connection broke, or the answer did not come
    in time): retriable, as Kafka's NetworkException is."""

    retriable = True


class RayFetches:
    """Each fetch an actor call; the key is its object ref."""

    def send(self, name: str, host: Any, requests: list[PartitionFetch], max_wait_ms: int,
             min_bytes: int, max_bytes: int, read_committed: bool) -> Any:
        return host.fetch.remote(requests, max_wait_ms, min_bytes, max_bytes,
                                 read_committed=read_committed)

    def wait(self, keys: list[Any], timeout_s: float) -> list[Any]:
        """The keys answered, waiting up to `timeout_s` for the first."""
        ready, _ = ray.wait(keys, num_returns=1, timeout=timeout_s)
        if not ready:
            return []
        done, _ = ray.wait(keys, num_returns=len(keys), timeout=0)
        return done

    def result(self, key: Any) -> list[Reply]:
        return ray.get(key)

    def abandon(self, key: Any) -> None:
        pass  # its answer is dropped with the ref

    def close(self) -> None:
        pass


class _Connection:
    """One connection to a host's data port (None once it failed), and the fetch it carries."""

    def __init__(self, name: str, sock: socket.socket | None, max_answer_bytes: int) -> None:
        self.name = name
        self.sock = sock
        self.reader = FrameReader(max_answer_bytes)
        self.deadline = 0.0
        self.answer: list[Reply] | BaseException | None = None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class TcpFetches:
    """Each fetch a frame on a connection kept to the host's data port; the key is the
    connection, which goes back to the idle ones once its answer is taken."""

    def __init__(self, request_timeout_ms: int, max_bytes: int) -> None:
        self.request_timeout_s = request_timeout_ms / 1000
        self.max_answer_bytes = max_bytes + ANSWER_SLACK_BYTES
        self._idle: dict[str, list[_Connection]] = {}
        self._selector = selectors.DefaultSelector()

    def send(self, name: str, host: Any, requests: list[PartitionFetch], max_wait_ms: int,
             min_bytes: int, max_bytes: int, read_committed: bool) -> _Connection:
        frame = host_frames.consumer_fetch_request(requests, max_wait_ms, min_bytes, max_bytes,
                                                   read_committed)
        idle = self._idle.get(name)
        connection = idle.pop() if idle else _Connection(name, None, self.max_answer_bytes)
        try:
            if connection.sock is None:
                connection.sock = self._connect(host)
            connection.sock.sendall(frame)
        except (OSError, ray.exceptions.RayError) as error:
            connection.close()
            connection.answer = _as_fetch_error(error)  # wait() hands it back at once
            return connection
        connection.deadline = time.monotonic() + max_wait_ms / 1000 + self.request_timeout_s
        self._selector.register(connection.sock, selectors.EVENT_READ, connection)
        return connection

    def _connect(self, host: Any) -> socket.socket:
        address, port, token = ray.get(host.data_port_address.remote(),
                                       timeout=self.request_timeout_s)
        sock = socket.create_connection((address, port), timeout=self.request_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(host_frames.hello(token))
        return sock

    def wait(self, keys: list[_Connection], timeout_s: float) -> list[_Connection]:
        """The keys answered (or failed), waiting up to `timeout_s` for the first."""
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            for key in keys:
                if key.answer is None and now >= key.deadline:
                    key.answer = FetchConnectionError(
                        f"no answer from {key.name} within fetch.max.wait.ms + "
                        "request.timeout.ms: the connection is dropped")
            done = [key for key in keys if key.answer is not None]
            if done or now >= deadline:
                return done
            wake = min(deadline, *(key.deadline for key in keys))
            for selected, _events in self._selector.select(max(wake - now, 0)):
                self._read(selected.data)

    def _read(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(READ_CHUNK_BYTES)
            if not data:
                raise ConnectionResetError("the host closed the connection")
            bodies = connection.reader.feed(data)
            if bodies:
                connection.answer = host_frames.read_consumer_fetch_answer(bodies[0])
        except (OSError, FrameError) as error:
            connection.answer = _as_fetch_error(error)
        if connection.answer is not None:
            self._selector.unregister(connection.sock)

    def result(self, key: _Connection) -> list[Reply]:
        """The answer of a key `wait` returned; the connection is then free for another fetch
        (or closed, if it failed)."""
        answer, key.answer = key.answer, None
        if isinstance(answer, BaseException):
            self.abandon(key)
            raise answer
        self._idle.setdefault(key.name, []).append(key)
        return answer

    def abandon(self, key: _Connection) -> None:
        """A fetch whose answer nobody wants any more: its connection goes."""
        if key.sock is not None and key.sock in self._selector.get_map():
            self._selector.unregister(key.sock)
        key.close()

    def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        for selected in list(self._selector.get_map().values()):
            selected.data.close()
        self._selector.close()


def _as_fetch_error(error: BaseException) -> BaseException:
    """Ray's own errors as they are (the consumer knows them); the rest as retriable."""
    if isinstance(error, ray.exceptions.RayError):
        return error
    failed = FetchConnectionError(f"a fetch over the host's data port failed: {error!r}")
    failed.__cause__ = error
    return failed
