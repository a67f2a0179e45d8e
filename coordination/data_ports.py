"""Where each replica host's data port listens, published in ZooKeeper by the host's broker:
`/data_ports/<host>` holds the address, the token a connection opens with and the TLS files
it speaks, so that a client or follower can reach a host without asking Ray where its actor
is (a process whose connection to Ray's GCS a network fault left half-open asks in vain for
minutes). The znode is private (only the cluster's credentials read it): the token is what
Ray hands only to the cluster's own processes.

A host that moved leaves its old address here until its broker publishes the new one; a
caller that cannot connect to what it read asks again later, as after any failed connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rafka.common.tls import PemFiles
from rafka.coordination import layout
from rafka.coordination.errors import ZNodeExistsError, ZNodeMissingError
from rafka.coordination.store import ClusterStore


@dataclass(frozen=True)
class DataPortAddress:
    """What `ReplicaHost.data_port_address` answers: where, the token, the TLS (or None)."""

    host: str
    port: int
    token: bytes
    tls: PemFiles | None = None

    def as_tuple(self) -> tuple[str, int, bytes, PemFiles | None]:
        return self.host, self.port, self.token, self.tls

    def to_json(self) -> dict[str, Any]:
        tls = self.tls
        return {
            "host": self.host, "port": self.port, "token": self.token.hex(),
            "tls": None if tls is None else {
                "certificate_chain": tls.certificate_chain, "ca_bundle": tls.ca_bundle,
                "key_password": tls.key_password},
        }

    @classmethod
    def from_json(cls, data: Any) -> DataPortAddress:
        """The address a znode holds (ValueError if it is not one)."""
        try:
            tls = data["tls"]
            return cls(
                str(data["host"]), int(data["port"]), bytes.fromhex(data["token"]),
                None if tls is None else PemFiles(
                    str(tls["certificate_chain"]), str(tls["ca_bundle"]),
                    None if tls.get("key_password") is None else str(tls["key_password"])))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"not a data port address: {data!r} ({error})") from error


def publish_data_port(store: ClusterStore, host: str, address: DataPortAddress) -> None:
    """Say where replica host `host` listens now (its broker, after the host started)."""
    path = layout.data_port_path(host)
    value = address.to_json()
    for _attempt in range(2):  # a concurrent create or delete: the second try settles it
        try:
            store.set(path, value)
            return
        except ZNodeMissingError:
            try:
                store.create(path, value, private=True)
                return
            except ZNodeExistsError:
                continue


def read_data_port(store: ClusterStore, host: str) -> DataPortAddress | None:
    """Where replica host `host` last said it listens (None if it never did)."""
    found = store.read_optional(layout.data_port_path(host))
    return None if found is None else DataPortAddress.from_json(found.value)
