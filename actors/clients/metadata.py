"""Client-side cluster metadata: which broker leads each partition, and the replica-host actor
that serves it (what a producer or consumer sends to).

Any process in the Ray cluster can build one from the cluster's namespace: the brokers are named
actors there. The cache is refreshed when a request fails with a "not leader"-style error, as
Kafka's clients do, and in the background (`refresh_soon`) while a request goes unanswered, so
that a client learns of a new leader the controller elected without waiting for its request to
time out (actors/clients/leader_moves.py).

A client given the cluster's ZooKeeper store (`zookeeper`) reads what ZooKeeper holds, the
partition states the controller wrote and the brokers' registrations, when no broker has
answered within `zookeeper_after_s`. Asking a broker is a Ray actor call, and a process whose
connection to Ray's GCS was left half-open by a network fault calls restarted brokers at their
old address until Ray's gRPC keepalive notices, minutes later; ZooKeeper is reached over a
connection of the client's own, as the controller's own decisions are.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

import ray
from ray.exceptions import ActorDiedError, GetTimeoutError

from rafka.actors.errors import (
    BrokerUnavailableError,
    LeaderNotAvailableError,
    UnknownPartitionError,
    UnknownTopicError,
)
from rafka.actors.metadata_cache import MetadataCache, read_metadata
from rafka.actors.naming import broker_id_of, broker_name
from rafka.actors.runtime import ZOOKEEPER_AFTER_S, named_actors
from rafka.coordination.store import ClusterStore
from rafka.coordination.validation import validate_topic_name

log = logging.getLogger(__name__)


class ClientMetadata:
    """Topic metadata from the brokers, and actor handles by name, shared by client threads."""

    def __init__(
        self, namespace: str, *, refresh_timeout_s: float = 30.0, max_age_s: float = 300.0,
        zookeeper: ClusterStore | None = None, zookeeper_after_s: float = ZOOKEEPER_AFTER_S,
    ) -> None:
        self.namespace = namespace
        self.refresh_timeout_s = refresh_timeout_s
        self.max_age_s = max_age_s
        # Read when the brokers are silent (None: only the brokers are asked).
        self.zookeeper = zookeeper
        self.zookeeper_after_s = zookeeper_after_s
        # How many answers came from ZooKeeper rather than a broker (the tests read it).
        self.zookeeper_answers = 0
        self._lock = threading.Lock()
        self._topics: dict[str, dict[int, dict[str, Any]]] = {}
        self._fetched_at: dict[str, float] = {}
        self._brokers: list[int] = []
        self._handles: dict[str, Any] = {}
        # How many answers were learnt: a client that acts on what changed looks again only
        # when this moved.
        self.generation = 0
        # Whether a `refresh_soon` is under way (at most one at a time).
        self._refreshing = False

    # ------------------------------------------------------------------------- handles

    def handle(self, name: str) -> Any:
        handle = self._handles.get(name)
        if handle is None:
            handle = ray.get_actor(name, namespace=self.namespace)
            self._handles[name] = handle
        return handle

    def forget(self, name: str) -> None:
        self._handles.pop(name, None)

    def broker_ids(self) -> list[int]:
        """The brokers whose actors exist in the namespace (alive or being restarted)."""
        found = (broker_id_of(name) for name in named_actors(self.namespace))
        return sorted(broker_id for broker_id in found if broker_id is not None)

    # ------------------------------------------------------------------------ metadata

    def refresh(self, topics: list[str] | None = None) -> dict[str, Any]:
        """Ask the brokers for metadata, all at once, and take the first answer.

        One at a time, a broker that cannot answer (its node gone, and Ray's GCS, which would
        say so, down with it) would hold the request for the whole timeout before the next is
        asked. The brokers last heard of are asked first; if none answers, any other whose
        actor exists now (they may all have died, and others come back, since). ZooKeeper,
        if the client has it, answers in each round in which no broker did within
        `zookeeper_after_s`.
        """
        tried: list[int] = []
        last_error: BaseException | None = None
        for candidates in (self._known_brokers, self._other_brokers):
            brokers = candidates(tried)
            if not brokers:
                continue
            tried += brokers
            reply, error = self._first_answer(brokers, topics)
            if reply is not None:
                self._learn(reply, topics)
                return reply
            last_error = error
        if not tried and self.zookeeper is not None:  # no broker's actor to ask, even
            reply = self._read_zookeeper(topics)
            if reply is not None:
                self._learn(reply, topics)
                return reply
        raise BrokerUnavailableError(
            f"no broker of namespace {self.namespace!r} answered a metadata request "
            f"(tried {tried}): is the cluster running? ({last_error!r})"
        )

    def _known_brokers(self, _tried: list[int]) -> list[int]:
        return list(self._brokers)

    def _other_brokers(self, tried: list[int]) -> list[int]:
        return [broker for broker in self.broker_ids() if broker not in tried]

    def _first_answer(self, brokers: list[int], topics: list[str] | None
                      ) -> tuple[dict[str, Any] | None, BaseException | None]:
        asked: dict[Any, str] = {}
        last_error: BaseException | None = None
        for broker in brokers:
            name = broker_name(broker)
            try:
                asked[self.handle(name).metadata.remote(topics)] = name
            except Exception as error:  # no such actor (any more)
                last_error = error
        now = time.monotonic()
        deadline = now + self.refresh_timeout_s
        # ZooKeeper is read at most once a round: when the brokers were silent this long, or
        # once every one of them failed.
        zookeeper_due = self.zookeeper is not None
        zookeeper_at = now + self.zookeeper_after_s
        while asked and (left := deadline - time.monotonic()) > 0:
            wait_s = min(left, zookeeper_at - time.monotonic()) if zookeeper_due else left
            done, _ = ray.wait(list(asked), num_returns=1, timeout=max(0.0, wait_s))
            if not done:
                if zookeeper_due and time.monotonic() >= zookeeper_at:
                    zookeeper_due = False
                    reply = self._read_zookeeper(topics)
                    if reply is not None:
                        return reply, None
                continue
            name = asked.pop(done[0])
            try:
                return ray.get(done[0]), None
            except Exception as error:  # dead or failing broker: wait for the others
                self.forget_if_dead(name, error)
                last_error = error
        if asked:
            last_error = GetTimeoutError(
                f"brokers {sorted(asked.values())} did not answer within "
                f"{self.refresh_timeout_s:g} s")
        elif zookeeper_due:
            reply = self._read_zookeeper(topics)
            if reply is not None:
                return reply, None
        return None, last_error

    def _read_zookeeper(self, topics: list[str] | None) -> dict[str, Any] | None:
        """The metadata as ZooKeeper holds it now, in the shape of a broker's answer (None if
        ZooKeeper cannot be read either)."""
        assert self.zookeeper is not None
        try:
            cache = MetadataCache()
            cache.apply(read_metadata(self.zookeeper, topics))
        except Exception as error:  # ZooKeeper unreachable too: the brokers may still answer
            log.debug("metadata from ZooKeeper failed: %r", error)
            return None
        self.zookeeper_answers += 1
        log.info("no broker answered a metadata request: read ZooKeeper instead")
        return cache.metadata(topics)

    def _learn(self, reply: dict[str, Any], topics: list[str] | None) -> None:
        with self._lock:
            self._brokers = reply["brokers"] or self._brokers
            now = time.monotonic()
            for topic, partitions in reply["topics"].items():
                self._topics[topic] = {int(p): info for p, info in partitions.items()}
                self._fetched_at[topic] = now
            self.generation += 1
            if topics is not None:
                for topic in topics:
                    if topic not in reply["topics"]:
                        self._topics.pop(topic, None)

    def refresh_soon(self, topics: list[str]) -> None:
        """Refresh the metadata of `topics` on a thread of its own, unless a refresh is under
        way: the caller goes on (a sender with other partitions' answers to take) and reads
        what was learnt once `generation` moves. A refresh that fails is as if not asked."""
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True
        threading.Thread(target=self._refresh_quietly, args=(topics,), daemon=True,
                         name="rafka-metadata").start()

    def _refresh_quietly(self, topics: list[str]) -> None:
        try:
            self.refresh(topics)
        except Exception as error:  # no broker answered: the next look asks again
            log.debug("background metadata refresh of %s failed: %r", topics, error)
        finally:
            with self._lock:
                self._refreshing = False

    def cached_leader_epochs(self, topics: Iterable[str]) -> dict[tuple[str, int], int]:
        """The leader epoch of each partition of `topics` known now, without asking a broker
        (a topic whose metadata was invalidated is left out)."""
        with self._lock:
            return {(topic, partition): info.get("leader_epoch", -1)
                    for topic in topics
                    for partition, info in self._topics.get(topic, {}).items()}

    def cached_leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch known now (-1 if none is)."""
        info = self._topics.get(topic, {}).get(partition)
        return -1 if info is None else info.get("leader_epoch", -1)

    def partitions(self, topic: str) -> dict[int, dict[str, Any]]:
        """The partitions of `topic`, fetching metadata if unknown or older than the max age."""
        try:
            found = self._topics.get(topic)
        except TypeError:  # unhashable, so not a topic name: refused below
            found = None
        if found is not None and time.monotonic() - self._fetched_at.get(topic, 0) > self.max_age_s:
            found = None
        if found is None:
            # Checked here, before asking: a broker refuses an illegal name by raising, which
            # would read as "no broker answered" after every broker was tried.
            validate_topic_name(topic)
            self.refresh([topic])
            found = self._topics.get(topic)
            if found is None:
                raise UnknownTopicError(
                    f"topic {topic!r} does not exist: create it first "
                    f"(cluster.create_topic or `rafka topics create`)"
                )
        return found

    def cached_partition_count(self, topic: str) -> int | None:
        """The partition count known now, without asking a broker (None if unknown)."""
        found = self._topics.get(topic)
        return None if found is None else len(found)

    def partition_count(self, topic: str) -> int:
        return len(self.partitions(topic))

    def leader(self, topic: str, partition: int) -> int:
        partitions = self.partitions(topic)
        if partition not in partitions:
            raise UnknownPartitionError(
                f"topic {topic!r} has partitions 0..{len(partitions) - 1}, not {partition}"
            )
        return partitions[partition]["leader"]

    def leader_host(self, topic: str, partition: int, wait_s: float = 0.0) -> tuple[str, Any]:
        """The name and actor of the host of the partition's current leader, waiting up to
        `wait_s` for one."""
        deadline = time.monotonic() + wait_s
        while True:
            leader = self.leader(topic, partition)
            name = self._topics.get(topic, {}).get(partition, {}).get("leader_host")
            if leader >= 0 and name:
                try:
                    return name, self.handle(name)
                except ValueError:
                    pass  # the broker has not created it yet, or it just died
            # What we know is stale: the next call asks the brokers again.
            self.invalidate(topic)
            if time.monotonic() >= deadline:
                if leader < 0:
                    raise LeaderNotAvailableError(
                        f"{topic}-{partition} has no leader: every in-sync replica is down; "
                        "start one of its brokers (or, accepting data loss, enable "
                        "unclean.leader.election.enable on the topic)"
                    )
                raise BrokerUnavailableError(
                    f"{topic}-{partition} has no live leader (broker {leader} is named, but its "
                    "replica is gone): wait for the controller to elect another"
                )
            time.sleep(0.1)

    def invalidate(self, topic: str) -> None:
        """Forget the leaders of `topic` (after a "not leader" answer, or a leader that did not
        answer): the next request asks the brokers.

        The actor handles stay. Looking one up asks Ray's GCS, which may be down (its head
        restarting) while the brokers are fine, and a handle stays good across Ray's restarts
        of its actor; one whose actor died for good goes by `forget_if_dead`.
        """
        with self._lock:
            self._topics.pop(topic, None)

    def forget_if_dead(self, name: str, error: BaseException) -> None:
        """Drop the handle of actor `name` if `error`, from a call to it, says it died for good:
        an actor of that name made since (a host its broker made again) is another actor."""
        if isinstance(error, ActorDiedError):
            self.forget(name)
