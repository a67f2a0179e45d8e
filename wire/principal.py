"""Kafka's principals: who a connection's client is, as the authorizer will see it.

A client that showed a certificate on a TLS listener is `User:` and its certificate's subject
as an RFC 2253 distinguished name (`User:CN=app,O=team`), which is what Kafka's default
`ssl.principal.mapping.rules=DEFAULT` gives; any other client is `User:ANONYMOUS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

USER_TYPE = "User"

# The attribute keywords of RFC 2253 (as Java's X500Principal writes them), by the names
# Python's `ssl` gives a certificate's subject attributes; others keep Python's name.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_ESCAPED = ',+"\\<>;'

# A subject as `ssl.SSLSocket.getpeercert()` gives it: relative distinguished names in the
# certificate's order, each a tuple of (attribute name, value) pairs.
Subject = Sequence[Sequence[tuple[str, str]]]


class KafkaPrincipal(NamedTuple):
    """Kafka's `KafkaPrincipal`: a type and a name, written `type:name`."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def distinguished_name(subject: Subject) -> str:
    """`subject` as RFC 2253 writes it: the last RDN first, attributes of one RDN joined by
    '+', special characters escaped."""
    return ",".join(
        "+".join(f"{_KEYWORDS.get(name, name)}={_escape(value)}" for name, value in rdn)
        for rdn in reversed(subject))


def principal_from_certificate(certificate: Mapping[str, Any] | None) -> KafkaPrincipal:
    """The principal of a TLS client, from its verified certificate as `getpeercert()` gives
    it (Kafka's DEFAULT mapping rule); ANONYMOUS without one."""
    subject = (certificate or {}).get("subject")
    if not subject:
        return ANONYMOUS
    return KafkaPrincipal(USER_TYPE, distinguished_name(subject))


def _escape(value: str) -> str:
    escaped = "".join(f"\\{c}" if c in _ESCAPED else c for c in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
