"""The PEM files of one end of a TLS link (`PemFiles`), and loading them into an
`ssl.SSLContext`, each failure an InvalidConfigError naming the setting to fix: what the Kafka
listeners' TLS, the data ports' and ZooKeeper's share."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from rafka.common.config import InvalidConfigError


@dataclass(frozen=True)
class PemFiles:
    """What one end of a mutual TLS link shows and trusts."""

    certificate_chain: str
    """A PEM file of a certificate chain and its private key."""
    ca_bundle: str
    """A PEM bundle of the CAs the other end's certificate must chain to."""
    key_password: str | None = None

    def __repr__(self) -> str:  # the password stays out of logs and errors
        return (f"{type(self).__name__}(certificate_chain={self.certificate_chain!r}, "
                f"ca_bundle={self.ca_bundle!r})")


def load_certificate_chain(context: ssl.SSLContext, setting: str, location: str,
                           password: str | None) -> None:
    """The certificate chain and private key in the PEM file `location` (`setting`'s)."""
    try:
        context.load_cert_chain(location, password=password)
    except (OSError, ssl.SSLError) as error:
        raise InvalidConfigError(
            setting, location,
            f"not a readable PEM file of a certificate chain and its private key ({error}); "
            "if the key is encrypted, set ssl.key.password") from None


def load_ca_bundle(context: ssl.SSLContext, setting: str, location: str | None) -> None:
    """The CAs in the PEM bundle `location` (`setting`'s); None: the system's."""
    try:
        if location:
            context.load_verify_locations(cafile=location)
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (OSError, ssl.SSLError) as error:
        raise InvalidConfigError(
            setting, location, f"not a readable PEM bundle of CA certificates ({error})") from None
