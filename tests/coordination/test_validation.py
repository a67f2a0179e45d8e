"""Names that become znode names: topics, groups, members, brokers, partitions, clusters."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.coordination import errors, layout, validation

NAME_ALPHABET = string.ascii_letters + string.digits + "._-"
legal_names = st.text(NAME_ALPHABET, min_size=1, max_size=validation.MAX_NAME_LENGTH).filter(
    lambda name: name not in (".", "..")
)
LEGAL = re.compile(r"[A-Za-z0-9._-]{1,249}")


@given(legal_names)
def test_legal_topic_names_pass_and_stay_one_znode(name: str) -> None:
    assert validation.validate_topic_name(name) == name
    assert layout.topic_path(name) == f"/brokers/topics/{name}"
    assert layout.topic_config_path(name).count("/") == 3


@given(st.text(max_size=300))
def test_any_text_is_accepted_only_if_legal(name: str) -> None:
    legal = bool(LEGAL.fullmatch(name)) and name not in (".", "..")
    if legal:
        assert validation.validate_topic_name(name) == name
    else:
        with pytest.raises(errors.InvalidTopicError, match=r"A topic name is|a topic name is"):
            validation.validate_topic_name(name)


@given(legal_names, st.sampled_from(["/", "..", "/..", " ", "\x00", "é", "*", "\n"]))
def test_a_single_bad_character_is_rejected(name: str, bad: str) -> None:
    with pytest.raises(errors.InvalidTopicError):
        validation.validate_topic_name(
            (name + bad)[-validation.MAX_NAME_LENGTH:] if bad != ".." else "..")


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/b", "../etc", "/x", "a" * 250, "a b", "tópico", "a\x00b", "x:y"]
)
def test_bad_topic_names_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(errors.InvalidTopicError) as raised:
        validation.validate_topic_name(name)
    message = str(raised.value)
    assert "ASCII letters, digits, '.', '_' and '-'" in message
    assert isinstance(raised.value, ValueError)


def test_longest_topic_name_is_249() -> None:
    assert validation.validate_topic_name("a" * 249)
    with pytest.raises(errors.InvalidTopicError, match="250 characters"):
        validation.validate_topic_name("a" * 250)


def test_non_string_topic_is_refused() -> None:
    with pytest.raises(errors.InvalidTopicError, match="must be a string"):
        validation.validate_topic_name(42)  # type: ignore[arg-type]


@given(legal_names)
def test_group_ids_follow_the_topic_rule(group: str) -> None:
    assert validation.validate_group_id(group) == group
    assert layout.group_ids_path(group) == f"/consumers/{group}/ids"


@pytest.mark.parametrize("group", ["", "..", "a/b", "g h", "x" * 250])
def test_bad_group_ids_are_refused(group: str) -> None:
    with pytest.raises(errors.InvalidGroupIdError, match="group id"):
        validation.validate_group_id(group)
    with pytest.raises(errors.InvalidGroupIdError):
        layout.member_path(group, "m")


@given(st.text(NAME_ALPHABET + ":", min_size=1, max_size=100).filter(lambda m: m.strip(".")))
def test_member_ids_may_hold_colons(member: str) -> None:
    assert validation.validate_member_id(member) == member


@pytest.mark.parametrize("member", ["", ".", "..", "host/uuid", "a b"])
def test_bad_member_ids_are_refused(member: str) -> None:
    with pytest.raises(errors.InvalidMemberIdError, match="member id"):
        validation.validate_member_id(member)


@given(st.integers(0, 2**31 - 1))
def test_broker_ids_are_non_negative_ints(broker_id: int) -> None:
    assert validation.validate_broker_id(broker_id) == broker_id
    assert layout.broker_path(broker_id) == f"/brokers/ids/{broker_id}"


@pytest.mark.parametrize("broker_id", [-1, 2**31, True, "1", 1.0, None])
def test_bad_broker_ids_are_refused(broker_id: object) -> None:
    with pytest.raises(errors.InvalidBrokerIdError, match="broker id"):
        validation.validate_broker_id(broker_id)  # type: ignore[arg-type]


@pytest.mark.parametrize("partition", [-1, "0", 0.5, False])
def test_bad_partitions_are_refused(partition: object) -> None:
    with pytest.raises(errors.InvalidPartitionsError):
        validation.validate_partition(partition)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidPartitionsError):
        layout.partition_state_path("t", partition)  # type: ignore[arg-type]


def test_cluster_names_become_the_chroot() -> None:
    assert layout.cluster_chroot("prod") == "/rafka/prod"
    assert layout.cluster_chroot("prod", root="/other/") == "/other/prod"
    for bad in ["", "..", "a/b"]:
        with pytest.raises(errors.InvalidClusterNameError, match="/rafka/<name>"):
            validation.validate_cluster_name(bad)


def test_isr_change_paths_only_take_notification_names() -> None:
    assert layout.isr_change_path("isr_change_0000000001").endswith("/isr_change_0000000001")
    for bad in ["../x", "isr_change_", "isr_change_1/..", "other"]:
        with pytest.raises(ValueError, match="ISR change notification"):
            layout.isr_change_path(bad)
