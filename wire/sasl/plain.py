"""SASL/PLAIN (RFC 4616): the client sends `authzid NUL authcid NUL password` once.

The users and passwords are a listener's, from Kafka's JAAS setting
`listener.name.<n>.plain.sasl.jaas.config` (`user_<name>="<password>"`, as Kafka's
`PlainLoginModule` reads them; `parse_jaas_users`). As in Kafka's `PlainSaslServer`, an
authorization id other than the user's own is refused.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping

from rafka.wire.sasl import PLAIN, AuthenticatingServer, SaslAuthenticationError

_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')
FAILED = "Authentication failed: Invalid username or password"


def parse_jaas_users(jaas_config: str) -> dict[str, str]:
    """`{user: password}` from a JAAS line such as `org.apache.kafka.common.security.plain.
    PlainLoginModule required username="admin" password="s" user_admin="s" user_alice="p";`."""
    return {name[len("user_"):]: re.sub(r"\\(.)", r"\1", value)
            for name, value in _JAAS_OPTION.findall(jaas_config)
            if name.startswith("user_") and len(name) > len("user_")}


class PlainServer(AuthenticatingServer):
    """The server of one PLAIN exchange, against `users` ({name: password})."""

    mechanism = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        super().__init__()
        self._users = users

    def evaluate(self, client_bytes: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("PLAIN is one message, and it was sent already")
        parts = bytes(client_bytes).split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError(
                "Invalid SASL/PLAIN response: expected 3 tokens separated by NUL")
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user or not password:
            raise SaslAuthenticationError("Authentication failed: username or password empty")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        expected = self._users.get(user)
        # Compared in constant time, and against something for an unknown user too.
        if not hmac.compare_digest((expected or "\0").encode(), password.encode()) \
                or expected is None:
            raise SaslAuthenticationError(FAILED)
        self._authenticated(user)
        return b""
