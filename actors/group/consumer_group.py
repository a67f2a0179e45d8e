"""Kafka's new consumer group protocol (KIP-848) for one group, without I/O (the shell is the
broker's Kafka listener, `actors/group/coordinator.py`).

A member's ConsumerGroupHeartbeat both keeps it in the group and carries what changed: its
subscription (topic names or a regular expression), and the partitions it owns. The
coordinator computes the group's target assignment itself (`server_assignors.py`) whenever the
group epoch moves past the target's: a member joins, leaves or changes its subscription, or a
subscribed topic gains partitions. There is no stop-the-world rebalance: each member is brought
to its share of the target on its own heartbeats (`_reconcile`, Kafka's CurrentAssignmentBuilder):

- partitions the member must give up are revoked first. It keeps its member epoch and is told
  only the partitions it keeps (UNREVOKED_PARTITIONS) until a heartbeat no longer lists them;
- it then moves to the target's epoch and gets its new partitions, save those another member
  still owns (UNRELEASED_PARTITIONS), which it gets on a later heartbeat once they are free.

So a partition is owned by one member at a time. A member that misses its session timeout, or
does not revoke within its rebalance timeout, is removed (its partitions are free at once).

Member epochs fence zombies: a heartbeat whose epoch is not the member's is FENCED_MEMBER_EPOCH
(but for the epoch before, sent again with the assignment the member holds: its answer was
lost), and the client joins again with epoch 0. Epoch -1 leaves; -2 leaves a static member
(`group.instance.id`) for its session timeout, within which the same instance joins again as a
new member id and takes the old one's place, epoch and partitions.

Membership is not written down (as Kafka writes it to `__consumer_offsets`), so a coordinator
that takes a group over rebuilds it from its members (`_adopt`): a client that has just found a
new coordinator sends it a full heartbeat (its epoch, subscription and every partition it
holds), and is taken in at that epoch, holding what it holds, unless another member here
already holds some of it. For one session timeout after such a rebuild, the coordinator hands
out only partitions a member here has held: a member that has not arrived yet may hold the
others, and one that does not arrive within its session timeout would have been removed anyway.

Topics are kept by name here; the shell turns them into topic ids and back.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from rafka.actors.errors import ErrorCode
from rafka.actors.group.server_assignors import RANGE, UNIFORM, assign

Assignment = dict[str, frozenset[int]]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
SERVER_ASSIGNORS = (UNIFORM, RANGE)


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    """Kafka's names, as ListGroups and ConsumerGroupDescribe answer them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat's fields, topics by name. None: unchanged since the last."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class HeartbeatAnswer:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = LEAVE_EPOCH
    # The partitions the member may use now; None where they did not change.
    assignment: Assignment | None = None


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    session_timeout_ms: int
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    # A static member that left with epoch -2: kept, partitions and all, until its session
    # times out or its instance joins again.
    away: bool = False


class ConsumerGroup:
    """One consumer group of the new protocol: its members, epochs and target assignment."""

    def __init__(self, group_id: str, *, session_timeout_ms: int, max_size: int,
                 assignors: tuple[str, ...] = SERVER_ASSIGNORS) -> None:
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms
        self.max_size = max_size
        # The first is the group's assignor where no member names one.
        self.assignors = assignors
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        # The partition counts of the topics the members subscribe to, as of the group epoch:
        # a change (a topic created, deleted or grown) moves the group epoch.
        self.subscribed_partitions: dict[str, int] = {}
        self.assignor_name = assignors[0]
        # Each member's subscription resolved against the topics as they were last given:
        # a heartbeat reads it instead of matching every topic against every expression.
        self._resolved: dict[str, frozenset[str]] = {}
        self._resolved_against: dict[str, int] = {}
        # A group rebuilt from its members' heartbeats (`_adopt`): until then, only partitions
        # a member here has held (`held_here`) are handed out, since a member that has not
        # reached this coordinator yet may still hold the others.
        self.rebuilt_until_ms: int | None = None
        self.held_here: set[tuple[str, int]] = set()

    # ------------------------------------------------------------------------ reading

    @property
    def is_empty(self) -> bool:
        return not self.members

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(member.member_epoch != self.assignment_epoch
               or member.state is not MemberState.STABLE for member in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topics(self, topic_names: Mapping[str, int]) -> frozenset[str]:
        """Every topic any member subscribes to, by name or by its regular expression."""
        self._resolve_against(topic_names)
        return frozenset().union(*(self._topics_of(member, topic_names)
                                   for member in self.members.values()))

    # ---------------------------------------------------------------------- heartbeats

    def heartbeat(self, request: Heartbeat, partition_counts: Mapping[str, int], now_ms: int,
                  ) -> HeartbeatAnswer:
        """The answer to one heartbeat; `partition_counts`: every topic's partition count."""
        invalid = _invalid(request)
        if invalid:
            return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, invalid, request.member_id)
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(request)
        if request.server_assignor is not None and request.server_assignor not in self.assignors:
            return HeartbeatAnswer(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"server assignor {request.server_assignor!r} is not one of "
                f"{', '.join(self.assignors)} (group.consumer.assignors)", request.member_id)
        if request.subscribed_topic_regex is not None:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as error:
                return HeartbeatAnswer(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"subscribed topic regex {request.subscribed_topic_regex!r}: {error}",
                    request.member_id)
        joined = request.member_epoch == JOIN_EPOCH
        if joined:
            found = self._joining(request)
        elif request.member_id not in self.members and _full(request):
            found = self._adopt(request, partition_counts, now_ms)
        else:
            found = self._known(request)
        if isinstance(found, HeartbeatAnswer):
            return found
        member, created = found
        before = dict(member.assigned)
        if self._update(member, request) or created:
            self.group_epoch += 1
        self._follow_metadata(partition_counts)
        if self.group_epoch > self.assignment_epoch:
            self._assign(partition_counts)
        self._reconcile(member, request.owned, now_ms)
        if self.rebuilt_until_ms is not None and now_ms >= self.rebuilt_until_ms:
            # Members that have not come back are gone: their partitions go to the others.
            self.rebuilt_until_ms, self.held_here = None, set()
            self.group_epoch += 1
        member.session_deadline_ms = now_ms + self.session_timeout_ms
        changed = joined or member.assigned != before or (
            request.owned is not None and _nonempty(request.owned) != member.assigned)
        return HeartbeatAnswer(ErrorCode.NONE, None, member.member_id, member.member_epoch,
                               dict(member.assigned) if changed else None)

    def _joining(self, request: Heartbeat) -> tuple[ConsumerMember, bool] | HeartbeatAnswer:
        """The member joining with epoch 0, and whether it is new to the group: new, a static
        member's instance taking its place back, epoch and partitions (no new target), or a
        known member joining again after it was fenced (it owns nothing now)."""
        member_id = request.member_id or str(uuid.uuid4())
        if request.instance_id is not None:
            previous = self._static_member(request.instance_id)
            if previous is not None and previous.member_id != member_id:
                if not previous.away:
                    return HeartbeatAnswer(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"instance {request.instance_id} is still member "
                        f"{previous.member_id} of the group", member_id)
                del self.members[previous.member_id]
                self._resolved.pop(previous.member_id, None)
                if previous.member_id in self.target:
                    self.target[member_id] = self.target.pop(previous.member_id)
                previous.member_id, previous.away = member_id, False
                self.members[member_id] = previous
                return previous, False
        member = self.members.get(member_id)
        if member is not None:
            # It gave up what it owned: the partitions are free for their targets.
            member.member_epoch, member.state = JOIN_EPOCH, MemberState.STABLE
            member.assigned, member.pending_revocation = {}, {}
            member.revocation_deadline_ms = None
            return member, False
        if len(self.members) >= self.max_size:
            return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                   f"the group has {len(self.members)} members "
                                   "(group.consumer.max.size)", member_id)
        member = ConsumerMember(member_id, request.instance_id, self.session_timeout_ms)
        self.members[member_id] = member
        return member, True

    def _adopt(self, request: Heartbeat, partition_counts: Mapping[str, int], now_ms: int,
               ) -> tuple[ConsumerMember, bool] | HeartbeatAnswer:
        """A member this coordinator does not know, at its epoch and with all it holds (the
        full heartbeat a client sends to a coordinator it has just found): the group was
        coordinated elsewhere, and membership is not written down, so it is rebuilt from the
        members as they arrive. The member keeps what it holds unless another member here
        holds any of it (then it is fenced, and joins again with nothing). Epochs are kept as
        the members bring them, so that what they send at those epochs (commits) still
        passes: the first member's epoch is the group's, and the target is what each
        holds."""
        assert request.owned is not None
        owned = _nonempty(request.owned)
        others = self._owned_by_others(None)
        clash = any(partitions & others.get(topic, set()) for topic, partitions in owned.items())
        if clash or (request.instance_id is not None
                     and self._static_member(request.instance_id) is not None):
            return HeartbeatAnswer(ErrorCode.FENCED_MEMBER_EPOCH,
                                   "another member holds what this one holds: join again",
                                   request.member_id)
        if len(self.members) >= self.max_size:
            return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                   f"the group has {len(self.members)} members "
                                   "(group.consumer.max.size)", request.member_id)
        first = not self.members
        member = ConsumerMember(request.member_id, request.instance_id, self.session_timeout_ms,
                                member_epoch=request.member_epoch,
                                previous_member_epoch=request.member_epoch, assigned=owned)
        self.members[member.member_id] = member
        self._update(member, request)  # its subscription, as it was: not a change
        for target in self.target.values():  # what it holds is nobody else's target
            for topic, partitions in owned.items():
                if topic in target:
                    target[topic] = target[topic] - partitions
        self.target[member.member_id] = dict(owned)
        self.held_here |= {(topic, p) for topic, partitions in owned.items() for p in partitions}
        self.group_epoch = max(self.group_epoch, request.member_epoch)
        if first:
            self.rebuilt_until_ms = now_ms + self.session_timeout_ms
            self.assignment_epoch = self.group_epoch
            self.subscribed_partitions = {
                topic: partition_counts[topic]
                for topic in self.subscribed_topics(partition_counts)}
        return member, False

    def _known(self, request: Heartbeat) -> tuple[ConsumerMember, bool] | HeartbeatAnswer:
        member = self.members.get(request.member_id)
        if member is None or member.away:
            return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID,
                                   f"member {request.member_id} is not in the group",
                                   request.member_id)
        lost_answer = (request.member_epoch == member.previous_member_epoch
                       and request.owned is not None
                       and _nonempty(request.owned) == member.assigned)
        if request.member_epoch == member.member_epoch or lost_answer:
            return member, False
        return HeartbeatAnswer(ErrorCode.FENCED_MEMBER_EPOCH,
                               f"member epoch {request.member_epoch} is not the member's "
                               f"{member.member_epoch}: join again", request.member_id)

    def _leave(self, request: Heartbeat) -> HeartbeatAnswer:
        member = self.members.get(request.member_id)
        if member is None and request.instance_id is not None:
            member = self._static_member(request.instance_id)
        if member is None:
            return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID,
                                   f"member {request.member_id} is not in the group",
                                   request.member_id)
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            member.away = True  # its partitions wait for its instance (session timeout)
        else:
            self.remove(member.member_id)
        return HeartbeatAnswer(ErrorCode.NONE, None, request.member_id, request.member_epoch)

    def _static_member(self, instance_id: str) -> ConsumerMember | None:
        return next((member for member in self.members.values()
                     if member.instance_id == instance_id), None)

    def _update(self, member: ConsumerMember, request: Heartbeat) -> bool:
        """Take the heartbeat's changes; whether the subscription changed."""
        member.client_id, member.client_host = request.client_id, request.client_host
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.server_assignor is not None:
            member.server_assignor = request.server_assignor
        changed = False
        if (request.subscribed_topic_names is not None
                and request.subscribed_topic_names != member.subscribed_topic_names):
            member.subscribed_topic_names = request.subscribed_topic_names
            changed = True
        # An empty expression is none (librdkafka sends "" with a subscription by name).
        regex = request.subscribed_topic_regex
        if regex is not None and (regex or None) != member.subscribed_topic_regex:
            member.subscribed_topic_regex = regex or None
            changed = True
        if changed:
            self._resolved.pop(member.member_id, None)
        return changed

    def _resolve_against(self, partition_counts: Mapping[str, int]) -> None:
        """Forget the members' resolved subscriptions if the topics changed: checked once
        before the members' subscriptions are read (`_topics_of`), not once per member."""
        if partition_counts != self._resolved_against:
            self._resolved, self._resolved_against = {}, dict(partition_counts)

    def _topics_of(self, member: ConsumerMember, partition_counts: Mapping[str, int],
                   ) -> frozenset[str]:
        resolved = self._resolved.get(member.member_id)
        if resolved is None:
            topics = {name for name in member.subscribed_topic_names
                      if name in partition_counts}
            if member.subscribed_topic_regex:
                pattern = re.compile(member.subscribed_topic_regex)
                topics |= {name for name in partition_counts if pattern.fullmatch(name)}
            resolved = self._resolved[member.member_id] = frozenset(topics)
        return resolved

    def _follow_metadata(self, partition_counts: Mapping[str, int]) -> None:
        """Move the group epoch where a subscribed topic appeared, went or grew."""
        subscribed = {topic: partition_counts[topic]
                      for topic in self.subscribed_topics(partition_counts)}
        if subscribed != self.subscribed_partitions:
            self.subscribed_partitions = subscribed
            self.group_epoch += 1

    def _assign(self, partition_counts: Mapping[str, int]) -> None:
        """A new target assignment, at the group epoch, by the assignor most members name."""
        named = [member.server_assignor for member in self.members.values()
                 if member.server_assignor]
        self.assignor_name = (max(sorted(set(named)), key=named.count) if named
                              else self.assignors[0])
        self._resolve_against(partition_counts)
        subscriptions = {member_id: self._topics_of(member, partition_counts)
                         for member_id, member in self.members.items()}
        self.target = {member: dict(assignment) for member, assignment in assign(
            self.assignor_name, subscriptions, partition_counts, self.target).items()}
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, member: ConsumerMember, owned: Assignment | None, now_ms: int) -> None:
        """Bring the member one step towards its target (see the module docstring)."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.pending_revocation):
                return
            self._next_assignment(member, member.member_epoch + 1, owned, now_ms)
        elif (member.state is MemberState.UNRELEASED_PARTITIONS
              or member.member_epoch != self.assignment_epoch):
            self._next_assignment(member, member.member_epoch, owned, now_ms)

    def _next_assignment(self, member: ConsumerMember, epoch: int, owned: Assignment | None,
                         now_ms: int) -> None:
        target = self.target.get(member.member_id, {})
        others = self._owned_by_others(member)
        rebuilding = self.rebuilt_until_ms is not None and now_ms < self.rebuilt_until_ms
        kept: Assignment = {}
        revoking: Assignment = {}
        adding: Assignment = {}
        unreleased = False
        for topic in set(target) | set(member.assigned):
            wanted = target.get(topic, frozenset())
            current = member.assigned.get(topic, frozenset())
            kept[topic] = current & wanted
            revoking[topic] = current - wanted
            free = {partition for partition in wanted - current
                    if partition not in others.get(topic, ())
                    and (not rebuilding or (topic, partition) in self.held_here)}
            unreleased = unreleased or len(free) < len(wanted - current)
            adding[topic] = frozenset(free)
        kept, revoking, adding = _nonempty(kept), _nonempty(revoking), _nonempty(adding)
        if revoking and _owns_any(owned, revoking):
            member.state = MemberState.UNREVOKED_PARTITIONS
            self._set_epoch(member, epoch)
            member.assigned, member.pending_revocation = kept, revoking
            if member.revocation_deadline_ms is None:
                member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
            return
        member.assigned = {topic: kept.get(topic, frozenset()) | adding.get(topic, frozenset())
                           for topic in set(kept) | set(adding)}
        member.pending_revocation = {}
        member.revocation_deadline_ms = None
        member.state = (MemberState.UNRELEASED_PARTITIONS if unreleased
                        else MemberState.STABLE)
        self._set_epoch(member, self.assignment_epoch)

    def _owned_by_others(self, member: ConsumerMember | None) -> dict[str, set[int]]:
        """The partitions the other members (all, for None) own: assigned, or not yet
        revoked."""
        owned: dict[str, set[int]] = {}
        for other in self.members.values():
            if other is not member:
                for held in (other.assigned, other.pending_revocation):
                    for topic, partitions in held.items():
                        owned.setdefault(topic, set()).update(partitions)
        return owned

    @staticmethod
    def _set_epoch(member: ConsumerMember, epoch: int) -> None:
        if epoch != member.member_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, epoch

    # ---------------------------------------------------------------------- expiry

    def remove(self, member_id: str) -> None:
        """The member is gone: its partitions are free, and the target is computed again."""
        self._resolved.pop(member_id, None)
        if self.members.pop(member_id, None) is not None:
            self.target.pop(member_id, None)
            self.group_epoch += 1

    def tick(self, now_ms: int) -> list[str]:
        """Remove the members whose session timed out, or who did not revoke within their
        rebalance timeout; their ids."""
        gone = [member.member_id for member in self.members.values()
                if now_ms >= member.session_deadline_ms
                or (member.revocation_deadline_ms is not None
                    and now_ms >= member.revocation_deadline_ms)]
        for member_id in gone:
            self.remove(member_id)
        return gone

    def check_commit(self, member_id: str, member_epoch: int, now_ms: int) -> int:
        """An OffsetCommit's check (Kafka's): from outside the group (epoch < 0) only while it
        is empty; from a member, at its current epoch (else STALE_MEMBER_EPOCH). While the
        group is being rebuilt, a member not here yet is told to retry
        (COORDINATOR_NOT_AVAILABLE): its heartbeat is on its way."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None and self.rebuilt_until_ms is not None \
                and now_ms < self.rebuilt_until_ms and member_epoch > 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE


def _invalid(request: Heartbeat) -> str | None:
    """Why the heartbeat is malformed (Kafka's checks), or None."""
    if request.member_epoch < STATIC_LEAVE_EPOCH:
        return f"member epoch {request.member_epoch} is below -2"
    if request.member_epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
        return "member epoch -2 leaves a static member: an instance id is required"
    if request.member_epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms <= 0:
            return "a joining member must give its rebalance timeout"
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            return "a joining member must give its subscribed topic names or regex"
        if request.owned is None or _nonempty(request.owned):
            return "a joining member owns no partitions: send an empty list"
    elif not request.member_id:
        return "member id is empty"
    return None


def _full(request: Heartbeat) -> bool:
    """Whether the heartbeat says all the member has: its subscription, rebalance timeout and
    partitions (what a client sends to a coordinator it has just found)."""
    return (request.owned is not None and request.rebalance_timeout_ms > 0
            and (request.subscribed_topic_names is not None
                 or request.subscribed_topic_regex is not None))


def _nonempty(assignment: Mapping[str, frozenset[int]]) -> Assignment:
    return {topic: partitions for topic, partitions in assignment.items() if partitions}


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still owns any of `partitions`; None (not said) means it does."""
    if owned is None:
        return True
    return any(owned.get(topic, frozenset()) & revoking
               for topic, revoking in partitions.items())
