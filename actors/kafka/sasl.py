"""SASL on a listener: each connection's authentication, before any request is served.

Kafka's `SaslServerAuthenticator`, as a state machine per connection (`SaslAuthenticator`,
sans I/O) and the loop that drives it over the socket (`authenticate`). A client may send
ApiVersions first, then must send SaslHandshake (v0 or v1) naming a mechanism of
`sasl.enabled.mechanisms`, then the mechanism's messages: in SaslAuthenticate requests after a
v1 handshake, or raw (a size and the bytes, no header) after a v0 one, as Kafka allows. Anything
else before that closes the connection. A failed authentication is answered
SASL_AUTHENTICATION_FAILED after `connection.failed.authentication.delay.ms`, and the
connection closed; a v0 client, which has no error to read, is closed after the delay.

Once authenticated, the connection's principal is `User:<authorization id>`. The session lasts
`connections.max.reauth.ms` (and at most to an OAUTHBEARER token's expiry; KIP-368): the
SaslAuthenticate answer says how long (`session_lifetime_ms`), the client re-authenticates with
a SaslHandshake and SaslAuthenticate on the same connection (`reauthenticate`), and a
connection whose session expired is closed at its next other request.

SCRAM credentials come from `/config/users/<user>` (`ScramCredentialCache`, kept current by an
entity config watch); PLAIN's users from `plain.sasl.jaas.config`; OAUTHBEARER's key set from
`sasl.oauthbearer.jwks.endpoint.url`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.actors.broker_view import BrokerView
from rafka.actors.config import BrokerConfig
from rafka.actors.kafka.connection import KafkaConnection
from rafka.common.config import InvalidConfigError
from rafka.coordination.entity_config import Entity, EntityConfigWatch
from rafka.wire import protocol
from rafka.wire.listeners import Listener, SecurityProtocol, security_protocol
from rafka.wire.principal import KafkaPrincipal
from rafka.wire.protocol import Api, encode_response
from rafka.wire.sasl import (
    OAUTHBEARER,
    PLAIN,
    SaslAuthenticationError,
    SaslServer,
)
from rafka.wire.sasl.oauthbearer import (
    OAuthBearerServer,
    SignedTokenValidator,
    UnsecuredTokenValidator,
    read_jwks,
)
from rafka.wire.sasl.plain import PlainServer, parse_jaas_users
from rafka.wire.sasl.scram import SCRAM_MECHANISMS, ScramCredential, ScramServer

log = logging.getLogger(__name__)

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
SASL_HANDSHAKE = protocol.APIS[ApiKey.SaslHandshake]
SASL_AUTHENTICATE = protocol.APIS[ApiKey.SaslAuthenticate]
# The largest frame a client may send before it authenticated (Kafka's
# sasl.server.max.receive.size): an unknown client does not get socket.request.max.bytes.
SASL_MAX_RECEIVE_BYTES = 524_288


class ScramCredentialCache:
    """Every user's SCRAM credentials, by user and mechanism, as `/config/users` holds them
    (Kafka's `CredentialCache`); `update` is an entity config watch's callback."""

    def __init__(self) -> None:
        self._credentials: dict[str, dict[str, ScramCredential]] = {}

    def update(self, entity: Entity, config: dict[str, str]) -> None:
        if entity.user is None or entity.client_id is not None:
            return
        found = {}
        for mechanism in SCRAM_MECHANISMS:
            if mechanism in config:
                try:
                    found[mechanism] = ScramCredential.parse(config[mechanism])
                except ValueError:
                    log.warning("ignoring the malformed %s credential of user %s", mechanism,
                                entity.user)
        if found:
            self._credentials[entity.user] = found
        else:
            self._credentials.pop(entity.user, None)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get(user, {}).get(mechanism)


class SaslMechanisms:
    """What one SASL listener serves: its enabled mechanisms, and a fresh server of each."""

    def __init__(self, config: BrokerConfig, credentials: ScramCredentialCache) -> None:
        self.enabled = tuple(config.sasl_enabled_mechanisms.split(","))
        self.reauth_ms = config.connections_max_reauth_ms
        self.failure_delay_s = config.connection_failed_authentication_delay_ms / 1000
        self._credentials = credentials
        self._plain_users = parse_jaas_users(config.plain_sasl_jaas_config or "")
        self._signed: SignedTokenValidator | None = None
        self._config = config
        if OAUTHBEARER in self.enabled and config.sasl_oauthbearer_jwks_endpoint_url:
            audience = config.sasl_oauthbearer_expected_audience
            try:
                jwks = read_jwks(config.sasl_oauthbearer_jwks_endpoint_url)
            except (OSError, ValueError) as error:
                raise InvalidConfigError(
                    f"sasl.oauthbearer.jwks.endpoint.url: cannot read the key set: {error}") \
                    from None
            self._signed = SignedTokenValidator(
                jwks,
                expected_audience=audience.split(",") if audience else (),
                expected_issuer=config.sasl_oauthbearer_expected_issuer,
                sub_claim=config.sasl_oauthbearer_sub_claim_name,
                allowable_clock_skew_ms=config.sasl_oauthbearer_clock_skew_seconds * 1000)

    def server(self, mechanism: str) -> SaslServer:
        if mechanism == PLAIN:
            return PlainServer(self._plain_users)
        if mechanism in SCRAM_MECHANISMS:
            return ScramServer(mechanism, self._credentials.lookup)
        assert mechanism == OAUTHBEARER
        return OAuthBearerServer(self._signed or UnsecuredTokenValidator(
            sub_claim=self._config.sasl_oauthbearer_sub_claim_name))

    def authenticator(self) -> SaslAuthenticator:
        return SaslAuthenticator(self, time.time)


class State(enum.Enum):
    HANDSHAKE = "expects SaslHandshake"
    AUTHENTICATE = "expects SaslAuthenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class SaslAuthenticator:
    """One connection's authentication (Kafka's `SaslServerAuthenticator`), sans I/O: each
    request in, its answer out, and what the connection is to do next."""

    def __init__(self, mechanisms: SaslMechanisms, now: Callable[[], float]) -> None:
        self._mechanisms = mechanisms
        self._now = now
        self.state = State.HANDSHAKE
        self.raw_tokens = False  # after a v0 handshake: tokens without a request header
        self.principal: KafkaPrincipal | None = None
        self.session_expires_at: float | None = None
        self._server: SaslServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is State.AUTHENTICATED

    def allows_before_authentication(self, api_key: int) -> bool:
        """Whether a request of `api_key` may come now: only ApiVersions and the SASL
        exchange's until authenticated (Kafka disconnects a client that sends another)."""
        if self.state is State.HANDSHAKE:
            return api_key in (ApiKey.ApiVersions, ApiKey.SaslHandshake)
        if self.state is State.AUTHENTICATE:
            return api_key == ApiKey.SaslAuthenticate
        return False

    def session_expired(self) -> bool:
        return self.session_expires_at is not None and self._now() >= self.session_expires_at

    def handshake(self, version: int, correlation_id: int, mechanism: str) -> bytes:
        """The answer to a SaslHandshake; the state says whether to go on."""
        enabled = list(self._mechanisms.enabled)
        if self.state not in (State.HANDSHAKE, State.AUTHENTICATED):
            self.state = State.FAILED
            error = ILLEGAL_SASL_STATE
        elif mechanism not in enabled:
            self.state = State.FAILED
            error = UNSUPPORTED_SASL_MECHANISM
        else:
            error = 0
            self._server = self._mechanisms.server(mechanism)
            self.state = State.AUTHENTICATE
            self.raw_tokens = version == 0
        return encode_response(SASL_HANDSHAKE, version, correlation_id, error_code=error,
                               mechanisms=enabled)

    def authenticate(self, version: int, correlation_id: int, auth_bytes: bytes) -> bytes:
        """The answer to a SaslAuthenticate; the state says whether it failed."""
        fields: dict[str, Any] = {"error_code": 0, "error_message": None, "auth_bytes": b"",
                                  "session_lifetime_ms": 0}
        if self.state is not State.AUTHENTICATE or self._server is None:
            self.state = State.FAILED
            fields.update(error_code=ILLEGAL_SASL_STATE,
                          error_message="SaslAuthenticate before SaslHandshake")
        else:
            try:
                fields["auth_bytes"] = self.evaluate(auth_bytes)
            except SaslAuthenticationError as error:
                fields.update(error_code=SASL_AUTHENTICATION_FAILED, error_message=str(error))
            if self.authenticated and version >= 1:
                fields["session_lifetime_ms"] = self.session_lifetime_ms()
        return encode_response(SASL_AUTHENTICATE, version, correlation_id, **fields)

    def evaluate(self, client_bytes: bytes) -> bytes:
        """The mechanism's answer to the client's bytes (a v0 client's raw token, or a
        SaslAuthenticate's); SaslAuthenticationError, and the state FAILED, if it fails."""
        assert self._server is not None
        try:
            answer = self._server.evaluate(client_bytes)
        except SaslAuthenticationError:
            self.state = State.FAILED
            raise
        if self._server.complete:
            principal = self._server.principal
            if self.principal is not None and principal != self.principal:
                # KIP-368: a re-authentication may not change who the connection is.
                self.state = State.FAILED
                raise SaslAuthenticationError(
                    f"re-authentication as {principal}, not {self.principal}, is refused")
            self.principal = principal
            self.state = State.AUTHENTICATED
            self.raw_tokens = False
            self._start_session(self._server.session_expires_at)
        return answer

    def session_lifetime_ms(self) -> int:
        if self.session_expires_at is None:
            return 0
        return max(int((self.session_expires_at - self._now()) * 1000), 1)

    def _start_session(self, credential_expires_at: float | None) -> None:
        now = self._now()
        ends = [credential_expires_at] if credential_expires_at is not None else []
        if self._mechanisms.reauth_ms > 0:
            ends.append(now + self._mechanisms.reauth_ms / 1000)
        self.session_expires_at = min(ends) if ends else None

    def reauthenticate(self, request: tuple[Any, int, Any] | bytes) -> tuple[Any, int, Any] | bytes:
        """A request of an authenticated connection: a SaslHandshake or SaslAuthenticate
        (KIP-368's re-authentication) answered here, anything else as it was."""
        if isinstance(request, bytes):
            return request
        api, version, body = request
        correlation_id = body.header.correlation_id
        if api.key == ApiKey.SaslHandshake:
            return self.handshake(version, correlation_id, body.mechanism)
        if api.key == ApiKey.SaslAuthenticate:
            return self.authenticate(version, correlation_id, bytes(body.auth_bytes))
        return request

    def must_close(self, request: tuple[Any, int, Any] | bytes | None = None) -> bool:
        """Whether the connection is to close before `request`: the authentication failed, or
        the session expired and `request` does not re-authenticate."""
        if self.state is State.FAILED:
            return True
        if self.state is State.AUTHENTICATE:
            return False
        reauthenticating = not isinstance(request, bytes) and request is not None \
            and request[0].key == ApiKey.SaslHandshake
        return self.session_expired() and not reauthenticating


async def authenticate(connection: KafkaConnection, authenticator: SaslAuthenticator,
                       max_request_bytes: int, failure_delay_s: float, peer: Any) -> bool:
    """Run a new connection's authentication; whether it succeeded (if not, the connection is
    to close: the failure was answered, after the delay)."""
    while not authenticator.authenticated:
        try:
            size = await connection.read_size()
            if not 0 <= size <= max_request_bytes:
                log.warning("closing the connection of %s: a %d-byte frame before it "
                            "authenticated", peer, size)
                return False
            frame = bytes(await connection.read_frame(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        if authenticator.raw_tokens:
            try:
                answer = authenticator.evaluate(frame)
            except SaslAuthenticationError as error:
                log.info("closing the connection of %s: %s", peer, error)
                await asyncio.sleep(failure_delay_s)
                return False
            connection.write(len(answer).to_bytes(4, "big") + answer)
            continue
        try:
            api, version, body = protocol.read_request(frame)
        except protocol.UnsupportedRequestError as error:
            if error.api_key != ApiKey.ApiVersions:
                log.info("closing the connection of %s before it authenticated: %s", peer,
                         error)
                return False
            # A newer client's ApiVersions: answered at v0, so it asks again (KIP-511).
            connection.write(protocol.unsupported_response(error))
            continue
        except protocol.MalformedRequestError as error:
            log.info("closing the connection of %s before it authenticated: %s", peer, error)
            return False
        if not authenticator.allows_before_authentication(api.key):
            log.info("closing the connection of %s: %s before it authenticated (%s)", peer,
                     api.name, authenticator.state.value)
            return False
        correlation_id = body.header.correlation_id
        if api.key == ApiKey.ApiVersions:
            answer = protocol.api_versions_response(version, correlation_id)
        elif api.key == ApiKey.SaslHandshake:
            answer = authenticator.handshake(version, correlation_id, body.mechanism)
        else:
            answer = authenticator.authenticate(version, correlation_id, bytes(body.auth_bytes))
        if authenticator.state is State.FAILED:
            log.info("failed authentication of %s", peer)
            await asyncio.sleep(failure_delay_s)
        try:
            connection.write(answer)
            await connection.drain()
        except ConnectionError:
            return False
        if authenticator.state is State.FAILED:
            return False
    return True


class SaslListeners:
    """The SASL side of a broker's listeners: each SASL listener's mechanisms, and the SCRAM
    credentials, kept current from ZooKeeper while the broker runs."""

    def __init__(self, broker: BrokerView, listeners: list[Listener],
                 protocol_map: dict[str, SecurityProtocol]) -> None:
        self.broker = broker
        self.credentials = ScramCredentialCache()
        self._mechanisms = {
            listener.name: SaslMechanisms(broker.config.for_listener(listener.name),
                                          self.credentials)
            for listener in listeners if security_protocol(listener, protocol_map).uses_sasl}
        self._watch: EntityConfigWatch | None = None

    def start(self) -> None:
        if self._mechanisms and self.broker.store is not None:
            self._watch = EntityConfigWatch(self.broker.store, self.credentials.update).start()

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    async def authenticate(self, connection: KafkaConnection, max_request_bytes: int,
                           peer: Any) -> bool:
        """Authenticate a new connection of a SASL listener (others pass as they are), and
        make its principal the one it authenticated as; False: it is to close."""
        mechanisms = self._mechanisms.get(connection.listener_name)
        if mechanisms is None:
            return True
        connection.sasl = authenticator = mechanisms.authenticator()
        if not await authenticate(connection, authenticator,
                                  min(max_request_bytes, SASL_MAX_RECEIVE_BYTES),
                                  mechanisms.failure_delay_s, peer):
            return False
        assert authenticator.principal is not None
        connection.principal = authenticator.principal
        return True


async def sasl_not_enabled(api: Api, _version: int, _request: Any) -> dict[str, Any]:
    """SaslHandshake or SaslAuthenticate on a listener without SASL: ILLEGAL_SASL_STATE, as
    Kafka answers."""
    if api.key == ApiKey.SaslHandshake:
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
    return {"error_code": ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
            "error_message": "this listener does not speak SASL"}
