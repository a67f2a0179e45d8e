"""cluster.yaml is a Ray cluster launcher file that Ray itself accepts.

`ray up` checks a file with `prepare_config` then `validate_config` (the JSON schema
ray/autoscaler/ray-schema.json, through jsonschema); so do these tests, for the active local
provider and for the commented AWS example.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import ray.autoscaler
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

FILE = Path(__file__).resolve().parents[2] / "cluster.yaml"
SCHEMA = Path(ray.autoscaler.__file__).parent / "ray-schema.json"
# How every node starts its Ray: Ray's `ray`, telling the raylet its agent's ports.
RAY_START = "python -m rafka.cli.ray_node start"


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load(FILE.read_text())


def _validate_as_ray_up_does(config: dict[str, Any]) -> dict[str, Any]:
    jsonschema.validate(config, json.loads(SCHEMA.read_text()))
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def test_local_provider_passes_rays_validation(config: dict[str, Any]) -> None:
    assert config["provider"]["type"] == "local"
    assert {"head_ip", "worker_ips"} <= set(config["provider"])
    prepared = _validate_as_ray_up_does(config)
    assert prepared["max_workers"] == len(config["provider"]["worker_ips"])


def test_commented_aws_example_passes_rays_validation(config: dict[str, Any]) -> None:
    text = FILE.read_text()
    start = text.index("# provider:\n#   type: aws")
    end = text.index("# head_node_type: head") + len("# head_node_type: head")
    example = yaml.safe_load("\n".join(line.removeprefix("#").removeprefix(" ")
                                       for line in text[start:end].splitlines()))
    assert example["provider"]["type"] == "aws"
    for node_type in example["available_node_types"].values():
        assert node_type["resources"]["rafka_broker"] == 1
    _validate_as_ray_up_does({**config, **example})


def test_every_node_offers_one_broker_slot(config: dict[str, Any]) -> None:
    head = " ".join(config["head_start_ray_commands"])
    workers = " ".join(config["worker_start_ray_commands"])
    for commands in (head, workers):
        assert RAY_START in commands
        assert """--resources='{"rafka_broker": 1}'""" in commands


def test_a_restarting_node_does_not_wait_for_its_agents_ports(config: dict[str, Any]) -> None:
    # Ports left to Ray are found through files the raylet gives up on after 15 s, and a head
    # restarting on a busy machine missed that (cluster.yaml says more).
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        start = next(c for c in config[key] if RAY_START in c)
        ports = [int(start.split(f"{option}=")[1].split()[0])
                 for option in ("--dashboard-agent-grpc-port", "--metrics-export-port",
                                "--runtime-env-agent-port", "--dashboard-agent-listen-port")]
        assert len(set(ports)) == 4 and all(20000 <= port < 32768 for port in ports), ports
        # Above the brokers' priority (nice 0), which the setup lets the user's processes take.
        assert f"ray-node -- nice -n -5 {RAY_START}" in " ".join(start.split())
    head = next(c for c in config["head_start_ray_commands"] if RAY_START in c)
    assert "--include-dashboard=false" in head
    limits = next(c for c in config["setup_commands"] if "limits.d" in c)
    assert '"$USER - nice -5"' in limits


def test_setup_installs_java_and_rafka_and_up_runs_on_the_head(config: dict[str, Any]) -> None:
    setup = " ".join(config["setup_commands"])
    assert "default-jre-headless" in setup
    assert "pip install" in setup and "rafka" in setup
    up = next(c for c in config["head_start_ray_commands"] if "rafka up" in c)
    assert "--address auto" in up
    assert "--broker-resource rafka_broker" in up
    assert '--zk "$RAFKA_ZK"' in up


def test_the_ensemble_is_the_providers_nodes_one_member_each(config: dict[str, Any]) -> None:
    # RAFKA_ZK_SERVERS and RAFKA_ZK name the provider's addresses, head first, in that order:
    # an address changed in one place and not the other would start no ensemble.
    profile = next(c for c in config["setup_commands"] if "RAFKA_ZK_SERVERS" in c)
    servers = profile.split("RAFKA_ZK_SERVERS=")[1].split("'")[0].split(",")
    connect = profile.split("RAFKA_ZK=")[1].split("'")[0].split(",")
    provider = config["provider"]
    nodes = [provider["head_ip"], *provider["worker_ips"]]
    assert [server.split(":")[0] for server in servers] == nodes
    assert [address.split(":")[0] for address in connect] == nodes
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        commands = " ".join(config[key])
        # Each node's member is kept running too, started afresh at each `ray up` or boot.
        assert ('rafka zookeeper stop && rafka supervise start zookeeper -- rafka zookeeper run '
                '--id auto --servers "$RAFKA_ZK_SERVERS" $RAFKA_ZK_OPTIONS') in commands
        # Each node's Ray is kept running, so a node Ray fenced comes back by itself.
        assert "rafka supervise start" in commands and "--block" in commands
    head = " ".join(config["head_start_ray_commands"])
    assert "RAY_gcs_storage=rocksdb" in head
