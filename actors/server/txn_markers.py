"""A transaction's commit or abort marker, appended by a partition's leader for the transaction
coordinator (Kafka's WriteTxnMarkers), and answered once the ISR holds it.

A function of a `PartitionReplica`, called by its host on the host's event loop.
"""

from __future__ import annotations

from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import Appended, ErrorReply, TxnMarker
from rafka.actors.server.replica import LEADER, PartitionReplica
from rafka.common.clock import wall_clock_ms
from rafka.logstore.transactions import ControlType, build_marker_batch


async def write_marker(
    replica: PartitionReplica, marker: TxnMarker, timeout_ms: int,
) -> ErrorReply | None:
    """Append the coordinator's commit or abort marker for a producer's transaction, as
    leader; answered (None) once the ISR holds it (Kafka's WriteTxnMarkers). A marker of a
    producer epoch older than the producer's here is refused (a newer producer fenced it),
    and so is one of an older coordinator than the producer's last marker here (a
    coordinator that lost `__transaction_state`, sending late)."""
    if replica.role != LEADER:
        return replica.not_leader()
    known = replica.log.producer_state(marker.producer_id)
    if known is not None and marker.producer_epoch < known.producer_epoch:
        return error_reply(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"marker of producer {marker.producer_id} at epoch {marker.producer_epoch}, "
            f"but the partition knows epoch {known.producer_epoch}")
    if known is not None and marker.coordinator_epoch < known.coordinator_epoch:
        return error_reply(
            ErrorCode.TRANSACTION_COORDINATOR_FENCED,
            f"marker of coordinator epoch {marker.coordinator_epoch}, but a coordinator of "
            f"epoch {known.coordinator_epoch} wrote this producer's last one here")
    batch = build_marker_batch(
        marker.producer_id, marker.producer_epoch,
        ControlType.COMMIT if marker.committed else ControlType.ABORT,
        coordinator_epoch=marker.coordinator_epoch, timestamp_ms=wall_clock_ms())
    info = replica.append_as_leader(batch)
    if isinstance(info, ErrorReply):
        return info
    # A batch verified before this marker was part of the transaction it ends, or of none.
    replica.transaction_verifier.transaction_ended(marker.producer_id)
    replica.advance_high_watermark()
    replica.notify()
    reply = await replica.acknowledge(-1, info.first_offset, info.last_offset, -1, timeout_ms)
    return None if isinstance(reply, Appended) else reply

