"""TLS on the data ports: mutual TLS between the cluster's own processes, when the broker's
`security.inter.broker.protocol` is SSL.

Both ends take their context from the same PEM files, the broker's `ssl.keystore.location`
(certificate chain and key) and `ssl.truststore.location` (the cluster's CA bundle): every
replica host, the Kafka listeners' connections to them, follower hosts and rafka's own
producers and consumers. Each end requires the other's certificate to chain to that CA. Host
names are not checked: the cluster's processes share one certificate, and a data port is
reached at its node's address, which the certificate need not name; a certificate the
cluster's CA signed is what makes a peer one of the cluster's own (the token is checked
after, as without TLS).

A host hands its `DataPortTls` to whoever asks where it listens (`data_port_address`), so
every client connects as the port expects without a setting of its own; the files must be at
the same paths on every node (`cluster.yaml` mounts them so).

`TlsSession` is TLS without a socket (`ssl.SSLObject` over memory buffers) for the blocking
client's non-blocking sockets: bytes in, bytes out.
"""

from __future__ import annotations

import functools
import ssl

from rafka.common.tls import PemFiles, load_ca_bundle, load_certificate_chain

MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2


# The cluster's files, as a host hands them to its clients.
DataPortTls = PemFiles


def data_port_tls(protocol: str, keystore: str | None, truststore: str | None,
                  key_password: str | None) -> DataPortTls | None:
    """The data ports' TLS under `security.inter.broker.protocol=protocol` (None for
    PLAINTEXT); the broker's config has checked that SSL comes with both files."""
    if protocol == "PLAINTEXT":
        return None
    assert keystore and truststore, "BrokerConfig refuses SSL without both files"
    return DataPortTls(keystore, truststore, key_password)


def _context(tls: DataPortTls, server_side: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = MINIMUM_VERSION
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    load_certificate_chain(context, "ssl.keystore.location", tls.certificate_chain,
                           tls.key_password)
    load_ca_bundle(context, "ssl.truststore.location", tls.ca_bundle)
    return context


# One context per process and setting: loading the files takes milliseconds, and every
# connection would otherwise pay it.
@functools.lru_cache(maxsize=4)
def server_context(tls: DataPortTls) -> ssl.SSLContext:
    """The context a data port wraps its connections in: the client's certificate required."""
    return _context(tls, server_side=True)


@functools.lru_cache(maxsize=4)
def client_context(tls: DataPortTls) -> ssl.SSLContext:
    """The context a client of a data port connects with: its certificate shown, the port's
    verified against the cluster's CA."""
    return _context(tls, server_side=False)


class TlsSession:
    """The client's end of one TLS connection, without I/O: `send` takes plaintext, `receive`
    takes what came off the socket and gives the plaintext in it, and `outgoing` is what to
    put on the socket next. Plaintext sent before the handshake ends goes once it has.
    Raises ssl.SSLError (an OSError) when the peer is refused or refuses."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=False)
        self._pending = bytearray()
        self.established = False
        self._advance()

    def send(self, plaintext: bytes | bytearray) -> None:
        self._pending += plaintext
        self._advance()

    def receive(self, ciphertext: bytes) -> bytes:
        self._incoming.write(ciphertext)
        self._advance()
        if not self.established:
            return b""
        chunks = []
        while True:
            try:
                chunk = self._ssl.read(len(ciphertext) + 16 * 1024)
            except ssl.SSLWantReadError:
                break
            if not chunk:
                raise ConnectionResetError("the data port closed the TLS connection")
            chunks.append(chunk)
        return b"".join(chunks)

    def outgoing(self) -> bytes:
        return self._outgoing.read()

    def has_outgoing(self) -> bool:
        return self._outgoing.pending > 0

    def _advance(self) -> None:
        if not self.established:
            try:
                self._ssl.do_handshake()
            except ssl.SSLWantReadError:
                return
            self.established = True
        if self._pending:
            self._ssl.write(self._pending)
            self._pending.clear()
