"""Kafka's listener strings and security protocols, as in `listeners`, `advertised.listeners`,
`listener.security.protocol.map` and a broker registration's `endpoints`.

A listener is `NAME://host:port`: NAME is the listener's name, and the security protocol it
speaks is what `listener.security.protocol.map` maps the name to (by default each protocol's
own name maps to itself, so `SSL://host:9093` speaks SSL), as in Kafka.
"""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Mapping
from typing import NamedTuple

from rafka.common.errors import RafkaError

SECURITY_PROTOCOL = "PLAINTEXT"


class SecurityProtocol(enum.Enum):
    """Kafka's security protocols: what a listener speaks under Kafka's frames."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


# Kafka's default listener.security.protocol.map: each protocol's name names a listener of it.
DEFAULT_PROTOCOL_MAP = ",".join(f"{p.value}:{p.value}" for p in SecurityProtocol)


# The name of the listener the request being answered came in on (Kafka's
# `RequestContext.listenerName`), set for each Kafka client connection: a client is told the
# brokers' endpoints of that listener. None outside a client's connection.
CLIENT_LISTENER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "client_listener", default=None)


class InvalidListenerError(RafkaError, ValueError):
    """A listener string rafka cannot serve."""


class Listener(NamedTuple):
    """One listener: where it binds (or is advertised) and its name."""

    host: str
    port: int
    name: str = SECURITY_PROTOCOL

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listener(text: str) -> Listener:
    """`NAME://host:port` (one listener; port 0 means any free port, an empty host every
    interface). The name is upper-cased, as Kafka's listener names are."""
    name, separator, address = str(text).strip().partition("://")
    host, colon, port = address.rpartition(":")
    if not separator or not colon or "," in address:
        raise InvalidListenerError(
            f"listener {text!r} is not NAME://host:port (one listener, e.g. "
            f"PLAINTEXT://127.0.0.1:9092)")
    name = name.strip().upper()
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise InvalidListenerError(
            f"listener {text!r}: the name must be letters, digits, '_' or '-'")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise InvalidListenerError(f"listener {text!r}: the port must be 0-65535")
    return Listener(host.strip("[]") or "0.0.0.0", number, name)


def parse_listeners(text: str) -> list[Listener]:
    """Kafka's `listeners` / `advertised.listeners`: comma-separated `NAME://host:port`, each
    name once (as Kafka requires; two listeners of one name could not be told apart)."""
    listeners = [parse_listener(part) for part in str(text).split(",") if part.strip()]
    if not listeners:
        raise InvalidListenerError(f"{text!r} names no listener (NAME://host:port,...)")
    names = [listener.name for listener in listeners]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidListenerError(
            f"{text!r}: each listener name may appear once ({', '.join(repeated)} repeats)")
    return listeners


def parse_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    """Kafka's `listener.security.protocol.map`: comma-separated `NAME:PROTOCOL`."""
    found: dict[str, SecurityProtocol] = {}
    for part in str(text).split(","):
        if not part.strip():
            continue
        name, colon, protocol = part.strip().partition(":")
        try:
            found[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            raise InvalidListenerError(
                f"{part.strip()!r} is not NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(p.value for p in SecurityProtocol)}") from None
        if not colon or not name.strip():
            raise InvalidListenerError(f"{part.strip()!r} is not NAME:PROTOCOL")
    return found


def security_protocol(listener: Listener,
                      protocol_map: Mapping[str, SecurityProtocol]) -> SecurityProtocol:
    """The protocol `listener` speaks, by its name in the map."""
    try:
        return protocol_map[listener.name]
    except KeyError:
        raise InvalidListenerError(
            f"listener {listener}: its name {listener.name} is not in "
            f"listener.security.protocol.map ({', '.join(sorted(protocol_map))}); add "
            f"{listener.name}:PLAINTEXT or {listener.name}:SSL to it") from None


def format_protocol_map(protocol_map: Mapping[str, SecurityProtocol]) -> str:
    return ",".join(f"{name}:{protocol.value}" for name, protocol in protocol_map.items())
