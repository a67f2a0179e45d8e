"""The SASL mechanisms, without sockets: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER."""

from __future__ import annotations

import hashlib
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from scramp import ScramClient

from rafka.wire.principal import KafkaPrincipal
from rafka.wire.sasl import SaslAuthenticationError
from rafka.wire.sasl.oauthbearer import (
    OAuthBearerServer,
    SignedTokenValidator,
    UnsecuredTokenValidator,
    parse_client_first,
)
from rafka.wire.sasl.plain import PlainServer, parse_jaas_users
from rafka.wire.sasl.scram import (
    ScramCredential,
    ScramServer,
    credential_from_salted_password,
    make_credential,
)


def test_plain_users_come_from_kafkas_jaas_line() -> None:
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="admin" password="admin-secret" user_admin="admin-secret" '
            'user_alice="p\\"w";')
    assert parse_jaas_users(jaas) == {"admin": "admin-secret", "alice": 'p"w'}


def test_plain() -> None:
    server = PlainServer({"alice": "secret"})
    assert server.evaluate(b"\0alice\0secret") == b""
    assert server.complete and server.principal == KafkaPrincipal("User", "alice")
    assert server.session_expires_at is None
    for message in (b"\0alice\0wrong", b"\0bob\0secret", b"bob\0alice\0secret", b"nonul",
                    b"\0\0", b"\0alice\0\xff"):
        with pytest.raises(SaslAuthenticationError):
            PlainServer({"alice": "secret"}).evaluate(message)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_a_stored_credential(mechanism: str) -> None:
    credentials = {"alice": make_credential(mechanism, "secret")}
    stored = str(credentials["alice"])
    assert stored.startswith("salt=") and ",stored_key=" in stored and stored.endswith(
        ",iterations=4096")
    assert ScramCredential.parse(stored) == credentials["alice"]

    def lookup(user: str, asked: str) -> ScramCredential | None:
        assert asked == mechanism
        return credentials.get(user)

    server = ScramServer(mechanism, lookup)
    client = ScramClient([mechanism], "alice", "secret")
    server_first = server.evaluate(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.evaluate(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # the client checks the server's signature
    assert server.complete and server.principal == KafkaPrincipal("User", "alice")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"more")

    for user, password in (("alice", "wrong"), ("nobody", "secret")):
        server = ScramServer(mechanism, lookup)
        client = ScramClient([mechanism], user, password)
        client.set_server_first(server.evaluate(client.get_client_first().encode()).decode())
        with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
            server.evaluate(client.get_client_final().encode())
        assert not server.complete
    with pytest.raises(SaslAuthenticationError):
        ScramServer(mechanism, lookup).evaluate(b"not scram")


def test_a_credential_from_a_salted_password_is_the_same() -> None:
    made = make_credential("SCRAM-SHA-512", "secret", salt=b"0123456789abcdef")
    salted = hashlib.pbkdf2_hmac("sha512", b"secret", made.salt, 4096)
    assert credential_from_salted_password("SCRAM-SHA-512", made.salt, salted, 4096) == made
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-1", "secret")
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "secret", iterations=100)


def _message(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def test_the_oauthbearer_message_is_rfc_7628s() -> None:
    found = parse_client_first(b"n,a=alice,\x01host=h\x01auth=Bearer abc.def.\x01\x01")
    assert (found.token, found.authorization_id, found.extensions) == ("abc.def.", "alice",
                                                                       {"host": "h"})
    for bad in (b"", b"n,,", b"n,,\x01auth=Bearer x\x01", b"p,,\x01auth=Bearer x\x01\x01",
                b"n,,\x01auth=Basic x\x01\x01", b"n,,\x01noequals\x01\x01", b"\xff"):
        with pytest.raises(SaslAuthenticationError):
            parse_client_first(bad)


def test_unsecured_tokens_as_kafkas_default_handler_accepts_them() -> None:
    now = time.time()

    def unsecured(**claims: object) -> str:
        return jwt.encode(claims, None, algorithm="none")

    server = OAuthBearerServer(UnsecuredTokenValidator())
    server.evaluate(_message(unsecured(sub="alice", iat=now, exp=now + 60)))
    assert server.principal == KafkaPrincipal("User", "alice")
    assert server.session_expires_at == pytest.approx(now + 60)
    for token in (unsecured(sub="alice", exp=now - 1), unsecured(exp=now + 60),
                  unsecured(sub="", exp=now + 60), unsecured(sub="alice"),
                  unsecured(sub="alice", exp=now + 60, iat=now + 30), "not.a.token",
                  jwt.encode({"sub": "alice", "exp": now + 60}, "k" * 32, algorithm="HS256")):
        with pytest.raises(SaslAuthenticationError):
            OAuthBearerServer(UnsecuredTokenValidator()).evaluate(_message(token))
    with pytest.raises(SaslAuthenticationError):  # another authorization id than the token's
        OAuthBearerServer(UnsecuredTokenValidator()).evaluate(
            _message(unsecured(sub="alice", exp=now + 60), authzid="bob"))


def test_signed_tokens_against_a_key_set() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = {"keys": [{**public, "kid": "one", "use": "sig", "alg": "RS256"}]}
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = time.time()

    def signed(signer: object = key, kid: str = "one", **claims: object) -> str:
        return jwt.encode(claims, signer, algorithm="RS256", headers={"kid": kid})

    def validator() -> SignedTokenValidator:
        return SignedTokenValidator(json.dumps(jwks), expected_audience=["rafka"],
                                    expected_issuer="https://issuer")

    good = {"sub": "svc", "exp": now + 60, "aud": "rafka", "iss": "https://issuer"}
    server = OAuthBearerServer(validator())
    server.evaluate(_message(signed(**good)))
    assert server.principal == KafkaPrincipal("User", "svc")
    for token in (signed(other, **good), signed(kid="two", **good),
                  signed(**{**good, "aud": "else"}), signed(**{**good, "iss": "else"}),
                  signed(**{**good, "exp": now - 3600}), signed(sub="svc", aud="rafka",
                                                                iss="https://issuer"),
                  jwt.encode(good, None, algorithm="none")):
        with pytest.raises(SaslAuthenticationError):
            OAuthBearerServer(validator()).evaluate(_message(token))
