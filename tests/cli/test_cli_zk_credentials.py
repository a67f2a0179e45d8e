"""`rafka up` with a ZooKeeper credentials file, on the session's ZooKeeper and Ray (so that only
the broker starts): the state records the file's path and never the password, and the commands
that find the cluster through that state use the same file without being told.

The ACLs themselves, and the command line given the file or not, are tested against a cluster
started in-process in tests/actors/test_secured_cluster.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import ray
from kazoo.client import KazooClient
from kazoo.security import Permissions

from rafka.coordination.embedded import EmbeddedZooKeeper
from tests.support.cli import Rafka, rafka_up
from tests.support.zookeeper import make_chroot

NAME = "credentialstest"


def test_up_records_the_file_and_the_commands_use_it(
    zookeeper: EmbeddedZooKeeper, ray_session: None, rafka_factory, tmp_path: Path,
) -> None:
    rafka: Rafka = rafka_factory(tmp_path)
    # The in-process Ray uses token auth, its token in ~/.ray/auth_token of the real HOME.
    rafka.env.update(HOME=os.environ["HOME"], RAY_AUTH_MODE="token")
    generated = rafka("zookeeper", "credentials", "--generate")
    assert generated.returncode == 0, generated.stderr
    credentials_file = Path(rafka.env["RAFKA_HOME"]) / "zookeeper-credentials"
    password = credentials_file.read_text().strip().partition(":")[2]
    chroot = make_chroot(zookeeper, f"{NAME}-{tmp_path.name}")
    address = ray.get_runtime_context().gcs_address
    # No --zk-credentials-file: the file just generated is the default.
    with rafka_up(rafka, NAME, tmp_path / "data", 1, "--zk", str(chroot),
                  "--address", address) as (result, state):
        assert f"credentials in {credentials_file}" in result.stdout
        assert state["zk_credentials_file"] == str(credentials_file)
        assert password not in (tmp_path / "data" / "cluster.json").read_text()

        created = rafka("topics", "create", "--topic", "orders")
        assert created.returncode == 0, created.stderr
        client = KazooClient(hosts=str(chroot))
        client.start(timeout=15)
        try:
            acls, _stat = client.get_acls(f"/rafka/{NAME}/brokers/topics/orders")
        finally:
            client.stop()
            client.close()
        assert ("digest", Permissions.ALL) in {(acl.id.scheme, acl.perms) for acl in acls}
        listed = json.loads(rafka("brokers", "list", "--format", "json").stdout)
        assert [broker["id"] for broker in listed["brokers"]] == [0]
