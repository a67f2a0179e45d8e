"""Digest ACLs: only holders of the cluster's credentials may change its znodes.

Policy (Kafka's `zookeeper.set.acl=true` does the same): every znode a credentialed client
creates gets `digest:<user>:<hash>` with all permissions, plus world READ by default
(`AclPolicy.WORLD_READABLE`), so monitoring tools and read-only clients can still look, but
nobody without the credentials can create, change or delete anything in the cluster. With
`AclPolicy.CLOSED` the world gets nothing, not even reads. A client without credentials creates
open znodes (ZooKeeper's default), which is what a development cluster wants.

The credentials are sent to ZooKeeper by the client (`auth_data`), and the ACL names a SHA-1 of
`user:password`, never the password itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_acl, make_digest_acl


class AclPolicy(str, enum.Enum):
    WORLD_READABLE = "world-readable"
    """The credentials' holder may do anything; everybody else may only read."""
    CLOSED = "closed"
    """Only the credentials' holder may read or change anything."""


@dataclass(frozen=True)
class ClusterCredentials:
    """The user and password guarding a cluster's znodes (ZooKeeper digest authentication)."""

    user: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.user or ":" in self.user:
            raise ValueError(
                f"ZooKeeper digest user {self.user!r} must be non-empty and without ':' "
                f"(credentials are written 'user:password')"
            )
        if not self.password:
            raise ValueError("the ZooKeeper digest password must not be empty")

    @classmethod
    def parse(cls, text: str) -> ClusterCredentials:
        """Read `user:password` (the password may itself contain ':')."""
        user, colon, password = text.partition(":")
        if not colon:
            raise ValueError("ZooKeeper credentials must be written 'user:password'")
        return cls(user, password)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """What to pass to `KazooClient(auth_data=...)`."""
        return [("digest", f"{self.user}:{self.password}")]


def cluster_acl(
    credentials: ClusterCredentials | None, policy: AclPolicy = AclPolicy.WORLD_READABLE
) -> list[ACL]:
    """The ACL every znode of the cluster is created with (see the module docstring)."""
    if credentials is None:
        return list(OPEN_ACL_UNSAFE)
    acl = [make_digest_acl(credentials.user, credentials.password, all=True)]
    if AclPolicy(policy) is AclPolicy.WORLD_READABLE:
        acl.append(make_acl("world", "anyone", read=True))
    return acl


def as_credentials(credentials: ClusterCredentials | str | None) -> ClusterCredentials | None:
    """Accept credentials as an object, as `user:password`, or None."""
    if credentials is None or isinstance(credentials, ClusterCredentials):
        return credentials
    return ClusterCredentials.parse(credentials)
