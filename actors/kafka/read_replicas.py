"""Follower fetching for Kafka clients (KIP-392): which replica a consumer that names its rack
reads from, and which fetches a broker that follows a partition answers.

A consumer with `client.rack` sends it in every fetch (Fetch v11+, `rack_id`). Where the
broker's `replica.selector.class` is Kafka's RackAwareReplicaSelector, a leader in another rack
than the consumer's answers it with no records and, as `preferred_read_replica`, an in-sync
follower in the consumer's rack; the consumer then fetches from that follower, which answers
up to its own high watermark (records every in-sync replica holds), until its next metadata
refresh or an error sends it back to the leader. Where Ray nodes sit in different zones, a
consumer reads in its own zone rather than across.

Which follower: the first, in the partition's replica order, of those in the consumer's rack
and in the ISR (Kafka's selector takes the one whose log reaches furthest; the leader's broker
knows the ISR from its metadata but not each follower's log end, and the order spreads the
consumers of a rack over its followers, partition by partition). A follower that is behind
answers no records until it catches up, or OFFSET_OUT_OF_RANGE where the consumer's offset is
past its log end, on which the consumer goes back to the leader.

Any broker answers a fetch of v11 or later from a replica it follows, whether or not a leader
sent the consumer there (Kafka's consumers only fetch from a follower that a leader named);
older fetches get NOT_LEADER_OR_FOLLOWER from a follower, as from Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rafka.actors.broker_view import BrokerView
from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import ErrorReply, FetchedRecords, PartitionFetch
from rafka.common.topic_partition import TopicPartition

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
# The first Fetch version a follower answers, and that carries the client's rack.
FIRST_FOLLOWER_FETCH_VERSION = 11
LEADER = -1  # what `preferred_read_replica` is when the leader is the one to read from


def preferred_read_replica(client_rack: str, leader: int, replicas: Sequence[int],
                           isr: Sequence[int], racks: Mapping[int, str | None]) -> int:
    """The replica a consumer in `client_rack` should read from, if not the leader: LEADER
    where it names no rack, the leader is in its rack, or no in-sync follower is."""
    if not client_rack or racks.get(leader) == client_rack:
        return LEADER
    for replica in replicas:
        if replica != leader and replica in isr and racks.get(replica) == client_rack:
            return replica
    return LEADER


class FollowerFetching:
    """The Kafka listener's part in follower fetching: which fetches go to a replica this
    broker follows, and which replica a leader here names to a consumer."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker
        self.rack_aware = broker.config.replica_selector_class == RACK_AWARE_SELECTOR

    def served_here(self, version: int, parts: list[PartitionFetch]
                    ) -> tuple[list[PartitionFetch], dict[tuple[str, int], ErrorReply]]:
        """The partitions of a fetch that go to this broker's hosts, and those refused: a
        fetch older than v11 of a replica this broker follows is NOT_LEADER_OR_FOLLOWER, as
        Kafka answers it (the host would answer it as any follower fetch). A v11+ fetch goes
        whole, as it came."""
        if version >= FIRST_FOLLOWER_FETCH_VERSION:
            return parts, {}
        refused = {}
        for part in parts:
            state = self.broker.replica_states.get(TopicPartition(part.topic, part.partition))
            if state is not None and state.leader != self.broker.broker_id:
                refused[(part.topic, part.partition)] = error_reply(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {self.broker.broker_id} follows {part.topic}-{part.partition}: "
                    "fetch from its leader (a follower answers Fetch v11 and later)")
        if not refused:
            return parts, refused
        return [part for part in parts if (part.topic, part.partition) not in refused], refused

    async def preferred(self, version: int, client_rack: str,
                        replies: Mapping[tuple[str, int], FetchedRecords | ErrorReply],
                        ) -> dict[tuple[str, int], int]:
        """The partitions a leader here answers with a `preferred_read_replica` (and no
        records): those whose consumer is better served by a follower in its rack."""
        if not self.rack_aware or version < FIRST_FOLLOWER_FETCH_VERSION or not client_rack:
            return {}
        led = [tp for tp, reply in replies.items() if isinstance(reply, FetchedRecords)
               and self._leads(tp)]
        if not led:
            return {}
        metadata = await self.broker.metadata(sorted({topic for topic, _ in led}))
        chosen = {}
        for topic, partition in led:
            state = metadata["topics"].get(topic, {}).get(partition)
            if state is None:
                continue
            replica = preferred_read_replica(client_rack, self.broker.broker_id,
                                             state["replicas"], state["isr"],
                                             metadata["racks"])
            if replica != LEADER:
                chosen[(topic, partition)] = replica
        return chosen

    def _leads(self, tp: tuple[str, int]) -> bool:
        state = self.broker.replica_states.get(TopicPartition(*tp))
        return state is not None and state.leader == self.broker.broker_id
