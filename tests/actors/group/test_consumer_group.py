"""The new consumer group protocol's state machine (KIP-848) and its server assignors, without
I/O: epochs, reconciliation (revoke before assign), fencing, static members, regex
subscriptions, expiry."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.actors.errors import ErrorCode
from rafka.actors.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupState,
    Heartbeat,
    HeartbeatAnswer,
    MemberState,
)
from rafka.actors.group.server_assignors import assign

SESSION_MS = 10_000
TOPICS = {"orders": 6, "payments": 3}


def new_group(**settings_: int) -> ConsumerGroup:
    return ConsumerGroup("g", session_timeout_ms=settings_.get("session", SESSION_MS),
                         max_size=settings_.get("max_size", 100))


def join(group: ConsumerGroup, member: str, topics: tuple[str, ...] = ("orders",), now: int = 0,
         **fields: object) -> HeartbeatAnswer:
    return group.heartbeat(Heartbeat(member, 0, rebalance_timeout_ms=5_000,
                                     subscribed_topic_names=topics, owned={}, **fields),
                           TOPICS, now)


def beat(group: ConsumerGroup, member: str, epoch: int, owned: dict | None = None,
         now: int = 0, **fields: object) -> HeartbeatAnswer:
    return group.heartbeat(Heartbeat(member, epoch, owned=owned, **fields), TOPICS, now)


class Client:
    """What a well-behaved consumer does with its answers: it owns what it was last told,
    and says so on every heartbeat."""

    def __init__(self, group: ConsumerGroup, member_id: str, topics: tuple[str, ...]) -> None:
        self.group, self.member_id = group, member_id
        answer = join(group, member_id, topics)
        assert answer.error == 0, answer
        self.epoch, self.owned = answer.member_epoch, dict(answer.assignment or {})

    def beat(self, now: int = 0) -> HeartbeatAnswer:
        answer = beat(self.group, self.member_id, self.epoch, dict(self.owned), now)
        assert answer.error == 0, answer
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            self.owned = dict(answer.assignment)
        return answer


def owners(clients: list[Client]) -> dict[tuple[str, int], list[str]]:
    held: dict[tuple[str, int], list[str]] = {}
    for client in clients:
        for topic, partitions in client.owned.items():
            for partition in partitions:
                held.setdefault((topic, partition), []).append(client.member_id)
    return held


def settle(clients: list[Client], rounds: int = 10) -> None:
    for _ in range(rounds):
        for client in clients:
            client.beat()
            assert all(len(held) == 1 for held in owners(clients).values())


def test_a_first_member_gets_every_partition_at_the_first_epoch() -> None:
    group = new_group()
    answer = join(group, "a")
    assert answer.error == 0 and answer.member_id == "a"
    assert answer.member_epoch == group.group_epoch == group.assignment_epoch >= 1
    assert answer.assignment == {"orders": frozenset(range(6))}
    assert group.state is ConsumerGroupState.STABLE


def test_a_member_id_is_given_when_the_client_sends_none() -> None:
    group = new_group()
    answer = join(group, "")
    assert answer.error == 0 and answer.member_id and answer.member_id in group.members


def test_revoke_before_assign_and_only_the_newcomer_takes_partitions() -> None:
    group = new_group()
    a = Client(group, "a", ("orders",))
    b = Client(group, "b", ("orders",))
    # b joined while a owns everything: b is at the new epoch with nothing yet.
    assert b.owned == {} and group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    epoch = a.epoch
    answer = a.beat()  # a is told to give up three partitions, and keeps its epoch
    assert answer.assignment is not None and len(answer.assignment["orders"]) == 3
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS and a.epoch == epoch
    a.beat()  # it owns only those three now: it moves to the target's epoch
    assert group.members["a"].state is MemberState.STABLE
    assert a.epoch == group.assignment_epoch
    b.beat()
    assert sorted(len(client.owned["orders"]) for client in (a, b)) == [3, 3]
    assert group.state is ConsumerGroupState.STABLE
    settle([a, b])
    before = {client.member_id: set(client.owned["orders"]) for client in (a, b)}
    c = Client(group, "c", ("orders",))
    settle([a, b, c])
    for client in (a, b):  # each old member only lost partitions, which c took
        assert set(client.owned["orders"]) <= before[client.member_id]
    assert set(c.owned["orders"]) == set(range(6)) - set(a.owned["orders"]) - set(
        b.owned["orders"])
    assert sorted(len(client.owned["orders"]) for client in (a, b, c)) == [2, 2, 2]


def test_a_member_that_has_not_revoked_keeps_its_epoch_and_blocks_the_newcomer() -> None:
    group = new_group()
    a = Client(group, "a", ("orders",))
    join(group, "b")
    epoch_before = a.epoch
    # a's heartbeat says nothing of what it owns (null): it still owns what it must give up.
    answer = beat(group, "a", a.epoch, None)
    assert answer.member_epoch == epoch_before
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert answer.assignment is not None and len(answer.assignment["orders"]) == 3
    b_answer = beat(group, "b", group.members["b"].member_epoch, {})
    assert not b_answer.assignment  # still a's
    kept = dict(answer.assignment)
    answer = beat(group, "a", epoch_before, kept)  # revoked
    assert answer.member_epoch == group.assignment_epoch
    b_answer = beat(group, "b", group.members["b"].member_epoch, {})
    assert b_answer.assignment == {"orders": frozenset(range(6)) - kept["orders"]}


def test_epochs_fence_zombies_but_forgive_a_lost_answer() -> None:
    group = new_group()
    a = Client(group, "a", ("orders",))
    settle([a, Client(group, "b", ("orders",))])
    member = group.members["a"]
    assert member.previous_member_epoch > 0
    assert beat(group, "a", member.member_epoch + 1, {}).error == ErrorCode.FENCED_MEMBER_EPOCH
    # The answer carrying its new epoch was lost: the previous epoch with what it holds passes.
    retry = beat(group, "a", member.previous_member_epoch, dict(member.assigned))
    assert retry.error == 0 and retry.member_epoch == member.member_epoch
    stale = beat(group, "a", member.previous_member_epoch, {"orders": frozenset(range(6))})
    assert stale.error == ErrorCode.FENCED_MEMBER_EPOCH
    assert beat(group, "nobody", 3, {}).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_fenced_member_joins_again_with_nothing_and_gets_its_share_back() -> None:
    group = new_group()
    a, b = Client(group, "a", ("orders",)), Client(group, "b", ("orders",))
    settle([a, b])
    answer = join(group, "a")  # after FENCED_MEMBER_EPOCH, the client owns nothing
    assert answer.error == 0 and answer.member_id == "a"
    assert answer.assignment == group.target["a"]


def test_leaving_and_expiring_free_the_partitions_for_the_others() -> None:
    group = new_group()
    a, b, c = (Client(group, name, ("orders",)) for name in "abc")
    settle([a, b, c])
    assert beat(group, "c", c.epoch, owned=None, now=0).error == 0
    left = group.heartbeat(Heartbeat("c", -1), TOPICS, 0)
    assert left.error == 0 and left.member_epoch == -1 and "c" not in group.members
    settle([a, b])
    assert sorted(len(client.owned["orders"]) for client in (a, b)) == [3, 3]
    assert group.tick(SESSION_MS - 1) == []
    b.beat(now=SESSION_MS - 1)
    assert group.tick(SESSION_MS) == ["a"]  # a's session ran out; b's was renewed
    b.beat(now=SESSION_MS)
    assert b.owned == {"orders": frozenset(range(6))}


def test_a_member_that_never_revokes_is_removed_after_its_rebalance_timeout() -> None:
    group = new_group(session=60_000)
    a = Client(group, "a", ("orders",))
    join(group, "b", now=0)
    beat(group, "a", a.epoch, None, now=0)  # told to revoke, does not
    assert group.tick(4_999) == []
    beat(group, "b", group.members["b"].member_epoch, {}, now=4_999)
    assert group.tick(5_000) == ["a"]
    answer = beat(group, "b", group.members["b"].member_epoch, {}, now=5_001)
    assert answer.assignment == {"orders": frozenset(range(6))}


def test_a_static_member_keeps_its_partitions_while_away_and_gets_them_back() -> None:
    group = new_group()
    a = Client(group, "a", ("orders",))
    answer = join(group, "b1", instance_id="b")
    b_epoch = answer.member_epoch
    settle([a])
    beat(group, "b1", b_epoch, {}, instance_id="b")
    settle([a])
    b_partitions = dict(group.members["b1"].assigned)
    assert b_partitions
    epoch = group.group_epoch
    assert beat(group, "b1", -2, instance_id="b").error == 0
    assert join(group, "b2", instance_id="b").assignment == b_partitions
    assert group.group_epoch == epoch  # no new target: nothing moved
    assert "b1" not in group.members and "b2" in group.members
    # While b2 is in the group, another process with the same instance id is refused.
    assert join(group, "b3", instance_id="b").error == ErrorCode.UNRELEASED_INSTANCE_ID


def test_regex_subscriptions_follow_topics_as_they_appear() -> None:
    group = new_group()
    answer = group.heartbeat(Heartbeat("a", 0, rebalance_timeout_ms=5_000,
                                       subscribed_topic_regex="pay.*", owned={}), TOPICS, 0)
    assert answer.assignment == {"payments": frozenset(range(3))}
    more = {**TOPICS, "payouts": 2}
    epoch = group.group_epoch
    answer = group.heartbeat(Heartbeat("a", answer.member_epoch, owned=answer.assignment),
                             more, 1)
    assert group.group_epoch > epoch
    assert answer.assignment == {"payments": frozenset(range(3)), "payouts": frozenset({0, 1})}


def test_an_unchanged_subscription_does_not_move_the_group_epoch() -> None:
    group = new_group()
    answer = join(group, "a", subscribed_topic_regex="")
    epoch = group.group_epoch
    again = group.heartbeat(Heartbeat("a", answer.member_epoch, subscribed_topic_names=(
        "orders",), subscribed_topic_regex="", owned=answer.assignment), TOPICS, 1)
    assert again.error == 0 and group.group_epoch == epoch


def full(member: str, epoch: int, owned: set[int], now: int = 0) -> Heartbeat:
    """The heartbeat a client sends a coordinator it has just found: everything it has."""
    return Heartbeat(member, epoch, rebalance_timeout_ms=5_000, subscribed_topic_names=(
        "orders",), owned={"orders": frozenset(owned)} if owned else {})


def test_a_new_coordinator_rebuilds_the_group_from_its_members() -> None:
    group = new_group()  # the coordinator the group moved to: it knows nothing of it
    a = group.heartbeat(full("a", 7, {0, 1, 2}), TOPICS, 0)
    assert a.error == 0 and a.assignment is None  # a keeps what it holds, as it holds it
    b = group.heartbeat(full("b", 7, {3, 4, 5}), TOPICS, 10)
    assert b.error == 0 and b.assignment is None
    # The epochs are the ones the members brought, so their commits at them still pass.
    assert group.group_epoch == group.assignment_epoch == 7
    for name, held in (("a", {0, 1, 2}), ("b", {3, 4, 5})):
        again = beat(group, name, 7, {"orders": frozenset(held)}, now=20)
        assert again.error == 0 and again.assignment is None and again.member_epoch == 7
        assert group.check_commit(name, 7, 20) == 0
    assert group.state is ConsumerGroupState.STABLE


def test_a_rebuilt_group_keeps_every_member_on_what_it_holds() -> None:
    group = new_group()
    group.heartbeat(full("a", 7, {3, 4, 5}), TOPICS, 0)
    group.heartbeat(full("b", 7, {0, 1, 2}), TOPICS, 0)
    for _ in range(3):
        for name in ("a", "b"):
            member = group.members[name]
            beat(group, name, member.member_epoch, dict(member.assigned), now=SESSION_MS)
    assert group.members["a"].assigned == {"orders": frozenset({3, 4, 5})}
    assert group.members["b"].assigned == {"orders": frozenset({0, 1, 2})}


def test_while_a_group_is_rebuilt_only_partitions_held_here_are_handed_out() -> None:
    group = new_group()
    group.heartbeat(full("a", 7, {0, 1, 2}), TOPICS, 0)
    # b, which holds 3-5, has not found this coordinator yet: a new member gets none of them.
    c = join(group, "c", now=100)
    assert not c.assignment
    settle_at = SESSION_MS - 1
    for _ in range(3):
        for name in ("a", "c"):
            member = group.members[name]
            beat(group, name, member.member_epoch, dict(member.assigned), now=settle_at)
    held = set().union(*(m.assigned.get("orders", set()) for m in group.members.values()))
    assert held <= {0, 1, 2}
    # b never came within its session timeout: its partitions are handed out after it.
    for _ in range(3):
        for name in ("a", "c"):
            member = group.members[name]
            group.tick(SESSION_MS)
            beat(group, name, member.member_epoch, dict(member.assigned), now=SESSION_MS)
    held = set().union(*(m.assigned.get("orders", set()) for m in group.members.values()))
    assert held == set(range(6))


def test_a_member_claiming_what_another_holds_is_fenced() -> None:
    group = new_group()
    assert group.heartbeat(full("a", 7, {0, 1, 2}), TOPICS, 0).error == 0
    clash = group.heartbeat(full("z", 6, {2, 3}), TOPICS, 0)
    assert clash.error == ErrorCode.FENCED_MEMBER_EPOCH and "z" not in group.members
    assert group.members["a"].assigned == {"orders": frozenset({0, 1, 2})}


def test_bad_requests_get_typed_errors() -> None:
    group = new_group(max_size=1)
    no_timeout = group.heartbeat(Heartbeat("a", 0, subscribed_topic_names=("orders",),
                                           owned={}), TOPICS, 0)
    assert no_timeout.error == ErrorCode.INVALID_REQUEST and "rebalance timeout" in str(
        no_timeout.message)
    assert join(group, "a", server_assignor="sticky").error == ErrorCode.UNSUPPORTED_ASSIGNOR
    bad_regex = group.heartbeat(Heartbeat("a", 0, rebalance_timeout_ms=1,
                                          subscribed_topic_regex="(", owned={}), TOPICS, 0)
    assert bad_regex.error == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert join(group, "a").error == 0
    assert join(group, "b").error == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert beat(group, "a", -3).error == ErrorCode.INVALID_REQUEST


def test_commits_are_checked_against_the_member_epoch() -> None:
    group = new_group()
    assert group.check_commit("", -1, 0) == 0  # empty group: an admin's commit
    a = Client(group, "a", ("orders",))
    assert group.check_commit("", -1, 0) == ErrorCode.UNKNOWN_MEMBER_ID
    assert group.check_commit("a", a.epoch, 0) == 0
    assert group.check_commit("a", a.epoch - 1, 0) == ErrorCode.STALE_MEMBER_EPOCH


# ------------------------------------------------------------------------ assignors

@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_assignors_give_every_partition_once_and_evenly(assignor: str) -> None:
    subscriptions = {name: frozenset({"orders", "payments"}) for name in "abcd"}
    target = assign(assignor, subscriptions, TOPICS, {})
    every = [(topic, p) for member in target.values() for topic, ps in member.items()
             for p in ps]
    assert sorted(every) == sorted((t, p) for t, n in TOPICS.items() for p in range(n))
    loads = sorted(sum(len(ps) for ps in member.values()) for member in target.values())
    assert loads[-1] - loads[0] <= (1 if assignor == "uniform" else 2)


def test_range_gives_each_member_the_same_range_of_co_partitioned_topics() -> None:
    target = assign("range", {m: frozenset({"x", "y"}) for m in "ab"}, {"x": 4, "y": 4}, {})
    assert target["a"] == {"x": frozenset({0, 1}), "y": frozenset({0, 1})}
    assert target["b"] == {"x": frozenset({2, 3}), "y": frozenset({2, 3})}


def test_uniform_respects_subscriptions() -> None:
    target = assign("uniform", {"a": frozenset({"orders"}), "b": frozenset({"payments"})},
                    TOPICS, {})
    assert target == {"a": {"orders": frozenset(range(6))},
                      "b": {"payments": frozenset(range(3))}}


@settings(max_examples=60, deadline=None)
@given(members=st.integers(1, 6), joining=st.integers(1, 3), partitions=st.integers(1, 40))
def test_uniform_moves_only_what_the_newcomers_take(members: int, joining: int,
                                                    partitions: int) -> None:
    names = [f"m{i}" for i in range(members + joining)]
    topic = {"t": partitions}
    before = assign("uniform", {n: frozenset({"t"}) for n in names[:members]}, topic, {})
    after = assign("uniform", {n: frozenset({"t"}) for n in names}, topic, before)
    for name in names[:members]:
        assert after[name].get("t", frozenset()) <= before[name].get("t", frozenset())
    loads = [len(after[n].get("t", ())) for n in names]
    assert max(loads) - min(loads) <= 1


def test_every_state_of_a_group_of_three_converges() -> None:
    group = new_group()
    clients = [Client(group, name, ("orders", "payments")) for name in "abc"]
    for order in itertools.permutations(clients):
        for client in order:
            client.beat()
            assert all(len(held) == 1 for held in owners(clients).values())
    settle(clients)
    assert group.state is ConsumerGroupState.STABLE
    assert sum(len(ps) for c in clients for ps in c.owned.values()) == 9
