"""Unmodified Kafka clients against rafka's Kafka listener: one 3-broker cluster for the package,
each broker listening on a free port of 127.0.0.1, with Kafka's authorizer allowing everyone
where no ACL says otherwise (so that the ACL APIs are served, as kafka-python's own suite asks of
it, and every other request is allowed, as without one). The scenarios every client goes through
are in tests/support/kafka_clients.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rafka import Cluster
from tests.support.cluster import CONSUMER_GROUPS_QUICKLY, cluster_of_its_own

AUTHORIZER_ALLOWING_EVERYONE = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true"}


@pytest.fixture(scope="package")
def kafka_cluster(zookeeper, ray_session, tmp_path_factory) -> Iterator[Cluster]:
    yield from cluster_of_its_own(zookeeper, tmp_path_factory, "kafka-clients",
                                  kafka_listeners="PLAINTEXT://127.0.0.1:0",
                                  broker_config={"group.initial.rebalance.delay.ms": 500,
                                                 **CONSUMER_GROUPS_QUICKLY,
                                                 **AUTHORIZER_ALLOWING_EVERYONE})
