"""Principals from client certificates, as Kafka's DEFAULT ssl.principal.mapping.rules gives
them: the subject's distinguished name as RFC 2253 writes it."""

from __future__ import annotations

from rafka.wire.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    distinguished_name,
    principal_from_certificate,
)


def test_the_subject_is_written_last_rdn_first_with_rfc2253_keywords() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "Team"),),
               (("organizationalUnitName", "Data"),), (("commonName", "app"),))
    assert distinguished_name(subject) == "CN=app,OU=Data,O=Team,C=US"
    assert str(principal_from_certificate({"subject": subject})) == (
        "User:CN=app,OU=Data,O=Team,C=US")


def test_special_characters_are_escaped_and_multi_valued_rdns_joined() -> None:
    subject = ((("organizationName", "Acme, Inc."),),
               (("commonName", "#1 app "), ("userId", "a+b")))
    assert distinguished_name(subject) == r"CN=\#1 app\ +UID=a\+b,O=Acme\, Inc."


def test_a_client_without_a_certificate_is_anonymous() -> None:
    assert principal_from_certificate(None) == ANONYMOUS
    assert principal_from_certificate({}) == ANONYMOUS
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert KafkaPrincipal("User", "x") == ("User", "x")
