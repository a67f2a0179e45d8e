"""A producer whose id is given and whose sequence numbers continue an earlier attempt's: the
writer of the exactly-once sink (`rafka.pipelines.spark_writes`).

A leader appends a batch of an idempotent producer only if its first sequence number follows
the last one its log holds for that producer id and epoch
(`rafka.logstore.producer_state.check_sequence`). So if every attempt at a write sends the same
records, in the same order, to the same partitions, under the same producer id and epoch 0,
a record's sequence number names it: whichever attempt appends it first, the leader takes it
from no other. A new attempt asks each leader how far the earlier ones got (`resume`: Kafka's
DescribeProducers) and sends only the records after that.

Two things differ from `Producer`:

* It never renumbers. Where `Producer`'s sender meets a leader that lost its state, it bumps
  the epoch and numbers the partition from 0 again (KIP-360); here that would send records
  already written under new numbers, so the batch fails and the write's next attempt resumes.
* A leader that expects a later sequence than a batch's has appended records this attempt
  has not acknowledged: another attempt wrote them. The batch fails at once rather than
  retrying until `delivery.timeout.ms`.

Both are the sender's answer to an out-of-order sequence: `SequencedSender`.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import ray

from rafka.actors.clients.accumulator import PendingBatch
from rafka.actors.clients.metadata import ClientMetadata
from rafka.actors.clients.producer import Producer
from rafka.actors.clients.sender import Sender
from rafka.actors.errors import (
    InvalidProducerEpochError,
    RequestTimedOutError,
    error_for,
    is_retriable,
)
from rafka.actors.messages import ProducerDescription, ProducerQuery
from rafka.common.sequences import increment_sequence, sequence_before

# Producer ids of derived writers have this bit set; `Producer` and the Kafka listener draw
# theirs at random below it, so the two kinds never meet.
DERIVED_PRODUCER_ID_BIT = 1 << 62
# How often a leader is asked again while an earlier attempt's last batch is not committed.
_POLL_S = 0.05


def derive_producer_id(name: str) -> int:
    """The producer id of the writer called `name` (the same on every attempt): 62 bits of its
    BLAKE2b hash, with `DERIVED_PRODUCER_ID_BIT` set."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return DERIVED_PRODUCER_ID_BIT | (int.from_bytes(digest, "big") & (DERIVED_PRODUCER_ID_BIT - 1))


class SequencedSender(Sender):
    """The sender of a `SequencedProducer`: never a new epoch (see the module docstring)."""

    def _out_of_order(self, batch: PendingBatch, expected_sequence: int | None) -> bool:
        """Retry only a batch that arrived ahead of an earlier one of this attempt still on
        its way; fail it otherwise (see the module docstring)."""
        if expected_sequence is None or batch.base_sequence is None:
            return False
        if not sequence_before(expected_sequence, batch.base_sequence):
            return False  # the leader holds these sequences already: another attempt's
        with self._lock:
            return not self._accumulator.lost_producer_state(batch, expected_sequence)


class SequencedProducer(Producer):
    """`Producer` under a given producer id (epoch 0) that resumes an earlier attempt's
    sequence numbers: see the module docstring."""

    _sender_type = SequencedSender

    def __init__(self, namespace: str, producer_id: int, **config: Any) -> None:
        if not DERIVED_PRODUCER_ID_BIT <= producer_id < 2 * DERIVED_PRODUCER_ID_BIT:
            raise ValueError(f"producer id {producer_id} is not a derived one: "
                             "use derive_producer_id")
        if config.get("enable_idempotence", True) is not True:
            raise ValueError("a sequenced producer is idempotent: leave enable_idempotence on")
        super().__init__(namespace, **config)
        self.producer_id = producer_id

    def start_fresh(self, topic: str) -> dict[int, int]:
        """For a producer id no attempt can have written under yet (a write's first attempt,
        under an id made for it): every partition of `topic` starts at sequence 0, as `resume`
        would find, without asking the leaders."""
        return dict.fromkeys(range(self._partition_count(topic)), 0)

    def resume(self, topic: str, timeout_s: float = 120.0) -> dict[int, int]:
        """How many records earlier attempts under this producer id wrote to each partition
        of `topic`, once the leaders have committed them; the partitions' sequence numbers
        go on from there.

        A leader's last batch above its high watermark may yet be lost with the leader, so the
        answer waits until it is committed (or the leader changes and the new one answers).
        Raises `RequestTimedOutError` after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        pending = set(range(self._partition_count(topic)))
        written: dict[int, int] = {}
        while pending:
            answers = describe_producer(self.metadata, topic, sorted(pending), self.producer_id)
            for partition, answer in answers.items():
                count = _records_written(answer, topic, partition, self.producer_id)
                if count is not None:
                    written[partition] = count
                    pending.discard(partition)
            if not pending:
                break
            if time.monotonic() > deadline:
                raise RequestTimedOutError(
                    f"the leaders of {topic} partitions {sorted(pending)} did not say within "
                    f"{timeout_s} s how far producer {self.producer_id} got")
            time.sleep(_POLL_S)
        with self._lock:
            for partition, count in written.items():
                self._accumulator.sequences.start_at(topic, partition, count)
        return dict(sorted(written.items()))


def describe_producer(metadata: ClientMetadata, topic: str, partitions: list[int],
                      producer_id: int) -> dict[int, ProducerDescription]:
    """DescribeProducers for `producer_id` in `partitions` of `topic`, one request per leader
    host; a partition whose leader could not answer is left out (ask again)."""
    by_host: dict[str, tuple[Any, list[int]]] = {}
    for partition in partitions:
        try:
            name, host = metadata.leader_host(topic, partition, wait_s=1)
        except Exception as error:
            if not is_retriable(error):
                raise
            metadata.invalidate(topic)
            continue
        by_host.setdefault(name, (host, []))[1].append(partition)
    answers: dict[int, ProducerDescription] = {}
    for name, (host, led) in by_host.items():
        try:
            replies = ray.get(host.describe_producers.remote(
                [ProducerQuery(topic, partition, producer_id) for partition in led]),
                timeout=30)
        except Exception as error:
            metadata.forget_if_dead(name, error)
            if not is_retriable(error):
                raise
            metadata.invalidate(topic)
            continue
        for partition, reply in zip(led, replies, strict=True):
            reply_error = error_for(reply)
            if reply_error is None:
                answers[partition] = reply
            elif is_retriable(reply_error):
                metadata.invalidate(topic)
            else:
                raise reply_error
    return answers


def _records_written(answer: ProducerDescription, topic: str, partition: int,
                     producer_id: int) -> int | None:
    """The records an answer says this producer id wrote to the partition (its next sequence),
    or None while its last batch is not committed."""
    if answer.last_sequence < 0:
        return 0
    if answer.producer_epoch != 0:
        raise InvalidProducerEpochError(
            f"{topic}-{partition} holds producer {producer_id} at epoch "
            f"{answer.producer_epoch}, not 0: another writer has this derived producer id")
    if answer.last_offset >= answer.high_watermark:
        return None
    return increment_sequence(answer.last_sequence, 1)
