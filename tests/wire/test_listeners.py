"""Listener strings, as Kafka writes them in `listeners` and in a registration's `endpoints`,
and the security protocols their names map to."""

from __future__ import annotations

import pytest

from rafka.actors.config import BrokerConfig
from rafka.common.config import InvalidConfigError
from rafka.wire.listeners import (
    DEFAULT_PROTOCOL_MAP,
    InvalidListenerError,
    Listener,
    SecurityProtocol,
    parse_listener,
    parse_listeners,
    parse_protocol_map,
    security_protocol,
)


def test_a_plaintext_listener_is_read_and_written_back() -> None:
    assert parse_listener("PLAINTEXT://127.0.0.1:9092") == Listener("127.0.0.1", 9092)
    assert str(parse_listener("plaintext://broker-1:0")) == "PLAINTEXT://broker-1:0"
    assert parse_listener("PLAINTEXT://:9092") == Listener("0.0.0.0", 9092)
    assert parse_listener("PLAINTEXT://[::1]:9092") == Listener("::1", 9092)


def test_a_listener_of_any_name_is_read_with_its_name() -> None:
    assert parse_listener("SSL://127.0.0.1:9093") == Listener("127.0.0.1", 9093, "SSL")
    assert str(parse_listener("internal://h:1")) == "INTERNAL://h:1"
    assert parse_listeners("PLAINTEXT://a:1, SSL://b:2") == [
        Listener("a", 1), Listener("b", 2, "SSL")]


@pytest.mark.parametrize(("text", "says"), [
    ("127.0.0.1:9092", "NAME://host:port"),
    ("PLAINTEXT://127.0.0.1", "NAME://host:port"),
    ("PLAINTEXT://a:1,PLAINTEXT://b:2", "one listener"),
    ("PLAINTEXT://a:70000", "0-65535"),
    ("PLAINTEXT://a:port", "0-65535"),
    ("PLAIN TEXT://a:1", "letters, digits"),
])
def test_what_cannot_be_served_says_why(text: str, says: str) -> None:
    with pytest.raises(InvalidListenerError, match=says):
        parse_listener(text)


def test_each_listener_name_is_given_once() -> None:
    with pytest.raises(InvalidListenerError, match="PLAINTEXT repeats"):
        parse_listeners("PLAINTEXT://a:1,PLAINTEXT://b:2")
    with pytest.raises(InvalidListenerError, match="names no listener"):
        parse_listeners(" , ")


def test_the_default_protocol_map_is_kafkas() -> None:
    assert DEFAULT_PROTOCOL_MAP == (
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL")
    protocols = parse_protocol_map(DEFAULT_PROTOCOL_MAP)
    assert security_protocol(Listener("h", 1, "SSL"), protocols) is SecurityProtocol.SSL
    assert SecurityProtocol.SASL_SSL.uses_tls and SecurityProtocol.SASL_SSL.uses_sasl
    assert not SecurityProtocol.PLAINTEXT.uses_tls


def test_a_listener_name_maps_to_its_protocol() -> None:
    protocols = parse_protocol_map("internal:plaintext, EXTERNAL:SSL")
    assert protocols == {"INTERNAL": SecurityProtocol.PLAINTEXT,
                         "EXTERNAL": SecurityProtocol.SSL}
    with pytest.raises(InvalidListenerError, match=r"not in listener\.security\.protocol\.map"):
        security_protocol(Listener("h", 1, "CLIENTS"), protocols)
    with pytest.raises(InvalidListenerError, match="PROTOCOL one of"):
        parse_protocol_map("EXTERNAL:TLS")


def test_a_broker_refuses_a_bad_listener_when_configured() -> None:
    assert BrokerConfig.from_dict({"listeners": "plaintext://0.0.0.0:9092"}).listeners == (
        "PLAINTEXT://0.0.0.0:9092")
    with pytest.raises(InvalidConfigError, match=r"advertised\.listeners=.*NAME://host:port"):
        BrokerConfig.from_dict({"advertised.listeners": "h:1"})


def with_tls(listeners: str, protocol_map: str, **settings: str) -> BrokerConfig:
    """A broker config of `listeners`, with a keystore (which no test here reads)."""
    return BrokerConfig.from_dict({"listeners": listeners,
                                   "listener.security.protocol.map": protocol_map,
                                   "ssl.keystore.location": "/etc/rafka/broker.pem", **settings})


def test_a_broker_takes_several_listeners_of_its_protocol_map() -> None:
    config = with_tls("INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9093",
                      "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
                      **{"advertised.listeners": "EXTERNAL://broker-1.example:9093"})
    assert config.listeners == "INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9093"
    assert config.listener_security_protocol_map == "INTERNAL:PLAINTEXT,EXTERNAL:SSL"


@pytest.mark.parametrize(("settings", "says"), [
    ({"listeners": "CLIENTS://h:1"}, "CLIENTS is not in listener.security.protocol.map"),
    ({"listeners": "SSL://h:1"}, "set ssl.keystore.location"),
    ({"listeners": "SASL_SSL://h:1"}, "set ssl.keystore.location"),
    ({"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "PLAIN"},
     "plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "PLAIN, SCRAM-SHA-256"),
    ({"listener.name.sasl_plaintext.sasl.kerberos.service.name": "kafka",
      "listeners": "SASL_PLAINTEXT://h:1"}, "sasl.kerberos.service.name"),
    ({"listeners": "PLAINTEXT://h:1", "advertised.listeners": "SSL://h:2"},
     "advertised.listeners names SSL, which listeners does not"),
    ({"ssl.client.auth": "always"}, "none, requested, required"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.2"),
])
def test_a_listener_setting_that_cannot_be_served_says_what_to_set(
        settings: dict[str, str], says: str) -> None:
    with pytest.raises(InvalidConfigError, match=says):
        BrokerConfig.from_dict(settings)


def test_a_listener_takes_ssl_settings_of_its_own() -> None:
    config = with_tls("SSL://h:1,MTLS://h:2", "SSL:SSL,MTLS:SSL",
                      **{"listener.name.mtls.ssl.client.auth": "required"})
    assert config.ssl_client_auth == "none"
    assert config.for_listener("SSL").ssl_client_auth == "none"
    assert config.for_listener("MTLS").ssl_client_auth == "required"
    assert config.for_listener("mtls").ssl_keystore_location == "/etc/rafka/broker.pem"
    with pytest.raises(InvalidConfigError, match=r"only ssl\.\* and SASL settings"):
        BrokerConfig.from_dict({"listener.name.mtls.num.partitions": 3})
    with pytest.raises(InvalidConfigError, match=r"ssl\.client\.auth"):
        BrokerConfig.from_dict({"listener.name.mtls.ssl.client.auth": "always"})
    with pytest.raises(InvalidConfigError, match=r"listener\.name\.mtls\.ssl\.keystore"):
        BrokerConfig.from_dict({"listeners": "MTLS://h:2",
                                "listener.security.protocol.map": "MTLS:SSL"})
    assert BrokerConfig.from_dict({
        "listeners": "MTLS://h:2", "listener.security.protocol.map": "MTLS:SSL",
        "listener.name.MTLS.ssl.keystore.location": "/etc/rafka/mtls.pem"}).for_listener(
            "MTLS").ssl_keystore_location == "/etc/rafka/mtls.pem"
