"""What `rafka up` records, so that later `rafka` commands (new processes) find the cluster.

Two small JSON files:

* `<data-dir>/cluster.json`, the state: the cluster name, the ZooKeeper address, the Ray
  address, and what `up` started itself (the embedded ZooKeeper's data dir and PID, the Ray head's
  PID and log), which `rafka down` stops by PID and nothing else. It lives beside the data it
  describes, so a data dir is self-describing: `--data-dir DIR` finds it.
* `$RAFKA_HOME/clusters/<name>.json`, a pointer to that data dir, so that `--name NAME` (default
  `$RAFKA_CLUSTER`, else `rafka`) finds it from anywhere. `$RAFKA_HOME` defaults to `~/.rafka`;
  the default data dir is `$RAFKA_HOME/<name>`.

Of the ZooKeeper credentials the state holds only the path of their file, never the password.

Both are written atomically (write, then rename) so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rafka.coordination.security import CREDENTIALS_FILE_ENV

STATE_FILE = "cluster.json"
STATE_VERSION = 1
DEFAULT_NAME = "rafka"
ZK_CREDENTIALS_FILE = "zookeeper-credentials"


def rafka_home() -> Path:
    return Path(os.environ.get("RAFKA_HOME") or Path.home() / ".rafka").expanduser()


def default_name() -> str:
    return os.environ.get("RAFKA_CLUSTER") or DEFAULT_NAME


def default_data_dir(name: str) -> Path:
    return rafka_home() / name


def pointer_path(name: str) -> Path:
    return rafka_home() / "clusters" / f"{name}.json"


def default_zk_credentials_file() -> Path:
    """Where `rafka zookeeper credentials --generate` writes, and every command looks last."""
    return rafka_home() / ZK_CREDENTIALS_FILE


def zk_credentials_file(given: str | None, recorded: str | None = None) -> Path | None:
    """The ZooKeeper credentials file to use: the one given (--zk-credentials-file), else the
    one `rafka up` recorded, else $RAFKA_ZK_CREDENTIALS_FILE, else
    $RAFKA_HOME/zookeeper-credentials if it exists; None (no credentials) if none of these."""
    chosen = given or recorded or os.environ.get(CREDENTIALS_FILE_ENV)
    if chosen:
        return Path(chosen).expanduser()
    default = default_zk_credentials_file()
    return default if default.exists() else None


@dataclass
class ClusterState:
    """One cluster brought up by `rafka up`."""

    name: str
    zk: str
    ray_address: str
    data_dir: str
    brokers: int
    # What `up` started, and so what `down` stops: {"pid", "data_dir"} of the embedded ZooKeeper,
    # `RayHead.record()` of the Ray head; None for what was there before (--zk, --address).
    zookeeper: dict[str, Any] | None = None
    ray_head: dict[str, Any] | None = None
    # How clients authenticate to the Ray head `up` started ("token": ~/.ray/auth_token).
    ray_auth_mode: str | None = None
    # The file of the credentials guarding the cluster's znodes, if any (its path only).
    zk_credentials_file: str | None = None
    created: float = field(default_factory=time.time)
    version: int = STATE_VERSION

    @property
    def path(self) -> Path:
        return Path(self.data_dir) / STATE_FILE

    def save(self) -> Path:
        _write_json(self.path, asdict(self))
        _write_json(pointer_path(self.name), {"name": self.name, "data_dir": self.data_dir})
        return self.path

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        pointer = pointer_path(self.name)
        # Only our pointer: another `up` may have reused the name with another data dir.
        if _read_json(pointer).get("data_dir") == self.data_dir:
            with contextlib.suppress(FileNotFoundError):
                pointer.unlink()

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ClusterState:
        known = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in values.items() if key in known})


def load(name: str, data_dir: str | os.PathLike[str] | None = None) -> ClusterState | None:
    """The state of cluster `name` (through its pointer), or the one in `data_dir`; None if none."""
    if data_dir is None:
        data_dir = _read_json(pointer_path(name)).get("data_dir")
        if data_dir is None:
            return None
    values = _read_json(Path(data_dir) / STATE_FILE)
    return ClusterState.from_dict(values) if values else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        values = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return {}
    return values if isinstance(values, dict) else {}


def _write_json(path: Path, values: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n")
    partial.replace(path)
