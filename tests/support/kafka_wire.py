"""One connection to a Kafka listener that sends requests built from kafka-python's protocol
schemas at a chosen version and reads their answers (one at a time, or several sent ahead), for
tests that look at a field a
client library would hide. A broker that does not answer within the timeout fails the test
(socket.timeout is raised, never taken for a closed connection)."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.wire.protocol import APIS

TIMEOUT_S = 30


def first_address(bootstrap_servers: str) -> tuple[str, int]:
    """The first `host:port` of a `bootstrap.servers` list, as a socket address."""
    host, port = bootstrap_servers.split(",")[0].rsplit(":", 1)
    return host, int(port)


class KafkaWire:
    """A client connection: `ask(request, version)` returns the decoded response."""

    def __init__(self, address: str | tuple[str, int], timeout_s: float = TIMEOUT_S,
                 source_ip: str | None = None) -> None:
        """`source_ip`: the address to connect from (any 127.x reaches a listener on
        127.0.0.1), for tests of limits per client address."""
        if isinstance(address, str):
            address = first_address(address)
        self.socket = socket.create_connection(
            address, timeout=timeout_s,
            source_address=None if source_ip is None else (source_ip, 0))
        self.correlation_id = 0

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.socket.close()

    def ask(self, request: Any, version: int) -> Any:
        correlation_id = self.send(request, version)
        response = self.receive(request.API_KEY, version)
        assert response.header.correlation_id == correlation_id
        return response

    def send(self, request: Any, version: int) -> int:
        """Send without waiting for the answer; its correlation id."""
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id="wire-test")
        self.socket.sendall(bytes(request.encode(version=version, header=True, framed=True)))
        return self.correlation_id

    def receive(self, api_key: int, version: int) -> Any:
        """The next answer on the connection, decoded as `api_key`'s response."""
        size = struct.unpack(">i", self._read(4))[0]
        response_class = APIS[ApiKey(api_key)].response
        return response_class.decode(self._read(size), version=version, header=True)

    def _read(self, size: int) -> bytes:
        return read_exactly(self.socket, size)


def read_exactly(sock: socket.socket, size: int) -> bytes:
    """`size` bytes from `sock` (a TLS socket too); ConnectionError if the broker closes it
    first."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"the broker closed the connection after {len(data)} of "
                                  f"{size} bytes")
        data += chunk
    return data
