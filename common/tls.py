"""Loading PEM files into an `ssl.SSLContext`, each failure an InvalidConfigError naming the
setting to fix: what the Kafka listeners' TLS and the data ports' share."""

from __future__ import annotations

import ssl

from rafka.common.config import InvalidConfigError


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
