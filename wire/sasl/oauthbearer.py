"""SASL/OAUTHBEARER (RFC 7628; Kafka's KIP-255 and KIP-768), its tokens checked with `pyjwt`.

The client's one message is a GS2 header and key-value pairs separated by 0x01:
`n,a=<authzid>,\\x01auth=Bearer <token>\\x01\\x01`. Its token is checked one of two ways:

- **Unsecured** (no key set configured), as Kafka's default
  `OAuthBearerUnsecuredValidatorCallbackHandler` checks: a JWS with `alg: none`, whose `sub`
  (`sasl.oauthbearer.sub.claim.name`) is a non-empty string, `exp` a number not in the past and
  `iat`, if present, a number not in the future (both with `allowable_clock_skew_ms`).
- **Signed**, as Kafka's `OAuthBearerValidatorCallbackHandler` checks: signed by a key of the
  JWKS at `sasl.oauthbearer.jwks.endpoint.url` (a `file://` URL here), with `exp` and `sub`
  required, and `aud` / `iss` checked when `sasl.oauthbearer.expected.audience` /
  `sasl.oauthbearer.expected.issuer` are set.

The principal is `User:<sub>`; the session ends at the token's `exp` (KIP-368). A bad token
fails at once with SASL_AUTHENTICATION_FAILED (Kafka first answers an RFC 7628 error JSON and
fails at the client's next message; clients see the same error either way).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from rafka.wire.sasl import OAUTHBEARER, AuthenticatingServer, SaslAuthenticationError

_SEPARATOR = "\x01"
# What pyjwt may check a signed token with: asymmetric algorithms only, as a JWKS gives keys.
SIGNED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                     "ES256", "ES384", "ES512", "EdDSA")


@dataclass(frozen=True)
class ClientFirstMessage:
    """What the client's message says: the token, an authorization id and extensions."""

    token: str
    authorization_id: str
    extensions: dict[str, str]


def parse_client_first(client_bytes: bytes) -> ClientFirstMessage:
    """The client's OAUTHBEARER message (RFC 7628 section 3.1); SaslAuthenticationError if it
    is not one."""
    try:
        text = bytes(client_bytes).decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError("Invalid OAUTHBEARER client first message: not UTF-8") \
            from None
    header, sep, rest = text.partition(_SEPARATOR)
    gs2 = header.split(",")
    if not sep or len(gs2) != 3 or gs2[0] not in ("n", "y") or gs2[2] != "" \
            or not (gs2[1] == "" or gs2[1].startswith("a=")) or not rest.endswith(_SEPARATOR * 2):
        raise SaslAuthenticationError("Invalid OAUTHBEARER client first message")
    authorization_id = gs2[1][2:]
    pairs: dict[str, str] = {}
    for item in rest[:-2].split(_SEPARATOR):
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise SaslAuthenticationError("Invalid OAUTHBEARER client first message")
        pairs[key] = value
    auth = pairs.pop("auth", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise SaslAuthenticationError("Invalid OAUTHBEARER client first message: no "
                                      "'auth=Bearer <token>'")
    return ClientFirstMessage(token.strip(), authorization_id, pairs)


@dataclass(frozen=True)
class Token:
    """A validated token: who it is for, and until when (seconds since the epoch)."""

    principal_name: str
    expires_at: float


class _ClaimRules:
    """The checks of every token's claims: a principal, an expiry not past, an issue time not
    ahead (each within the allowed clock skew)."""

    def __init__(self, sub_claim: str, allowable_clock_skew_ms: int,
                 now: Callable[[], float]) -> None:
        self.sub_claim = sub_claim
        self.skew_s = allowable_clock_skew_ms / 1000
        self._now = now

    def _token_of(self, claims: dict[str, Any]) -> Token:
        return _token_of(claims, self.sub_claim, self._now(), self.skew_s)


class UnsecuredTokenValidator(_ClaimRules):
    """Kafka's unsecured-JWS rules (`OAuthBearerUnsecuredJws` and its validator handler)."""

    def __init__(self, sub_claim: str = "sub", allowable_clock_skew_ms: int = 0,
                 now: Callable[[], float] = time.time) -> None:
        super().__init__(sub_claim, allowable_clock_skew_ms, now)

    def validate(self, token: str) -> Token:
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as error:
            raise SaslAuthenticationError(f"invalid_token: {error}") from None
        if header.get("alg") != "none":
            raise SaslAuthenticationError("invalid_token: an unsecured token has alg 'none'")
        return self._token_of(claims)


class SignedTokenValidator(_ClaimRules):
    """Signed tokens against a key set (JWKS), with audience and issuer if expected."""

    def __init__(self, jwks: str | dict[str, Any], expected_audience: Sequence[str] = (),
                 expected_issuer: str | None = None, sub_claim: str = "sub",
                 allowable_clock_skew_ms: int = 30_000,
                 now: Callable[[], float] = time.time) -> None:
        super().__init__(sub_claim, allowable_clock_skew_ms, now)
        keys = jwt.PyJWKSet.from_dict(jwks if isinstance(jwks, dict) else json.loads(jwks))
        self._keys = {key.key_id: key for key in keys.keys}
        self.expected_audience = list(expected_audience)
        self.expected_issuer = expected_issuer

    def validate(self, token: str) -> Token:
        try:
            header = jwt.get_unverified_header(token)
            kid = header.get("kid")
            key = self._keys.get(kid) if kid is not None else \
                next(iter(self._keys.values())) if len(self._keys) == 1 else None
            if key is None:
                raise SaslAuthenticationError(f"invalid_token: no key {kid!r} in the key set")
            claims = jwt.decode(
                token, key, algorithms=list(SIGNED_ALGORITHMS),
                audience=self.expected_audience or None, issuer=self.expected_issuer,
                leeway=self.skew_s,
                options={"require": ["exp"], "verify_aud": bool(self.expected_audience),
                         "verify_iat": False, "verify_exp": False})
        except jwt.PyJWTError as error:
            raise SaslAuthenticationError(f"invalid_token: {error}") from None
        return self._token_of(claims)


def read_jwks(url: str) -> str:
    """The key set at `sasl.oauthbearer.jwks.endpoint.url`: a `file://` URL here."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "file":
        raise ValueError(f"sasl.oauthbearer.jwks.endpoint.url={url!r}: only file:// URLs "
                         f"are read here")
    with open(urllib.request.url2pathname(parsed.path), encoding="utf-8") as found:
        return found.read()


def _token_of(claims: dict[str, Any], sub_claim: str, now: float, skew_s: float) -> Token:
    subject = claims.get(sub_claim)
    if not isinstance(subject, str) or not subject.strip():
        raise SaslAuthenticationError(f"invalid_token: no '{sub_claim}' claim")
    expires = claims.get("exp")
    if isinstance(expires, bool) or not isinstance(expires, (int, float)):
        raise SaslAuthenticationError("invalid_token: no numeric 'exp' claim")
    if expires + skew_s <= now:
        raise SaslAuthenticationError("invalid_token: the token expired")
    issued = claims.get("iat")
    if issued is not None:
        if isinstance(issued, bool) or not isinstance(issued, (int, float)):
            raise SaslAuthenticationError("invalid_token: 'iat' is not a number")
        if issued - skew_s > now:
            raise SaslAuthenticationError("invalid_token: the token was issued in the future")
    return Token(subject, float(expires))


class OAuthBearerServer(AuthenticatingServer):
    """The server of one OAUTHBEARER exchange: one client message, validated by `validator`."""

    mechanism = OAUTHBEARER

    def __init__(self, validator: UnsecuredTokenValidator | SignedTokenValidator) -> None:
        super().__init__()
        self._validator = validator

    def evaluate(self, client_bytes: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("OAUTHBEARER is one message, and it was sent already")
        message = parse_client_first(client_bytes)
        token = self._validator.validate(message.token)
        if message.authorization_id and message.authorization_id != token.principal_name:
            raise SaslAuthenticationError(
                "Authentication failed: the authorization id is not the token's principal")
        self._authenticated(token.principal_name, token.expires_at)
        return b""
