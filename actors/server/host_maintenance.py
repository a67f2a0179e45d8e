"""A replica host's timers, for all its replicas at once: ISR shrinks and retried expansions
(`replica.lag.time.max.ms`), each log's retention, compaction and flushes when due, topic config
changes (which may bring those sooner), high-watermark checkpoints and idle fetch sessions.

One task on the host's event loop; the checkpoints' fsyncs run on a thread.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from typing import Any

from rafka.actors import metrics
from rafka.actors.config import BrokerConfig, TopicConfig
from rafka.actors.server.fetch_session import FetchSessionCache
from rafka.actors.server.replica import LEADER, PartitionReplica, log_maintenance_interval_ms
from rafka.common.clock import wall_clock_ms
from rafka.common.topic_partition import TopicPartition

log = logging.getLogger(__name__)

# Kafka's replica.high.watermark.checkpoint.interval.ms.
HIGH_WATERMARK_CHECKPOINT_INTERVAL_S = 5.0
# How soon retention runs again when the high watermark alone kept segments it would delete.
RETENTION_RETRY_MS = 1_000


class HostMaintenance:
    """The periodic work of one host's replicas (`replicas` is the host's own dict)."""

    def __init__(self, replicas: dict[TopicPartition, PartitionReplica], config: BrokerConfig,
                 sessions: FetchSessionCache) -> None:
        self.replicas = replicas
        self.config = config
        self.sessions = sessions
        self._task: asyncio.Task | None = None
        # When each replica's log maintenance is next due: (ms, order, partition), a heap.
        self._due: list[tuple[int, int, TopicPartition]] = []
        self._order = 0

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._maintain())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def schedule(self, replica: PartitionReplica) -> None:
        """Queue the replica's next log maintenance (`next_maintenance_ms`)."""
        self._order += 1
        heapq.heappush(self._due, (replica.next_maintenance_ms, self._order, replica.tp))

    def update_config(self, replica: PartitionReplica, topic_config: dict[str, Any]) -> None:
        """Give the replica the topic's new config (Kafka's `UnifiedLog.updateConfig`): the log
        rolls, retains, compacts and flushes by it from now on, and the leader checks
        min.insync.replicas and max.message.bytes by it."""
        config = TopicConfig.from_dict(topic_config)
        if config == replica.config:
            return
        replica.config = config
        replica.log.update_config(config.log)
        # Retention and compaction by the new settings at the host's next turn (within a
        # second), not after the interval the old ones set: a user who shortens retention.ms
        # sees old segments go. That turn may be sooner than the one already queued.
        replica.next_maintenance_ms = wall_clock_ms()
        self.schedule(replica)

    async def _maintain(self) -> None:
        """ISR shrinks, checkpoints, retention and flushes for every replica here.

        Each turn looks at the leaders (followers to drop from or add to the ISR) and at the
        replicas whose log maintenance is due, not at every replica: an idle host of a thousand
        replicas should cost next to nothing.
        """
        lag_ms = self.config.replica_lag_time_max_ms
        interval_s = max(min(lag_ms / 2000, 1.0), 0.05)
        next_checkpoint = time.monotonic() + HIGH_WATERMARK_CHECKPOINT_INTERVAL_S
        while True:
            await asyncio.sleep(interval_s)
            now = wall_clock_ms()
            for replica in [r for r in self.replicas.values() if r.role == LEADER]:
                try:
                    isr = replica.isr_manager
                    lagging = isr.followers_to_remove(now)
                    if lagging:
                        isr.change_isr(set(replica.isr) - lagging, "shrink")
                    else:
                        isr.maybe_expand_isr()
                except Exception:
                    log.exception("ISR check of %s-%d failed", replica.topic, replica.partition)
            # The ISR checks above are the only retry of an ISR change nobody wrote: a turn
            # that fails must not end the next ones.
            try:
                self._maintain_due_logs(now)
                self.sessions.drop_idle()
                metrics.flush_replica_counts()
                if time.monotonic() >= next_checkpoint:
                    next_checkpoint = time.monotonic() + HIGH_WATERMARK_CHECKPOINT_INTERVAL_S
                    # fsyncs: on a thread, so that requests do not wait behind them.
                    await asyncio.to_thread(_checkpoint_high_watermarks,
                                            [r.log for r in self.replicas.values()])
            except Exception:
                log.exception("the replica host's maintenance failed a turn")

    def _maintain_due_logs(self, now: int) -> None:
        """Retention, compaction and flushes of the replicas whose turn has come."""
        due = self._due
        while due and due[0][0] <= now:
            when, _order, tp = heapq.heappop(due)
            replica = self.replicas.get(tp)
            if replica is None or replica.next_maintenance_ms != when:
                continue  # stopped since, or recreated with a turn of its own
            try:
                maintain_log(replica, now)
            except Exception:
                log.exception("log maintenance of %s-%d failed", tp.topic, tp.partition)
            self.schedule(replica)


def maintain_log(replica: PartitionReplica, now: int) -> None:
    """Retention, compaction and the flush policy of one replica's log, when due."""
    if now < replica.next_maintenance_ms:
        return
    config, log_ = replica.config, replica.log
    replica.next_maintenance_ms = now + log_maintenance_interval_ms(config)
    log_.maybe_flush()
    if config.log.delete:
        log_.delete_old_segments()
        if log_.retention_awaits_high_watermark:
            replica.next_maintenance_ms = min(replica.next_maintenance_ms,
                                              now + RETENTION_RETRY_MS)
    if config.log.compact:
        log_.compact()


def _checkpoint_high_watermarks(logs: list[Any]) -> None:
    for log_ in logs:
        if log_.closed:
            continue
        try:
            log_.checkpoint_high_watermark()
        except OSError as error:  # closed and deleted meanwhile (topic deletion)
            log.debug("high-watermark checkpoint skipped: %r", error)
