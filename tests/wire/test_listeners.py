"""Listener strings, as Kafka writes them in `listeners` and in a registration's `endpoints`."""

from __future__ import annotations

import pytest

from rafka.actors.config import BrokerConfig
from rafka.common.config import InvalidConfigError
from rafka.wire.listeners import InvalidListenerError, Listener, parse_listener


def test_a_plaintext_listener_is_read_and_written_back() -> None:
    assert parse_listener("PLAINTEXT://127.0.0.1:9092") == Listener("127.0.0.1", 9092)
    assert str(parse_listener("plaintext://broker-1:0")) == "PLAINTEXT://broker-1:0"
    assert parse_listener("PLAINTEXT://:9092") == Listener("0.0.0.0", 9092)
    assert parse_listener("PLAINTEXT://[::1]:9092") == Listener("::1", 9092)


@pytest.mark.parametrize(("text", "says"), [
    ("SSL://127.0.0.1:9093", "only PLAINTEXT"),
    ("127.0.0.1:9092", "PLAINTEXT://host:port"),
    ("PLAINTEXT://127.0.0.1", "PLAINTEXT://host:port"),
    ("PLAINTEXT://a:1,PLAINTEXT://b:2", "one listener"),
    ("PLAINTEXT://a:70000", "0-65535"),
    ("PLAINTEXT://a:port", "0-65535"),
])
def test_what_cannot_be_served_says_why(text: str, says: str) -> None:
    with pytest.raises(InvalidListenerError, match=says):
        parse_listener(text)


def test_a_broker_refuses_a_bad_listener_when_configured() -> None:
    assert BrokerConfig.from_dict({"listeners": "plaintext://0.0.0.0:9092"}).listeners == (
        "PLAINTEXT://0.0.0.0:9092")
    with pytest.raises(InvalidConfigError, match=r"advertised\.listeners=.*only PLAINTEXT"):
        BrokerConfig.from_dict({"advertised.listeners": "SASL_SSL://h:1"})
