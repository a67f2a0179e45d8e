"""ZooKeeper's client port over TLS: what every kazoo client of rafka connects with, and the
zoo.cfg lines of a server's `secureClientPort` (ZooKeeper 3.5+; the embedded one is 3.6).

Kafka's ZooKeeper client reads `zookeeper.ssl.client.enable`, `zookeeper.ssl.keystore.location`
and `zookeeper.ssl.truststore.location` from the broker's config or the JVM's system
properties, which every ZooKeeper client of the process then uses. rafka's equivalent of those
process-wide properties is the environment: the same names, upper-cased, `RAFKA_` in front
(`CLIENT_ENABLE_ENV` and below). Every process that talks to ZooKeeper reads them when it
connects: the `Cluster` handle, the brokers and group members (Ray workers inherit `ray
start`'s environment), the command line. The connect string then names the servers' secure
ports.

Both ends load the same PEM files: a certificate chain with its key (one file, the data ports'
`ssl.keystore.location` can be it) and the cluster's CA bundle. Each end requires the other's
certificate to chain to that CA (`ssl.clientAuth=need` on the server); host names are not
checked, as on the data ports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rafka.common.tls import PemFiles
from rafka.coordination.errors import ZooKeeperTlsConfigError

CLIENT_ENABLE_ENV = "RAFKA_ZOOKEEPER_SSL_CLIENT_ENABLE"
KEYSTORE_ENV = "RAFKA_ZOOKEEPER_SSL_KEYSTORE_LOCATION"
TRUSTSTORE_ENV = "RAFKA_ZOOKEEPER_SSL_TRUSTSTORE_LOCATION"
KEY_PASSWORD_ENV = "RAFKA_ZOOKEEPER_SSL_KEY_PASSWORD"
# The key forms ZooKeeper's PEM reader takes.
PKCS8_KEYS = ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY")
# The server's: Netty serves the secure port (the default NIO factory cannot).
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"


class ZooKeeperTls(PemFiles):
    """The PEM files a ZooKeeper client or server shows and trusts."""

    def kazoo_options(self) -> dict[str, Any]:
        """What `KazooClient(...)` takes to connect over TLS."""
        return {"use_ssl": True, "verify_certs": True, "check_hostname": False,
                "ca": self.ca_bundle, "certfile": self.certificate_chain,
                "keyfile": self.certificate_chain,
                "keyfile_password": self.key_password}

    def server_settings(self, secure_port: int, host: str) -> dict[str, object]:
        """zoo.cfg's lines for a `secureClientPort` on `host`, mutual TLS from PEM files.
        ZooKeeperTlsConfigError for a key ZooKeeper cannot read: it would start, then close
        every connection to that port."""
        text = Path(self.certificate_chain).read_text(errors="replace")
        if not any(f"-----BEGIN {kind}-----" in text for kind in PKCS8_KEYS):
            raise ZooKeeperTlsConfigError(
                f"{self.certificate_chain}: ZooKeeper reads a PKCS#8 key only (BEGIN PRIVATE "
                "KEY, what OpenSSL 3 writes); convert it with `openssl pkcs8 -topk8 -nocrypt`")
        settings: dict[str, object] = {
            "secureClientPort": secure_port,
            "secureClientPortAddress": host,
            "serverCnxnFactory": NETTY_FACTORY,
            "ssl.keyStore.location": self.certificate_chain,
            "ssl.keyStore.type": "PEM",
            "ssl.trustStore.location": self.ca_bundle,
            "ssl.trustStore.type": "PEM",
            "ssl.clientAuth": "need",
        }
        if self.key_password:
            settings["ssl.keyStore.password"] = self.key_password
        return settings


def client_tls(environ: Mapping[str, str] | None = None) -> ZooKeeperTls | None:
    """The TLS this process's ZooKeeper clients use, from the environment (None: none)."""
    environ = os.environ if environ is None else environ
    enabled = environ.get(CLIENT_ENABLE_ENV, "false").strip().lower()
    if enabled not in ("true", "false"):
        raise ZooKeeperTlsConfigError(f"{CLIENT_ENABLE_ENV}={enabled!r}: true or false")
    return server_tls(environ, f"{CLIENT_ENABLE_ENV}=true") if enabled == "true" else None


def server_tls(environ: Mapping[str, str] | None = None,
               asking: str = "a secure client port") -> ZooKeeperTls:
    """The files a server's secure client port (or, for `client_tls`, a client) loads, from
    the environment: the same variables, so that one node's setting serves both."""
    environ = os.environ if environ is None else environ
    files = {}
    for name, what in ((KEYSTORE_ENV, "the certificate chain and key"),
                       (TRUSTSTORE_ENV, "the CA bundle")):
        path = environ.get(name, "")
        if not path or not Path(path).expanduser().is_file():
            raise ZooKeeperTlsConfigError(
                f"{asking} needs {name}, a readable PEM file ({what}), got {path!r}")
        files[name] = str(Path(path).expanduser())
    return ZooKeeperTls(files[KEYSTORE_ENV], files[TRUSTSTORE_ENV],
                        environ.get(KEY_PASSWORD_ENV) or None)
