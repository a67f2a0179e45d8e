"""Kafka's listener strings: "PLAINTEXT://host:port", as in `listeners` and `endpoints`."""

from __future__ import annotations

from typing import NamedTuple

from rafka.common.errors import RafkaError

SECURITY_PROTOCOL = "PLAINTEXT"


class InvalidListenerError(RafkaError, ValueError):
    """A listener string rafka cannot serve."""


class Listener(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"{SECURITY_PROTOCOL}://{self.host}:{self.port}"


def parse_listener(text: str) -> Listener:
    """`PLAINTEXT://host:port` (one listener; port 0 means any free port)."""
    protocol, separator, address = str(text).strip().partition("://")
    host, colon, port = address.rpartition(":")
    if not separator or not colon or "," in address:
        raise InvalidListenerError(
            f"listener {text!r} is not PLAINTEXT://host:port (one listener, e.g. "
            f"PLAINTEXT://127.0.0.1:9092)")
    if protocol.upper() != SECURITY_PROTOCOL:
        raise InvalidListenerError(
            f"listener {text!r}: only {SECURITY_PROTOCOL} is served (no TLS or SASL yet)")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise InvalidListenerError(f"listener {text!r}: the port must be 0-65535")
    return Listener(host.strip("[]") or "0.0.0.0", number)
