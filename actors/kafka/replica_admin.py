"""Where replicas are, through Kafka's admin APIs: AlterPartitionReassignments and
ListPartitionReassignments (KIP-455) over rafka's reassignment in ZooKeeper, and
DescribeLogDirs and AlterReplicaLogDirs over this broker's replicas.

A reassignment asked through Kafka's protocol is the one `rafka reassign` and
`Cluster.reassign_partitions` ask for: written to `/admin/reassign_partitions` for the
controller, checked first (the partitions exist, the brokers are registered, none twice). As in
Kafka's ZooKeeper era before KIP-455, one request runs at a time: a request while another is in
progress is refused with REASSIGNMENT_IN_PROGRESS, and a reassignment cannot be cancelled (a
null replica list). A request is refused or taken whole, so each of its partitions gets the
same answer.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

from rafka.actors.broker_view import BrokerView
from rafka.actors.errors import ErrorCode
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.errors import (
    InvalidReplicaAssignmentError,
    ReassignmentInProgressError,
    UnknownTopicError,
)
from rafka.coordination.partition_state import PartitionStateStore
from rafka.wire.protocol import Api


class ReplicaAdminHandler:
    """The handlers; `broker` gives the ZooKeeper session and this broker's replicas."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker

    @property
    def admin(self) -> TopicAdmin:
        assert self.broker.store is not None
        return TopicAdmin(self.broker.store)

    # ------------------------------------------------------------------- reassignments

    async def alter_partition_reassignments(self, api: Api, version: int,
                                            request: Any) -> dict[str, Any]:
        asked = [(topic.name, partition.partition_index, partition.replicas)
                 for topic in request.topics for partition in topic.partitions]
        targets = {(name, index): replicas for name, index, replicas in asked
                   if replicas is not None}
        answers: dict[tuple[str, int], tuple[int, str | None]] = {}
        for name, index, replicas in asked:
            if replicas is None:
                answers[(name, index)] = (
                    ErrorCode.INVALID_REQUEST,
                    "a reassignment cannot be cancelled here: wait until it is done, then "
                    "reassign the partition back")
        if version >= 1 and not request.allow_replication_factor_change:
            answers.update(await asyncio.to_thread(self._changing_replication, targets))
        targets = {tp: replicas for tp, replicas in targets.items() if tp not in answers}
        if targets:
            outcome = await asyncio.to_thread(self._request, targets)
            answers.update(dict.fromkeys(targets, outcome))
        response = api.response.ReassignableTopicResponse
        topics: dict[str, list[Any]] = {}
        for (name, index), (code, message) in answers.items():
            topics.setdefault(name, []).append(response.ReassignablePartitionResponse(
                partition_index=index, error_code=code, error_message=message))
        return {"throttle_time_ms": 0, "allow_replication_factor_change": True,
                "error_code": 0, "error_message": None,
                "responses": [response(name=name, partitions=partitions)
                              for name, partitions in topics.items()]}

    def _changing_replication(self, targets: dict[tuple[str, int], list[int]],
                              ) -> dict[tuple[str, int], tuple[int, str]]:
        """INVALID_REPLICATION_FACTOR for each target that would change its partition's
        replica count (KIP-860: the client said it may not)."""
        refused: dict[tuple[str, int], tuple[int, str]] = {}
        for (name, index), replicas in targets.items():
            try:
                now = self.admin.read_assignment(name).value.partitions.get(index)
            except UnknownTopicError:
                continue  # answered with the request
            if now is not None and len(now) != len(replicas):
                refused[(name, index)] = (
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"{name}-{index} has {len(now)} replicas, the target {len(replicas)}: "
                    "set allow_replication_factor_change to change the replication factor")
        return refused

    def _request(self, targets: dict[tuple[str, int], list[int]]) -> tuple[int, str | None]:
        try:
            self.admin.request_reassignment(targets)
        except ReassignmentInProgressError as error:
            return ErrorCode.REASSIGNMENT_IN_PROGRESS, str(error)
        except UnknownTopicError as error:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(error)
        except InvalidReplicaAssignmentError as error:  # unknown brokers too
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(error)
        return ErrorCode.NONE, None

    async def list_partition_reassignments(self, api: Api, version: int,
                                           request: Any) -> dict[str, Any]:
        """The partitions of the reassignment in progress (of those asked, when asked): their
        replicas now (the new ones included while they catch up), the target's replicas not
        yet in the ISR (adding) and the replicas that will leave (removing)."""
        wanted = None if request.topics is None else {
            TopicPartition(topic.name, index)
            for topic in request.topics for index in topic.partition_indexes}
        ongoing = await asyncio.to_thread(self._ongoing, wanted)
        response = api.response.OngoingTopicReassignment
        topics: dict[str, list[Any]] = {}
        for tp, (replicas, adding, removing) in sorted(ongoing.items()):
            topics.setdefault(tp.topic, []).append(response.OngoingPartitionReassignment(
                partition_index=tp.partition, replicas=replicas, adding_replicas=adding,
                removing_replicas=removing))
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "topics": [response(name=name, partitions=partitions)
                           for name, partitions in topics.items()]}

    def _ongoing(self, wanted: set[TopicPartition] | None,
                 ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        pending = self.admin.read_reassignment()
        if pending is None:
            return {}
        assert self.broker.store is not None
        states = PartitionStateStore(self.broker.store)
        ongoing = {}
        for tp, target in pending.value.items():
            if wanted is not None and tp not in wanted:
                continue
            try:
                now = list(self.admin.read_assignment(tp.topic).value.partitions.get(
                    tp.partition, ()))
            except UnknownTopicError:
                continue  # deleted meanwhile
            state = states.read_partition_state(tp.topic, tp.partition)
            isr = set(state.value.isr) if state is not None else set()
            replicas = now + [b for b in target if b not in now]
            ongoing[tp] = (replicas, [b for b in target if b not in now or b not in isr],
                           [b for b in now if b not in target])
        return ongoing

    # ------------------------------------------------------------------------ log dirs

    async def describe_log_dirs(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """This broker's one log directory (`log.dirs` is one directory here) and each of its
        replicas asked for (all, when `topics` is null): bytes on disk, and how far the
        replica's log end is behind the high watermark (Kafka's offset lag)."""
        wanted = None if request.topics is None else {
            TopicPartition(topic.topic, index)
            for topic in request.topics for index in topic.partitions}
        replicas = await self.broker.describe_replicas()
        result = api.response.DescribeLogDirsResult
        topics: dict[str, list[Any]] = {}
        for replica in sorted(replicas, key=lambda r: (r["topic"], r["partition"])):
            if wanted is not None and (replica["topic"], replica["partition"]) not in wanted:
                continue
            topics.setdefault(replica["topic"], []).append(
                result.DescribeLogDirsTopic.DescribeLogDirsPartition(
                    partition_index=replica["partition"], partition_size=replica["size_bytes"],
                    offset_lag=max(0, replica["high_watermark"] - replica["log_end_offset"]),
                    is_future_key=False))
        data_dir = self.broker.data_dir
        usage = await asyncio.to_thread(shutil.disk_usage, data_dir)
        return {"throttle_time_ms": 0, "error_code": 0, "results": [result(
            error_code=0, log_dir=str(data_dir), total_bytes=usage.total,
            usable_bytes=usage.free, is_cordoned=False,
            topics=[result.DescribeLogDirsTopic(name=name, partitions=partitions)
                    for name, partitions in topics.items()])]}

    async def alter_replica_log_dirs(self, api: Api, version: int,
                                     request: Any) -> dict[str, Any]:
        """Move replicas between this broker's log directories. There is one, so the only move
        is to where a replica is, which Kafka answers as a no-op. As Kafka answers: a path that
        is not a log directory of the broker is LOG_DIR_NOT_FOUND, a partition with no replica
        on it REPLICA_NOT_AVAILABLE."""
        log_dir = os.path.abspath(self.broker.data_dir)
        hosted = {(replica["topic"], replica["partition"])
                  for replica in await self.broker.describe_replicas()}
        answers: dict[str, dict[int, ErrorCode]] = {}
        for directory in request.dirs:
            found = os.path.isabs(directory.path) and os.path.normpath(directory.path) == log_dir
            for topic in directory.topics:
                for index in topic.partitions:
                    answers.setdefault(topic.name, {})[index] = (
                        ErrorCode.LOG_DIR_NOT_FOUND if not found
                        else ErrorCode.NONE if (topic.name, index) in hosted
                        else ErrorCode.REPLICA_NOT_AVAILABLE)
        result = api.response.AlterReplicaLogDirTopicResult
        return {"throttle_time_ms": 0, "results": [
            result(topic_name=name, partitions=[
                result.AlterReplicaLogDirPartitionResult(partition_index=index, error_code=code)
                for index, code in partitions.items()])
            for name, partitions in answers.items()]}
