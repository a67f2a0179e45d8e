"""SASL on the Kafka port, sans I/O (KIP-43, KIP-152): one server class per mechanism.

Each takes the client's bytes and answers the server's (`evaluate`), until `complete`; then
`principal` is `User:<authorization id>`, and `session_expires_at` (seconds since the epoch, or
None) when the credential itself stops being valid (an OAUTHBEARER token's `exp`). A failed
authentication raises `SaslAuthenticationError`, whose message is safe to send to the client
(it never says whether the user exists). The mechanisms: `plain.PlainServer`,
`scram.ScramServer` (SCRAM-SHA-256 and -512, on `scramp`) and `oauthbearer.OAuthBearerServer`
(on `pyjwt`).
"""

from __future__ import annotations

from typing import Protocol

from rafka.common.errors import RafkaError
from rafka.wire.principal import USER_TYPE, KafkaPrincipal


class SaslAuthenticationError(RafkaError):
    """The client failed to authenticate: Kafka's SASL_AUTHENTICATION_FAILED."""


class SaslServer(Protocol):
    """One authentication exchange of one mechanism."""

    mechanism: str

    def evaluate(self, client_bytes: bytes) -> bytes:
        """The server's answer to the client's next message."""
        ...

    @property
    def complete(self) -> bool:
        """Whether the client is authenticated."""
        ...

    @property
    def principal(self) -> KafkaPrincipal:
        """Who the client is, once complete."""
        ...

    @property
    def session_expires_at(self) -> float | None:
        """When the credential stops being valid (seconds since the epoch), if it says."""
        ...


PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
OAUTHBEARER = "OAUTHBEARER"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)
"""The mechanisms rafka serves, by Kafka's names."""


class AuthenticatingServer:
    """What every mechanism's server shares: who the client turned out to be, and until
    when. A subclass calls `_authenticated` once the exchange succeeded."""

    mechanism: str

    def __init__(self) -> None:
        self._authorization_id: str | None = None
        self._expires_at: float | None = None

    def _authenticated(self, authorization_id: str, expires_at: float | None = None) -> None:
        self._authorization_id = authorization_id
        self._expires_at = expires_at

    @property
    def complete(self) -> bool:
        return self._authorization_id is not None

    @property
    def principal(self) -> KafkaPrincipal:
        assert self._authorization_id is not None, "not authenticated yet"
        return KafkaPrincipal(USER_TYPE, self._authorization_id)

    @property
    def session_expires_at(self) -> float | None:
        return self._expires_at
