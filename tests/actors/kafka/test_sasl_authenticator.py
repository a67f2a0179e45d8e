"""A connection's SASL authentication as a state machine, without sockets: handshake first,
then the mechanism's messages, then requests; sessions, re-authentication and refusals."""

from __future__ import annotations

import struct
import time
from typing import Any

import jwt
import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from rafka.actors.config import BrokerConfig
from rafka.actors.kafka.sasl import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    SaslAuthenticator,
    SaslMechanisms,
    ScramCredentialCache,
    State,
)
from rafka.coordination.entity_config import Entity
from rafka.wire.principal import KafkaPrincipal
from rafka.wire.protocol import APIS
from rafka.wire.sasl.scram import make_credential

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def authenticator(clock: Clock, **settings: Any) -> SaslAuthenticator:
    config = BrokerConfig.from_dict({
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
        "plain.sasl.jaas.config": JAAS, **settings})
    credentials = ScramCredentialCache()
    credentials.update(Entity(user="carol"),
                       {"SCRAM-SHA-512": str(make_credential("SCRAM-SHA-512", "carol-secret"))})
    return SaslAuthenticator(SaslMechanisms(config, credentials), clock)


def decode(response_type: Any, version: int, frame: bytes) -> Any:
    # A framed response: size, correlation id, its tagged fields in a flexible version (one
    # byte: none), then the body.
    size, _correlation = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4
    flexible = response_type.__name__ == "SaslAuthenticateResponse" and version >= 2
    return response_type.decode(frame[9 if flexible else 8:], version=version)


def test_handshake_then_authenticate_then_requests() -> None:
    clock = Clock()
    sasl = authenticator(clock)
    assert sasl.allows_before_authentication(ApiKey.ApiVersions)
    assert sasl.allows_before_authentication(ApiKey.SaslHandshake)
    assert not sasl.allows_before_authentication(ApiKey.Metadata)
    assert not sasl.allows_before_authentication(ApiKey.SaslAuthenticate)
    answer = decode(SaslHandshakeResponse, 1, sasl.handshake(1, 7, "PLAIN"))
    assert answer.error_code == 0
    assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"]
    assert sasl.state is State.AUTHENTICATE and not sasl.raw_tokens
    assert not sasl.allows_before_authentication(ApiKey.Metadata)
    answer = decode(SaslAuthenticateResponse, 1,
                    sasl.authenticate(1, 8, b"\0alice\0alice-secret"))
    assert (answer.error_code, answer.session_lifetime_ms) == (0, 0)
    assert sasl.authenticated and sasl.principal == KafkaPrincipal("User", "alice")
    assert not sasl.must_close()


def test_a_v0_handshake_takes_raw_tokens() -> None:
    sasl = authenticator(Clock())
    sasl.handshake(0, 1, "PLAIN")
    assert sasl.raw_tokens
    assert sasl.evaluate(b"\0bob\0bob-secret") == b""
    assert sasl.authenticated and not sasl.raw_tokens


@pytest.mark.parametrize(("mechanism", "message"), [
    ("PLAIN", b"\0alice\0wrong"),
    ("PLAIN", b"\0nobody\0alice-secret"),
    ("OAUTHBEARER", b"n,,\x01auth=Bearer not-a-token\x01\x01"),
])
def test_a_failed_authentication_is_sasl_authentication_failed(mechanism: str,
                                                               message: bytes) -> None:
    sasl = authenticator(Clock())
    sasl.handshake(1, 1, mechanism)
    answer = decode(SaslAuthenticateResponse, 2, sasl.authenticate(2, 2, message))
    assert answer.error_code == SASL_AUTHENTICATION_FAILED and answer.error_message
    assert sasl.state is State.FAILED and sasl.must_close()


def test_refusals_of_the_handshake() -> None:
    sasl = authenticator(Clock())
    answer = decode(SaslHandshakeResponse, 1, sasl.handshake(1, 1, "GSSAPI"))
    assert answer.error_code == UNSUPPORTED_SASL_MECHANISM and sasl.must_close()
    sasl = authenticator(Clock())
    answer = decode(SaslAuthenticateResponse, 1, sasl.authenticate(1, 1, b"x"))
    assert answer.error_code == ILLEGAL_SASL_STATE and sasl.must_close()
    sasl = authenticator(Clock())
    sasl.handshake(1, 1, "PLAIN")
    answer = decode(SaslHandshakeResponse, 1, sasl.handshake(1, 2, "PLAIN"))
    assert answer.error_code == ILLEGAL_SASL_STATE


def test_a_session_ends_and_re_authenticates() -> None:
    clock = Clock()
    sasl = authenticator(clock, **{"connections.max.reauth.ms": 60_000})
    sasl.handshake(1, 1, "PLAIN")
    answer = decode(SaslAuthenticateResponse, 1, sasl.authenticate(1, 2,
                                                                   b"\0alice\0alice-secret"))
    assert answer.session_lifetime_ms == 60_000
    metadata = (APIS[ApiKey.Metadata], 1, None)
    handshake = (APIS[ApiKey.SaslHandshake], 1, None)
    clock.now += 59
    assert not sasl.must_close(metadata)
    clock.now += 2
    assert sasl.must_close(metadata) and not sasl.must_close(handshake)
    sasl.handshake(1, 3, "PLAIN")
    assert not sasl.must_close()
    answer = decode(SaslAuthenticateResponse, 1, sasl.authenticate(1, 4,
                                                                   b"\0alice\0alice-secret"))
    assert answer.error_code == 0 and not sasl.must_close(metadata)
    # Re-authenticating as somebody else is refused, and closes the connection.
    sasl.handshake(1, 5, "PLAIN")
    answer = decode(SaslAuthenticateResponse, 1, sasl.authenticate(1, 6, b"\0bob\0bob-secret"))
    assert answer.error_code == SASL_AUTHENTICATION_FAILED and sasl.must_close()


def test_an_oauthbearer_session_ends_with_its_token() -> None:
    clock = Clock()
    clock.now = time.time()  # the validator checks the token against the real clock
    sasl = authenticator(clock, **{"connections.max.reauth.ms": 3_600_000})
    token = jwt.encode({"sub": "svc", "exp": clock.now + 30}, None, algorithm="none")
    sasl.handshake(1, 1, "OAUTHBEARER")
    sasl_token = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    answer = decode(SaslAuthenticateResponse, 1, sasl.authenticate(1, 2, sasl_token))
    assert answer.error_code == 0 and sasl.principal == KafkaPrincipal("User", "svc")
    assert 29_000 < answer.session_lifetime_ms <= 30_000


def test_scram_credentials_follow_the_users_config() -> None:
    cache = ScramCredentialCache()
    credential = make_credential("SCRAM-SHA-256", "pw")
    cache.update(Entity(user="dave"), {"SCRAM-SHA-256": str(credential), "other": "1"})
    assert cache.lookup("dave", "SCRAM-SHA-256") == credential
    assert cache.lookup("dave", "SCRAM-SHA-512") is None
    cache.update(Entity(user="dave"), {"SCRAM-SHA-256": "garbage"})
    assert cache.lookup("dave", "SCRAM-SHA-256") is None
    cache.update(Entity("dave", "app"), {"SCRAM-SHA-256": str(credential)})
    assert cache.lookup("dave", "SCRAM-SHA-256") is None
