"""`rafka quotas`' options read as kafka-configs.sh reads them, without a cluster."""

from __future__ import annotations

import pytest

from rafka.cli.commands.errors import CliError
from rafka.cli.commands.quotas import _entity_filter, updates_of
from rafka.cli.main import build_parser


def _parsed(*argv: str):
    return build_parser("quotas").parse_args(["quotas", *argv])


def test_entity_options_pair_up_in_order() -> None:
    args = _parsed("--alter", "--entity-type", "users", "--entity-default",
                   "--entity-type", "clients", "--entity-name", "app",
                   "--add-config", "producer_byte_rate=1024")
    assert _entity_filter(args) == [("user", None), ("client-id", "app")]
    assert _entity_filter(_parsed("--describe", "--entity-type", "users")) == [("user", "")]
    with pytest.raises(CliError):
        _entity_filter(_parsed("--describe", "--entity-name", "alice"))


def test_configs_are_kafka_configs_lists() -> None:
    assert updates_of("producer_byte_rate=1024,request_percentage=12.5",
                      "consumer_byte_rate") == {"producer_byte_rate": 1024.0,
                                                "request_percentage": 12.5,
                                                "consumer_byte_rate": None}
    for add, delete in (("producer_byte_rate=fast", ""), ("no_such_quota=1", ""),
                        ("producer_byte_rate", ""), ("producer_byte_rate=1",
                                                     "producer_byte_rate")):
        with pytest.raises(CliError):
            updates_of(add, delete)
