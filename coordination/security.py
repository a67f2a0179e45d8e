"""Digest ACLs: only holders of the cluster's credentials may change its znodes.

Policy (Kafka's `zookeeper.set.acl=true` does the same): every znode a credentialed client
creates gets `digest:<user>:<hash>` with all permissions, plus world READ by default
(`AclPolicy.WORLD_READABLE`), so monitoring tools and read-only clients can still look, but
nobody without the credentials can create, change or delete anything in the cluster. With
`AclPolicy.CLOSED` the world gets nothing, not even reads. A client without credentials creates
open znodes (ZooKeeper's default), which is what a development cluster wants.

The credentials are sent to ZooKeeper by the client (`auth_data`), and the ACL names a SHA-1 of
`user:password`, never the password itself.

Every process of a cluster (the `Cluster` handle, each broker, each group member, the command
line) must hold the same credentials. On disk they live in a credentials file: one line,
`user:password`, readable by its owner only (mode 0600), like an ssh key.
"""

from __future__ import annotations

import contextlib
import enum
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from rafka.coordination.errors import CredentialsFileError

DEFAULT_USER = "rafka"
CREDENTIALS_FILE_ENV = "RAFKA_ZK_CREDENTIALS_FILE"
"""The environment variable naming a credentials file, for every command line that connects."""
CREDENTIALS_FILE_MODE = 0o600
# Bits that let anyone but the owner at the file: any of them and the password is not secret.
_OPEN_TO_OTHERS = stat.S_IRWXG | stat.S_IRWXO


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


def generate_credentials(user: str = DEFAULT_USER) -> ClusterCredentials:
    """Fresh credentials: `user` and a random password of 256 bits."""
    return ClusterCredentials(user, secrets.token_urlsafe(32))


def load_credentials_file(path: str | os.PathLike[str]) -> ClusterCredentials:
    """The credentials in `path`: one line `user:password`, in a file only its owner may use.

    Refuses (`CredentialsFileError`) a missing file, one open to group or others, and one that
    is empty or not `user:password`. No message ever holds the file's content.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
        if mode & _OPEN_TO_OTHERS:
            raise CredentialsFileError(
                f"the ZooKeeper credentials file {path} is open to other users (mode "
                f"{stat.S_IMODE(mode):04o}) and holds a password: make it readable by its owner "
                f"only with `chmod 600 {path}`"
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CredentialsFileError(
            f"no ZooKeeper credentials file at {path}: copy the cluster's file there, or "
            f"create one for a new cluster with `rafka zookeeper credentials --generate`"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise CredentialsFileError(
            f"cannot read the ZooKeeper credentials file {path}: {reason}"
        ) from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise CredentialsFileError(
            f"the ZooKeeper credentials file {path} is empty: it must hold one line, "
            f"user:password"
        )
    if len(lines) > 1:
        raise CredentialsFileError(
            f"the ZooKeeper credentials file {path} holds {len(lines)} lines: it must hold one, "
            f"user:password"
        )
    try:
        return ClusterCredentials.parse(lines[0])
    except ValueError as error:
        raise CredentialsFileError(f"the ZooKeeper credentials file {path}: {error}") from None


def write_credentials_file(
    path: str | os.PathLike[str], credentials: ClusterCredentials, *, overwrite: bool = False
) -> Path:
    """Write `credentials` to `path`, mode 0600 from its creation on (never readable by others,
    not even for a moment). `FileExistsError` if `path` exists, unless `overwrite`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    content = f"{credentials.user}:{credentials.password}\n".encode()
    target = path.with_name(f".{path.name}.{os.getpid()}.tmp") if overwrite else path
    # O_EXCL: without `overwrite`, an existing file is refused atomically.
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, CREDENTIALS_FILE_MODE)
    try:
        os.fchmod(descriptor, CREDENTIALS_FILE_MODE)  # whatever the umask
        os.write(descriptor, content)
    except BaseException:
        os.close(descriptor)
        with contextlib.suppress(OSError):
            target.unlink()
        raise
    os.close(descriptor)
    if overwrite:
        target.replace(path)
    return path
