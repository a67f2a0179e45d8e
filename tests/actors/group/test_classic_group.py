"""Kafka's classic group protocol for one group, as a pure state machine: joins, the leader's
assignment relayed in SyncGroup, heartbeats, leaving, expiry and timeouts. No Ray, no
ZooKeeper, no sockets: time is an argument."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from rafka.actors.errors import ErrorCode
from rafka.actors.group.classic_group import ClassicGroup, GroupState, subscription_topics

NONE = ErrorCode.NONE
ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
INVALID_SESSION_TIMEOUT = ErrorCode.INVALID_SESSION_TIMEOUT
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
UNKNOWN_MEMBER_ID = ErrorCode.UNKNOWN_MEMBER_ID
MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED

SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000


def join(group: ClassicGroup, member_id: str = "", now: int = 0, client: str = "c",
         protocols=(("range", b"meta-range"), ("roundrobin", b"meta-rr")),
         protocol_type: str = "consumer", session_ms: int = SESSION_MS,
         require_known_member_id: bool = False):
    """(immediate answer or None, what the join completed)."""
    _member_id, immediate, answers = group.join(
        member_id, client_id=client, client_host="/127.0.0.1", session_timeout_ms=session_ms,
        rebalance_timeout_ms=REBALANCE_MS, protocol_type=protocol_type,
        protocols=list(protocols), now_ms=now, require_known_member_id=require_known_member_id)
    return immediate, answers


def stable_group_of_two() -> tuple[ClassicGroup, str, str]:
    group = ClassicGroup("g", initial_rebalance_delay_ms=DELAY_MS)
    assert join(group, client="a")[0] is None  # waits: the group starts from empty
    join(group, client="b", now=100)
    answers = group.tick(DELAY_MS)  # the initial delay is over
    joined = {result.member_id: result for result in answers.joins}
    assert len(joined) == 2 and {r.generation_id for r in joined.values()} == {1}
    leader = next(iter(joined.values())).leader
    follower = next(m for m in joined if m != leader)
    assert joined[leader].members and not joined[follower].members
    assert group.sync(follower, 1, {}, DELAY_MS)[0] is None  # waits for the leader's
    _, answers = group.sync(leader, 1, {leader: b"p0", follower: b"p1"}, DELAY_MS)
    assert {r.member_id: r.assignment for r in answers.syncs} == {leader: b"p0", follower: b"p1"}
    assert group.state is GroupState.STABLE
    return group, leader, follower


def test_two_members_join_get_one_generation_and_the_leaders_assignment() -> None:
    group, leader, follower = stable_group_of_two()
    assert group.leader == leader and group.protocol_name == "range"
    # The leader saw both members' metadata for the chosen protocol.
    assert group.heartbeat(follower, 1, DELAY_MS + 1000) == NONE


def test_a_third_member_rebalances_without_the_initial_delay() -> None:
    group, leader, follower = stable_group_of_two()
    now = DELAY_MS + 1000
    assert join(group, client="c", now=now)[0] is None
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.heartbeat(leader, 1, now) == REBALANCE_IN_PROGRESS
    assert join(group, leader, now)[0] is None
    _, answers = join(group, follower, now)  # the last one back completes it at once
    assert len(answers.joins) == 3 and {r.generation_id for r in answers.joins} == {2}
    assert group.state is GroupState.COMPLETING_REBALANCE


def test_a_member_leaving_starts_a_rebalance_for_the_rest() -> None:
    group, leader, follower = stable_group_of_two()
    errors, _ = group.leave([(leader, None)], DELAY_MS + 1)
    assert errors == {(leader, None): NONE}
    assert group.heartbeat(follower, 1, DELAY_MS + 2) == REBALANCE_IN_PROGRESS
    _, answers = join(group, follower, DELAY_MS + 3)
    [result] = answers.joins
    assert (result.generation_id, result.leader) == (2, follower)
    assert group.leave([(leader, None)], DELAY_MS + 4)[0] == {(leader, None): UNKNOWN_MEMBER_ID}


def test_a_silent_member_expires_after_its_session_timeout() -> None:
    group, leader, follower = stable_group_of_two()
    assert group.heartbeat(leader, 1, DELAY_MS + SESSION_MS) == NONE
    group.tick(DELAY_MS + SESSION_MS)
    assert follower in group.members  # exactly at the timeout: not yet
    group.tick(DELAY_MS + SESSION_MS + 1)
    assert follower not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE


def test_a_member_that_does_not_join_again_is_dropped_at_the_rebalance_timeout() -> None:
    group, leader, follower = stable_group_of_two()
    now = DELAY_MS + 10
    join(group, leader, now)
    # The follower stays alive, heartbeating, but never joins the new generation.
    for beat in range(now, now + REBALANCE_MS, SESSION_MS // 2):
        assert group.heartbeat(follower, 1, beat) == REBALANCE_IN_PROGRESS
        assert not group.tick(beat).joins
    assert not group.tick(now + REBALANCE_MS - 1).joins
    answers = group.tick(now + REBALANCE_MS)
    assert [r.member_id for r in answers.joins] == [leader]
    assert set(group.members) == {leader} and group.generation_id == 2


def test_an_empty_group_goes_back_to_empty() -> None:
    group, leader, follower = stable_group_of_two()
    group.leave([(leader, None), (follower, None)], DELAY_MS + 1)
    assert group.state is GroupState.EMPTY and not group.members


def test_requests_that_do_not_fit_are_refused_with_kafkas_errors() -> None:
    group, _leader, follower = stable_group_of_two()
    assert join(group, "stranger")[0].error == UNKNOWN_MEMBER_ID
    assert join(group, session_ms=10)[0].error == INVALID_SESSION_TIMEOUT
    assert join(group, protocols=[("sticky", b"")])[0].error == INCONSISTENT_GROUP_PROTOCOL
    assert join(group, protocol_type="connect")[0].error == INCONSISTENT_GROUP_PROTOCOL
    assert group.sync(follower, 7, {}, DELAY_MS)[0].error == ILLEGAL_GENERATION
    assert group.heartbeat("stranger", 1, DELAY_MS) == UNKNOWN_MEMBER_ID


def test_commits_come_from_the_current_generation_or_from_outside_an_empty_group() -> None:
    group = ClassicGroup("g")
    assert group.check_commit("", -1) == NONE  # assign() and commit, no group
    group, leader, _follower = stable_group_of_two()
    assert group.check_commit(leader, 1) == NONE
    assert group.check_commit("", -1) == UNKNOWN_MEMBER_ID  # the group has members
    assert group.check_commit(leader, 0) == ILLEGAL_GENERATION
    join(group, client="newcomer", now=DELAY_MS + 1)
    assert group.check_commit(leader, 1) == NONE  # before giving its partitions up
    join(group, leader, now=DELAY_MS + 2)
    group.tick(DELAY_MS + 1 + REBALANCE_MS)  # generation 2, without the old follower
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert group.check_commit(leader, 2) == REBALANCE_IN_PROGRESS


def test_the_protocol_is_the_one_most_members_prefer() -> None:
    group = ClassicGroup("g", initial_rebalance_delay_ms=DELAY_MS)
    join(group, client="a", protocols=[("roundrobin", b"a"), ("range", b"a")])
    join(group, client="b", protocols=[("roundrobin", b"b"), ("range", b"b")])
    join(group, client="c", protocols=[("range", b"c"), ("roundrobin", b"c")])
    answers = group.tick(DELAY_MS)
    assert {r.protocol_name for r in answers.joins} == {"roundrobin"}


def test_a_new_member_gets_its_id_first_and_one_that_never_returns_leaves_nothing() -> None:
    """KIP-394: JoinGroup v4+ without a member id is answered MEMBER_ID_REQUIRED with an id;
    the member joins again with it. Until then it is pending, for one session timeout."""
    group = ClassicGroup("g", initial_rebalance_delay_ms=DELAY_MS)
    first, _ = join(group, client="a", require_known_member_id=True)
    assert first.error == MEMBER_ID_REQUIRED and first.member_id.startswith("a-")
    assert not group.members and group.state is GroupState.EMPTY
    assert join(group, first.member_id, now=10, require_known_member_id=True)[0] is None
    assert list(group.members) == [first.member_id]
    # A client that asks for an id and never comes back: gone after its session timeout.
    orphan, _ = join(group, client="b", now=20, require_known_member_id=True)
    assert orphan.error == MEMBER_ID_REQUIRED and orphan.member_id in group.pending
    group.tick(20 + SESSION_MS + 1)
    assert orphan.member_id not in group.pending
    late, _ = join(group, orphan.member_id, now=20 + SESSION_MS + 2)
    assert late.error == UNKNOWN_MEMBER_ID
    assert set(group.members) == {first.member_id}


def test_a_rebalance_waits_for_a_member_that_was_given_its_id() -> None:
    group, leader, follower = stable_group_of_two()
    now = DELAY_MS + 1000
    newcomer, _ = join(group, client="c", now=now, require_known_member_id=True)
    assert newcomer.error == MEMBER_ID_REQUIRED
    assert join(group, leader, now)[0] is None  # the leader's join starts a rebalance
    _, answers = join(group, follower, now)
    assert not answers.joins  # everyone known joined, but the newcomer is still pending
    _, answers = join(group, newcomer.member_id, now + 5, require_known_member_id=True)
    assert len(answers.joins) == 3 and {r.generation_id for r in answers.joins} == {2}


def test_a_group_left_by_everyone_is_empty_and_can_be_forgotten() -> None:
    group, leader, follower = stable_group_of_two()
    assert not group.is_empty
    group.leave([(leader, None), (follower, None)], DELAY_MS + 10)
    assert group.is_empty


def test_a_full_group_refuses_new_members_counting_those_given_an_id() -> None:
    group = ClassicGroup("g", initial_rebalance_delay_ms=DELAY_MS, max_size=2)
    assert join(group, client="a")[0] is None
    pending, _ = join(group, client="b", require_known_member_id=True)
    assert pending.error == MEMBER_ID_REQUIRED  # b holds the second place
    full, _ = join(group, client="c")
    assert full.error == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert len(group.members) + len(group.pending) == 2
    # The member given an id still gets in with it.
    assert join(group, pending.member_id, now=100)[0] is None
    assert len(group.members) == 2 and not group.pending


def static_join(group: ClassicGroup, instance: str, member_id: str = "", now: int = 0):
    """(member id, immediate answer or None, what the join completed) of a static member."""
    return group.join(member_id, client_id=instance, client_host="/127.0.0.1",
                      session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                      protocol_type="consumer", protocols=[("range", b"meta")], now_ms=now,
                      require_known_member_id=True, instance_id=instance)


def stable_static_group() -> tuple[ClassicGroup, str, str]:
    group = ClassicGroup("g", initial_rebalance_delay_ms=DELAY_MS)
    # Static members need no MEMBER_ID_REQUIRED round, whatever the JoinGroup version.
    leader, waiting, _ = static_join(group, "one")
    assert waiting is None
    follower, _, _ = static_join(group, "two", now=100)
    answers = group.tick(DELAY_MS)
    assert {r.member_id for r in answers.joins} == {leader, follower}
    assert {(m, i) for m, _, i in next(r for r in answers.joins if r.members).members} == {
        (leader, "one"), (follower, "two")}
    group.sync(follower, 1, {}, DELAY_MS)
    group.sync(leader, 1, {leader: b"p0", follower: b"p1"}, DELAY_MS)
    assert group.state is GroupState.STABLE
    return group, leader, follower


def test_a_static_member_back_without_its_id_takes_its_place_without_a_rebalance() -> None:
    group, leader, old = stable_static_group()
    new, answer, _ = static_join(group, "two", now=DELAY_MS + 100)
    assert new != old and answer.error == NONE
    assert (answer.generation_id, answer.leader) == (1, leader)
    assert group.state is GroupState.STABLE and group.generation_id == 1
    sync, _ = group.sync(new, 1, {}, DELAY_MS + 200, instance_id="two")
    assert sync.assignment == b"p1"  # its old partitions
    # The old member id is fenced: a zombie of the restarted client may not act for it.
    fenced = ErrorCode.FENCED_INSTANCE_ID
    assert group.heartbeat(old, 1, DELAY_MS + 300, instance_id="two") == fenced
    assert group.sync(old, 1, {}, DELAY_MS + 300, instance_id="two")[0].error == fenced
    assert group.check_commit(old, 1, instance_id="two") == fenced
    assert static_join(group, "two", member_id=old)[1].error == fenced
    assert group.heartbeat(leader, 1, DELAY_MS + 300, instance_id="one") == NONE


def test_a_static_member_leaves_by_its_instance_id_or_after_its_session() -> None:
    group, leader, _follower = stable_static_group()
    errors, _ = group.leave([("someone-else", "two")], DELAY_MS + 1)
    assert errors == {("someone-else", "two"): ErrorCode.FENCED_INSTANCE_ID}
    errors, _ = group.leave([("", "two")], DELAY_MS + 1)  # v3+: the instance id alone
    assert errors == {("", "two"): NONE} and set(group.members) == {leader}
    assert "two" not in group.static_members
    # The other one is never heard from again: the group drops it, and its instance id is free.
    group.tick(DELAY_MS + REBALANCE_MS + SESSION_MS + 10)
    assert not group.members and not group.static_members


def test_a_static_member_back_with_other_subscription_bytes_still_rebalances_nothing() -> None:
    """A restarted client owns no partitions, so its subscription's bytes differ; the group's
    protocol does not, and Kafka rebalances only for that."""
    group, _leader, old = stable_static_group()
    new, answer, _ = group.join(
        "", client_id="two", client_host="/127.0.0.1", session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS, protocol_type="consumer",
        protocols=[("range", b"meta, owning nothing")], now_ms=DELAY_MS + 100,
        instance_id="two")
    assert answer is not None and answer.generation_id == 1
    assert group.state is GroupState.STABLE and new in group.members and old not in group.members
    # The leader back likewise: it hears of the members, and the group stays as it is.
    _, answer, _ = static_join(group, "one", now=DELAY_MS + 200)
    assert answer.generation_id == 1 and {m for m, _, _ in answer.members} == set(group.members)
    assert group.state is GroupState.STABLE


def subscription(*topics: str, version: int = 1) -> bytes:
    """A consumer's subscription as Kafka's clients write it (kafka-python's schema)."""
    return bytes(ConsumerProtocolSubscription(
        topics=list(topics), user_data=None, owned_partitions=[]).encode(version=version))


def consumers_of(*subscriptions: bytes) -> ClassicGroup:
    group = ClassicGroup("g", initial_rebalance_delay_ms=0)
    for index, metadata in enumerate(subscriptions):
        join(group, client=f"c{index}", protocols=(("range", metadata),))
    group.tick(0)
    return group


def test_a_consumers_subscription_reads_its_topics_and_refuses_bytes_that_are_none() -> None:
    assert subscription_topics(subscription("a", "bb")) == ["a", "bb"]
    assert subscription_topics(subscription("t", version=0)) == ["t"]
    for broken in (b"", b"\x00\x01\x00\x00\x00\x02\x00\x01a", b"\x00\x00\x7f\xff\xff\xff"):
        with pytest.raises(ValueError):
            subscription_topics(broken)


def test_offsets_of_subscribed_topics_stay_and_others_may_be_deleted() -> None:
    group = consumers_of(subscription("a"), subscription("b"))
    assert group.protocol_name == "range" and len(group.members) == 2
    assert group.subscribed_topics() == {"a", "b"}
    assert group.check_offset_deletion({"a", "c"}) == (NONE, frozenset({"a"}))


def test_offset_deletion_from_an_empty_group_a_foreign_protocol_or_an_unreadable_one() -> None:
    assert ClassicGroup("g").check_offset_deletion({"a"}) == (NONE, frozenset())
    connect = ClassicGroup("g", initial_rebalance_delay_ms=0)
    join(connect, protocol_type="connect", protocols=(("v1", b"x"),))
    connect.tick(0)
    assert connect.check_offset_deletion({"a"}) == (ErrorCode.NON_EMPTY_GROUP, frozenset())
    # A subscription that does not read counts as every topic, as Kafka counts it.
    garbled = consumers_of(b"\x00\x01\xff")
    assert garbled.check_offset_deletion({"a", "b"}) == (NONE, frozenset({"a", "b"}))
