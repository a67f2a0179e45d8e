"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; Kafka's KIP-84), on `scramp`.

A user's credential is what Kafka stores in `/config/users/<user>` under the mechanism's name:
`salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>` (`ScramCredential`),
never the password. `ScramServer` looks the user's credential up when the client names it; an
unknown user fails the same way as a wrong password, at the client's proof, so the answer does
not tell which.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import NamedTuple

from scramp import ScramException, ScramMechanism

from rafka.wire.sasl import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    AuthenticatingServer,
    SaslAuthenticationError,
)

SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
# Kafka's bounds for a credential's iterations (ScramMechanism.minIterations / maxIterations).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
FAILED = "Authentication failed during authentication due to invalid credentials with SASL " \
         "mechanism {}"


class ScramCredential(NamedTuple):
    """A user's salted SCRAM credential (Kafka's `ScramCredential`)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __str__(self) -> str:
        """As Kafka writes it into the user's config znode."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def parse(cls, text: str) -> ScramCredential:
        """A credential as Kafka writes it; ValueError if it is not one."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True),
                       int(fields["iterations"]))
        except (KeyError, ValueError) as error:
            raise ValueError(f"not a SCRAM credential: {error}") from None


def scram_iterations(config: Mapping[str, str]) -> dict[str, int]:
    """The iterations of each SCRAM credential a user's config holds, by mechanism (one that
    does not parse is left out)."""
    found = {}
    for mechanism in SCRAM_MECHANISMS:
        if mechanism in config:
            try:
                found[mechanism] = ScramCredential.parse(config[mechanism]).iterations
            except ValueError:
                continue
    return found


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A fresh salted credential of `password` (a random salt unless given)."""
    check_iterations(mechanism, iterations)
    salt, stored_key, server_key, _ = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt)
    return ScramCredential(salt, stored_key, server_key, iterations)


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential of a password the client salted itself, as AlterUserScramCredentials
    sends it (KIP-554): the broker never sees the password."""
    check_iterations(mechanism, iterations)
    name = "sha256" if mechanism == SCRAM_SHA_256 else "sha512"
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    server_key = hmac.new(salted_password, b"Server Key", name).digest()
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), server_key, iterations)


def check_iterations(mechanism: str, iterations: int) -> None:
    """ValueError for a mechanism rafka lacks, or iterations outside Kafka's bounds."""
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"{mechanism!r} is not a SCRAM mechanism: use one of "
                         f"{', '.join(SCRAM_MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"{mechanism} iterations must be between {MIN_ITERATIONS} and "
                         f"{MAX_ITERATIONS}, not {iterations}")


CredentialLookup = Callable[[str, str], "ScramCredential | None"]
"""`lookup(user, mechanism)`: the user's credential of that mechanism, None if it has none."""


class ScramServer(AuthenticatingServer):
    """The server of one SCRAM exchange: client-first, server-first, client-final,
    server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        super().__init__()
        check_iterations(mechanism, DEFAULT_ITERATIONS)
        self.mechanism = mechanism
        self._lookup = lookup
        self._scram = ScramMechanism(mechanism)
        self._server = self._scram.make_server(self._auth_info)
        self._step = 0
        self._user: str | None = None
        self._known = True

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = user
        credential = self._lookup(user, self.mechanism)
        if credential is None:
            # Go on with a credential nobody holds, and fail at the proof, as for a wrong
            # password: the exchange does not tell who exists.
            self._known = False
            credential = make_credential(self.mechanism, "")
        return credential.salt, credential.stored_key, credential.server_key, \
            credential.iterations

    def _accept_nonce_as_kafka_does(self, client_final: str) -> None:
        """Kafka's ScramSaslServer takes a final nonce that ends with the server's, where RFC
        5802 (and scramp) want it equal: older librdkafka, as kcat packages it, sends the
        client's part twice. The proof is still checked over the messages as sent."""
        nonce, expected = _final_nonce(client_final), str(self._server.nonce)
        if nonce is not None and nonce != expected and nonce.endswith(expected):
            self._server.nonce = type(self._server.nonce)(nonce)  # scramp's Nonce

    def evaluate(self, client_bytes: bytes) -> bytes:
        try:
            message = bytes(client_bytes).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("SCRAM messages are UTF-8") from None
        try:
            if self._step == 0:
                self._server.set_client_first(message)
                self._step = 1
                return str(self._server.get_server_first()).encode()
            if self._step == 1:
                self._step = 2
                self._accept_nonce_as_kafka_does(message)
                self._server.set_client_final(message)
                if not self._known:
                    raise SaslAuthenticationError(FAILED.format(self.mechanism))
                self._step = 3
                assert self._user is not None  # named in the client's first message
                self._authenticated(self._user)
                return str(self._server.get_server_final()).encode()
        except ScramException as error:
            self._step = 2
            raise SaslAuthenticationError(
                f"{FAILED.format(self.mechanism)}: {_reason(error)}") from None
        raise SaslAuthenticationError(f"{self.mechanism} is over: no more messages")


def _final_nonce(client_final: str) -> str | None:
    for attribute in client_final.split(","):
        if attribute.startswith("r="):
            return attribute[2:]
    return None


def _reason(error: ScramException) -> str:
    # scramp's messages name what failed (a bad proof, a malformed message), never a key.
    return str(error.args[0]) if error.args else "invalid message"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
