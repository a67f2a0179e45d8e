"""The TLS of a broker's SSL listeners: an `ssl.SSLContext` from the broker's `ssl.*` settings.

Kafka reads JKS or PKCS12 keystores; rafka reads PEM files through Python's `ssl` module:
`ssl.keystore.location` is the broker's certificate chain and private key (one PEM file, the
key encrypted with `ssl.key.password` or not), `ssl.truststore.location` a bundle of the CAs
that client certificates must chain to. Every problem with them is an InvalidConfigError
saying which setting to fix, raised when the broker starts, not at a client's first handshake.
"""

from __future__ import annotations

import ssl

from rafka.actors.config import BrokerConfig
from rafka.common.config import InvalidConfigError
from rafka.common.tls import load_ca_bundle, load_certificate_chain

_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                 "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The context an SSL listener wraps its connections in."""
    if not config.ssl_keystore_location:
        raise InvalidConfigError(
            "an SSL listener needs a certificate: set ssl.keystore.location to a PEM file "
            "with the certificate chain and key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted((_VERSIONS[name] for name in config.ssl_enabled_protocols.split(",")),
                      key=lambda version: version.value)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    load_certificate_chain(context, "ssl.keystore.location", config.ssl_keystore_location,
                           config.ssl_key_password)
    context.verify_mode = _VERIFY_MODES[config.ssl_client_auth]
    if context.verify_mode != ssl.CERT_NONE:
        load_ca_bundle(context, "ssl.truststore.location", config.ssl_truststore_location)
    if config.ssl_cipher_suites:
        try:
            context.set_ciphers(config.ssl_cipher_suites)
        except ssl.SSLError as error:
            raise InvalidConfigError("ssl.cipher.suites", config.ssl_cipher_suites,
                                     f"no cipher OpenSSL knows ({error})") from None
    return context
