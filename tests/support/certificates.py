"""PEM files for the tests of the cluster's own links, made by trustme: the cluster's CA and
the certificate chain and key every node shares, and a stranger's pair signed by another CA."""

from __future__ import annotations

from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization

from rafka.common.tls import PemFiles


def cluster_files(folder: Path) -> tuple[PemFiles, PemFiles]:
    """The cluster's files, and a stranger's (its own CA, the same name)."""
    made = []
    for name in ("node", "stranger"):
        ca = trustme.CA()
        (folder / f"{name}-ca.pem").write_bytes(ca.cert_pem.bytes())
        # A name no node is reached by: the cluster's links check none. The key as PKCS#8,
        # the one form ZooKeeper's PEM reader takes.
        leaf = ca.issue_cert("rafka-node")
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
        (folder / f"{name}.pem").write_bytes(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
            + b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
        made.append(PemFiles(str(folder / f"{name}.pem"), str(folder / f"{name}-ca.pem")))
    return made[0], made[1]


def inter_broker_ssl(node: PemFiles) -> dict[str, str]:
    """The broker settings that put the data ports on mutual TLS with `node`'s files."""
    return {"security.inter.broker.protocol": "SSL",
            "ssl.keystore.location": node.certificate_chain,
            "ssl.truststore.location": node.ca_bundle}
