"""Kafka's classic consumer-group protocol for one group, without I/O (the shell is the broker's
Kafka listener, `actors/group/coordinator.py`).

Members join (JoinGroup), the coordinator waits until every known member has joined again or the
rebalance timeout has passed, then opens a new generation and names a leader; the leader
computes the assignment on its side and hands it over in its SyncGroup, which the coordinator
relays to every member's SyncGroup. Heartbeats keep a member in the group for its session
timeout and tell it when a rebalance begins; LeaveGroup ends a membership at once.

States, as Kafka's `GroupMetadata`::

    EMPTY --join--> PREPARING_REBALANCE --all joined / timeout--> COMPLETING_REBALANCE
    COMPLETING_REBALANCE --leader's sync--> STABLE --join, leave, expiry--> PREPARING_REBALANCE

Every call takes the time (`now_ms`) and returns what to answer: the JoinGroup and SyncGroup
answers it completed (for the members whose requests are waiting) and error codes, so the shell
only sends them. Static membership (`group.instance.id`) is not served: such members join as
dynamic ones.

A new member that can take it (JoinGroup v4+) first gets its member id with MEMBER_ID_REQUIRED
and joins again with it (KIP-394): until then it is only pending, for one session timeout, so a
client that never comes back leaves nothing behind. A rebalance waits for pending members too.
"""

from __future__ import annotations

import enum
import struct
import uuid
from dataclasses import dataclass, field

from rafka.actors.errors import ErrorCode

# A member that left, or a commit from outside any generation (Kafka's -1 and "").
NO_GENERATION = -1
NO_MEMBER = ""
# The protocol type of Kafka's consumers, whose members' metadata names their topics.
CONSUMER_PROTOCOL_TYPE = "consumer"
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics of a consumer's subscription (Kafka's ConsumerProtocolSubscription, whose
    every version, 0-3, starts with its version and its topics); ValueError if it does not
    read."""
    try:
        (count,) = _INT32.unpack_from(metadata, _INT16.size)
        at = _INT16.size + _INT32.size
        if count < 0 or count > len(metadata):
            raise ValueError(f"a subscription of {count} topics")
        topics = []
        for _ in range(count):
            (length,) = _INT16.unpack_from(metadata, at)
            at += _INT16.size
            if length < 0 or at + length > len(metadata):
                raise ValueError("a topic name past the subscription's end")
            topics.append(bytes(metadata[at:at + length]).decode())
            at += length
        return topics
    except (struct.error, UnicodeDecodeError) as error:
        raise ValueError(f"not a consumer's subscription: {error}") from error


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_heard_ms: int
    joining: bool = False  # its JoinGroup waits for the rebalance to complete
    syncing: bool = False  # its SyncGroup waits for the leader's
    assignment: bytes = b""
    # A static member's group.instance.id (KIP-345); None for a dynamic member.
    instance_id: str | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next(metadata for name, metadata in self.protocols if name == protocol)


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer; `members` (id, metadata, group.instance.id) goes to the leader
    only."""

    member_id: str
    error: int = ErrorCode.NONE
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = NO_MEMBER
    members: tuple[tuple[str, bytes, str | None], ...] = ()


@dataclass(frozen=True)
class SyncResult:
    member_id: str
    error: int = ErrorCode.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class Answers:
    """What a call completed: JoinGroup and SyncGroup requests now to be answered."""

    joins: list[JoinResult] = field(default_factory=list)
    syncs: list[SyncResult] = field(default_factory=list)

    def extend(self, other: Answers) -> None:
        self.joins += other.joins
        self.syncs += other.syncs


@dataclass(eq=False)
class ClassicGroup:
    """One group's members, generation and assignment."""

    group_id: str
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    state: GroupState = field(default=GroupState.EMPTY, init=False)
    generation_id: int = field(default=0, init=False)
    protocol_type: str | None = field(default=None, init=False)
    protocol_name: str | None = field(default=None, init=False)
    leader: str | None = field(default=None, init=False)
    members: dict[str, Member] = field(default_factory=dict, init=False)
    # Member ids handed out with MEMBER_ID_REQUIRED, and until when each may join with it.
    pending: dict[str, int] = field(default_factory=dict, init=False)
    # Static members (KIP-345): group.instance.id -> the member id it holds now.
    static_members: dict[str, str] = field(default_factory=dict, init=False)
    # When the rebalance under way completes even if some members have not joined again,
    # and whether it waits that long in any case (the group started from empty).
    rebalance_deadline_ms: int | None = field(default=None, init=False)
    _delayed_start: bool = field(default=False, init=False)

    # ---------------------------------------------------------------------------- joining

    def join(self, member_id: str, *, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], now_ms: int,
             require_known_member_id: bool = False, instance_id: str | None = None,
             ) -> tuple[str, JoinResult | None, Answers]:
        """A JoinGroup: the member's id (a new one for a new member), an immediate answer (an
        error, or the current generation) or None if the request waits for the rebalance, and
        whatever the join completed (its own answer among them, possibly).
        `require_known_member_id`: the client takes MEMBER_ID_REQUIRED (JoinGroup v4+).
        `instance_id`: a static member's group.instance.id (KIP-345): it needs no
        MEMBER_ID_REQUIRED, and one that joins again without its member id takes over its old
        place (a new member id, the old one fenced) without a rebalance if nothing changed."""
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return member_id, JoinResult(member_id, ErrorCode.INVALID_SESSION_TIMEOUT), Answers()
        static_id = None if instance_id is None else self.static_members.get(instance_id)
        if instance_id is not None and member_id != NO_MEMBER and member_id != static_id:
            return member_id, JoinResult(member_id, ErrorCode.FENCED_INSTANCE_ID
                                         if static_id is not None
                                         else ErrorCode.UNKNOWN_MEMBER_ID), Answers()
        known = member_id in self.members or member_id in self.pending
        if member_id != NO_MEMBER and not known:
            return member_id, JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID), Answers()
        if not protocols or not self._compatible(protocol_type, protocols, static_id or member_id):
            refused = JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            return member_id, refused, Answers()
        answers = Answers()
        if member_id == NO_MEMBER and static_id is not None:
            member_id, answers = self._replace_static_member(static_id, client_id)
            if self.state is GroupState.STABLE:
                # As Kafka: a static member back while the group is stable rebalances nothing
                # unless the protocol the group would choose changes (its subscription's
                # bytes may differ: a restarted client owns no partitions yet).
                member = self.members[member_id]
                member.protocols, member.last_heard_ms = list(protocols), now_ms
                member.session_timeout_ms = session_timeout_ms
                member.rebalance_timeout_ms = max(rebalance_timeout_ms, session_timeout_ms)
                if self._choose_protocol() == self.protocol_name:
                    return member_id, self._join_result(member), answers
        elif member_id == NO_MEMBER:
            if len(self.members) + len(self.pending) >= self.max_size:
                # Kafka's group.max.size: members already in, or given an id to join with.
                return member_id, JoinResult(member_id, ErrorCode.GROUP_MAX_SIZE_REACHED), \
                    Answers()
            member_id = f"{client_id or 'consumer'}-{uuid.uuid4()}"
            if instance_id is not None:
                self.static_members[instance_id] = member_id
            elif require_known_member_id:
                self.pending[member_id] = now_ms + session_timeout_ms
                return member_id, JoinResult(member_id, ErrorCode.MEMBER_ID_REQUIRED), Answers()
        self.pending.pop(member_id, None)
        member = Member(member_id, client_id, client_host, session_timeout_ms,
                        max(rebalance_timeout_ms, session_timeout_ms), protocol_type,
                        list(protocols), now_ms, joining=True, instance_id=instance_id)
        previous = self.members.get(member_id)
        if previous is not None:
            member.assignment = previous.assignment
        changed = previous is None or previous.protocols != member.protocols
        self.members[member_id] = member
        if self.state is GroupState.STABLE and not changed and member_id != self.leader:
            # A follower joining again with nothing new gets the current generation (Kafka
            # rebalances only for a new member, new metadata, or the leader, which may want to
            # assign afresh).
            member.joining = False
            return member_id, self._join_result(member), answers
        if self.state is not GroupState.PREPARING_REBALANCE:
            answers.extend(self._prepare_rebalance(now_ms))
        answers.extend(self._try_complete_join(now_ms))
        return member_id, None, answers

    def _replace_static_member(self, old_id: str, client_id: str) -> tuple[str, Answers]:
        """A static member back without its member id (a restarted client): its place, under
        a new id; what the old id waited for is answered FENCED_INSTANCE_ID."""
        new_id = f"{client_id or 'consumer'}-{uuid.uuid4()}"
        member = self.members.pop(old_id)
        answers = Answers()
        if member.joining:
            answers.joins.append(JoinResult(old_id, ErrorCode.FENCED_INSTANCE_ID))
        if member.syncing:
            answers.syncs.append(SyncResult(old_id, ErrorCode.FENCED_INSTANCE_ID))
        member.member_id, member.joining, member.syncing = new_id, False, False
        self.members[new_id] = member
        assert member.instance_id is not None
        self.static_members[member.instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        return new_id, answers

    def fenced(self, member_id: str, instance_id: str | None) -> int:
        """FENCED_INSTANCE_ID if `instance_id` is held by another member id now, else 0."""
        if instance_id is None:
            return ErrorCode.NONE
        holder = self.static_members.get(instance_id)
        return ErrorCode.FENCED_INSTANCE_ID if holder is not None and holder != member_id \
            else ErrorCode.NONE

    def _compatible(self, protocol_type: str, protocols: list[tuple[str, bytes]],
                    member_id: str) -> bool:
        """The same protocol type as the others, and a protocol every member supports."""
        others = [m for m in self.members.values() if m.member_id != member_id]
        if any(m.protocol_type != protocol_type for m in others):
            return False
        return bool({name for name, _ in protocols}.intersection(
            *({name for name, _ in m.protocols} for m in others)))

    def _prepare_rebalance(self, now_ms: int) -> Answers:
        answers = Answers()
        if self.state is GroupState.COMPLETING_REBALANCE:
            # Syncs waiting for a leader that will not sync this generation: they join again.
            answers.syncs += [SyncResult(m.member_id, ErrorCode.REBALANCE_IN_PROGRESS)
                              for m in self.members.values() if m.syncing]
            for member in self.members.values():
                member.syncing = False
        delay = max(m.rebalance_timeout_ms for m in self.members.values())
        # Kafka's group.initial.rebalance.delay.ms: a group starting from nothing waits that
        # long for the rest of its members, rather than rebalancing once for each.
        self._delayed_start = self.state is GroupState.EMPTY
        if self._delayed_start:
            delay = min(delay, self.initial_rebalance_delay_ms)
        self.state = GroupState.PREPARING_REBALANCE
        self.rebalance_deadline_ms = now_ms + delay
        return answers

    def _try_complete_join(self, now_ms: int) -> Answers:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return Answers()
        in_time = self.rebalance_deadline_ms is not None and now_ms < self.rebalance_deadline_ms
        all_joined = all(m.joining for m in self.members.values()) and not self.pending
        if in_time and (self._delayed_start or not all_joined):
            return Answers()
        # Members that did not join again in time are out of the group.
        for member in [m for m in self.members.values() if not m.joining]:
            del self.members[member.member_id]
            if member.instance_id is not None:
                self.static_members.pop(member.instance_id, None)
        self.generation_id += 1
        self.rebalance_deadline_ms = None
        if not self.members:
            self.state = GroupState.EMPTY
            self.leader = self.protocol_name = self.protocol_type = None
            return Answers()
        self.state = GroupState.COMPLETING_REBALANCE
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.protocol_type = self.members[self.leader].protocol_type
        self.protocol_name = self._choose_protocol()
        answers = Answers()
        for member in self.members.values():
            member.joining = False
            member.last_heard_ms = now_ms
            member.assignment = b""
            answers.joins.append(self._join_result(member))
        return answers

    def _choose_protocol(self) -> str:
        """The protocol every member supports that most members list first (Kafka's vote)."""
        common = set.intersection(*({name for name, _ in m.protocols}
                                    for m in self.members.values()))
        votes: dict[str, int] = {}
        for member in self.members.values():
            favourite = next(name for name, _ in member.protocols if name in common)
            votes[favourite] = votes.get(favourite, 0) + 1
        leader_order = [name for name, _ in self.members[self.leader or ""].protocols]
        return max(votes, key=lambda name: (votes[name], -leader_order.index(name)))

    def _join_result(self, member: Member) -> JoinResult:
        assert self.leader is not None and self.protocol_name is not None
        members: tuple[tuple[str, bytes, str | None], ...] = ()
        if member.member_id == self.leader:
            members = tuple((m.member_id, m.metadata_for(self.protocol_name), m.instance_id)
                            for m in self.members.values())
        return JoinResult(member.member_id, ErrorCode.NONE, self.generation_id, self.protocol_type,
                          self.protocol_name, self.leader, members)

    # ---------------------------------------------------------------------------- syncing

    def sync(self, member_id: str, generation_id: int, assignments: dict[str, bytes],
             now_ms: int, instance_id: str | None = None) -> tuple[SyncResult | None, Answers]:
        """A SyncGroup: an immediate answer, or None if it waits for the leader's."""
        if fenced := self.fenced(member_id, instance_id):
            return SyncResult(member_id, fenced), Answers()
        member = self.members.get(member_id)
        if member is None:
            return SyncResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID), Answers()
        if generation_id != self.generation_id:
            return SyncResult(member_id, ErrorCode.ILLEGAL_GENERATION), Answers()
        member.last_heard_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(member_id, ErrorCode.REBALANCE_IN_PROGRESS), Answers()
        if self.state is GroupState.STABLE:
            return self._sync_result(member), Answers()
        member.syncing = True
        if member_id != self.leader:
            return None, Answers()
        for other in self.members.values():
            other.assignment = assignments.get(other.member_id, b"")
        self.state = GroupState.STABLE
        answers = Answers()
        for waiting in self.members.values():
            if waiting.syncing:
                waiting.syncing = False
                answers.syncs.append(self._sync_result(waiting))
        return None, answers

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(member.member_id, ErrorCode.NONE, self.protocol_type, self.protocol_name,
                          member.assignment)

    # --------------------------------------------------------------- staying and leaving

    def heartbeat(self, member_id: str, generation_id: int, now_ms: int,
                  instance_id: str | None = None) -> int:
        if fenced := self.fenced(member_id, instance_id):
            return fenced
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member.last_heard_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, leaving: list[tuple[str, str | None]], now_ms: int,
              ) -> tuple[dict[tuple[str, str | None], int], Answers]:
        """LeaveGroup of (member id, group.instance.id) pairs (v3+ may name a static member by
        its instance id alone): an error code per pair, and what their leaving completed."""
        errors: dict[tuple[str, str | None], int] = {}
        answers = Answers()
        for asked in leaving:
            member_id, instance_id = asked
            if instance_id is not None:
                holder = self.static_members.get(instance_id)
                if holder is None:
                    errors[asked] = ErrorCode.UNKNOWN_MEMBER_ID
                    continue
                if member_id not in (NO_MEMBER, holder):
                    errors[asked] = ErrorCode.FENCED_INSTANCE_ID
                    continue
                member_id = holder
            if member_id not in self.members:
                errors[asked] = ErrorCode.UNKNOWN_MEMBER_ID
                continue
            errors[asked] = ErrorCode.NONE
            answers.extend(self._remove(member_id, now_ms))
        return errors, answers

    def _remove(self, member_id: str, now_ms: int) -> Answers:
        member = self.members.pop(member_id)
        if member.instance_id is not None:
            self.static_members.pop(member.instance_id, None)
        answers = Answers()
        if member.joining:
            answers.joins.append(JoinResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
        if member.syncing:
            answers.syncs.append(SyncResult(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
        if self.leader == member_id:
            self.leader = None
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            if self.members:
                answers.extend(self._prepare_rebalance(now_ms))
            else:
                self.state = GroupState.EMPTY
        answers.extend(self._try_complete_join(now_ms))
        return answers

    def tick(self, now_ms: int) -> Answers:
        """Expire members not heard from within their session timeout (a member waiting in
        JoinGroup is not: its rebalance timeout applies), and complete a rebalance whose time
        is up."""
        answers = Answers()
        self.pending = {member_id: until for member_id, until in self.pending.items()
                        if until >= now_ms}
        expired = [m.member_id for m in self.members.values()
                   if not m.joining and now_ms - m.last_heard_ms > m.session_timeout_ms]
        for member_id in expired:
            if member_id in self.members:  # a rebalance completed by the last may drop it
                answers.extend(self._remove(member_id, now_ms))
        answers.extend(self._try_complete_join(now_ms))
        return answers

    @property
    def is_empty(self) -> bool:
        """No member and none pending: nothing the coordinator need remember (its committed
        offsets are kept by the offset manager, not here)."""
        return self.state is GroupState.EMPTY and not self.members and not self.pending

    # ----------------------------------------------------------------------------- offsets

    def subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members subscribe to, from their metadata for the group's protocol;
        None where that cannot be known (not a consumer group, no protocol chosen yet, a
        subscription that does not read), which counts as every topic, as in Kafka."""
        if not self.members:
            return frozenset()
        if self.protocol_name is None or self._protocol_type() != CONSUMER_PROTOCOL_TYPE:
            return None
        try:
            return frozenset(topic for member in self.members.values()
                             for topic in subscription_topics(
                                 member.metadata_for(self.protocol_name)))
        except (ValueError, StopIteration):
            return None

    def _protocol_type(self) -> str | None:
        """The group's protocol type: its generation's, or before the first one its members'
        (Kafka takes it from the first member to join)."""
        if self.protocol_type is not None:
            return self.protocol_type
        return next((m.protocol_type for m in self.members.values()), None)

    def check_offset_deletion(self, topics: set[str]) -> tuple[int, frozenset[str]]:
        """Whether OffsetDelete may remove the group's offsets of `topics` (Kafka's
        `handleDeleteOffsets`): (the group's error, the topics that must keep theirs because
        a member subscribes to them, GROUP_SUBSCRIBED_TO_TOPIC each). A group with members of
        another protocol type than a consumer's is NON_EMPTY_GROUP."""
        if not self.members:
            return ErrorCode.NONE, frozenset()
        if self._protocol_type() != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.NON_EMPTY_GROUP, frozenset()
        subscribed = self.subscribed_topics()
        return ErrorCode.NONE, frozenset(
            topic for topic in topics if subscribed is None or topic in subscribed)

    def check_commit(self, member_id: str, generation_id: int,
                     instance_id: str | None = None) -> int:
        """Whether an OffsetCommit may be stored: from a member of the current generation, or
        from outside any group (`assign()`, generation -1) while the group has no members.
        While a rebalance is being prepared the current generation may still commit (what it
        read before giving its partitions up), as in Kafka; between the new generation's joins
        and the leader's assignment it may not."""
        if generation_id < 0 and member_id == NO_MEMBER:
            return ErrorCode.NONE if not self.members else ErrorCode.UNKNOWN_MEMBER_ID
        if fenced := self.fenced(member_id, instance_id):
            return fenced
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE
