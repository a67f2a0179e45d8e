"""The producer id and epoch bounds every producer and coordinator shares."""

from __future__ import annotations

from rafka.common.producer_ids import PRODUCER_ID_BITS, random_producer_id
from rafka.common.sentinels import MAX_PRODUCER_EPOCH, producer_epoch_exhausted


def test_a_random_producer_id_is_positive_and_within_its_bits() -> None:
    ids = {random_producer_id() for _ in range(100)}
    assert all(0 <= producer_id < 2**PRODUCER_ID_BITS for producer_id in ids)
    assert len(ids) > 1


def test_the_epoch_is_a_short_and_its_last_value_is_kept_for_fencing() -> None:
    assert MAX_PRODUCER_EPOCH == 32_767
    assert not producer_epoch_exhausted(MAX_PRODUCER_EPOCH - 2)
    assert producer_epoch_exhausted(MAX_PRODUCER_EPOCH - 1)
    assert producer_epoch_exhausted(MAX_PRODUCER_EPOCH)
