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


def deployment_files(folder: Path, addresses: list[str]) -> None:
    """The files cluster.yaml's secured profile reads from `~/.rafka/tls`, as its header's
    openssl recipe makes them: ca.pem, node.crt (the chain), node.key (PKCS#8, which ZooKeeper
    needs) and node.pem (both, for rafka's own links). The certificate names every node's
    address, since Ray's gRPC checks host names; the CA's key is not written (it stays off the
    nodes)."""
    ca = trustme.CA()
    leaf = ca.issue_cert(*addresses, common_name="rafka-node")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    chain = b"".join(pem.bytes() for pem in leaf.cert_chain_pems)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ca.pem").write_bytes(ca.cert_pem.bytes())
    (folder / "node.crt").write_bytes(chain)
    for name, content in (("node.key", key_pem), ("node.pem", key_pem + chain)):
        (folder / name).write_bytes(content)
        (folder / name).chmod(0o600)
