"""`rafka brokers add` and `rafka reassign`: growing a cluster `rafka up` started, as a user does
it (subprocesses), moving a topic onto the new broker without losing a record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import rafka_up

# `rafka up` starts an embedded ZooKeeper and a Ray head in subprocesses.
pytestmark = pytest.mark.cluster

NAME = "reassigntest"


def test_brokers_add_then_reassign_onto_it(rafka_factory, tmp_path: Path, expect_error) -> None:
    rafka = rafka_factory(tmp_path)
    data_dir = tmp_path / "data"
    with rafka_up(rafka, NAME, data_dir, brokers=1):
        added = rafka("brokers", "add")
        assert added.returncode == 0, added.stderr
        assert added.stdout.strip() == "added broker 1"
        listed = json.loads(rafka("brokers", "list", "--format", "json").stdout)
        assert [b["id"] for b in listed["brokers"]] == [0, 1]

        assert rafka("topics", "create", "moving", "--partitions", "2").returncode == 0
        produced = rafka("produce", "moving", input="a\nb\nc\nd\n")
        assert produced.returncode == 0, produced.stderr

        expect_error(rafka("reassign", "--topic", "moving", "--replicas", "7"), 1,
                     "not registered")
        moved = rafka("reassign", "--topic", "moving", "--replicas", "1", timeout=300)
        assert moved.returncode == 0, moved.stderr
        assert "reassignment of partition moving-0 to [1] is completed" in moved.stdout
        assert "reassignment of partition moving-1 to [1] is completed" in moved.stdout
        verified = rafka("reassign", "--verify")
        assert verified.returncode == 0 and "no reassignment is in progress" in verified.stdout
        partitions = json.loads(rafka("topics", "describe", "moving", "--format", "json")
                                .stdout)[0]["partitions"]
        assert all(p["replicas"] == [1] and p["leader"] == 1 for p in partitions)
        assert not any((data_dir / "broker-0").glob("moving-*"))

        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "moving", "partition": 0, "replicas": [0, 1]}]}))
        back = rafka("reassign", "--reassignment-json-file", str(plan), timeout=300)
        assert back.returncode == 0, back.stderr
        assert "moving-0 to [0, 1] is completed" in back.stdout

        consumed = rafka("consume", "moving", "--from-beginning", "--max-messages", "4")
        assert consumed.returncode == 0, consumed.stderr
        assert sorted(consumed.stdout.split()) == ["a", "b", "c", "d"]

