"""The durable partition log: record batches, segments, indexes, retention and compaction.

Pure Python with no Ray and no ZooKeeper: everything here can be driven by a unit test.

Modules, bottom up (each imports only those before it, and the small ones beside them:
``checkpoint``, ``config``, ``epoch_cache``, ``errors``, ``index``, ``producer_state``):

* ``batch``: the record batch and its byte layout, the only module that parses it, with
  ``record_check`` (a batch's records checked where their producer says they end) beneath it
  and ``record_columns`` (records encoded from Arrow columns) beside it;
* ``retention``: which segments retention deletes (pure decisions);
* ``validator``: a leader's offsets stamped on incoming batches, a follower's checked
  (LogValidator);
* ``segment``: one segment, a ``.log`` file and its two indexes (Kafka's LogSegment);
* ``local_log``: the segment list: roll, append, read, truncate, delete, flush (LocalLog);
* ``loader``: crash recovery at open, in numbered passes (LogLoader);
* ``cleaner``: compaction, driven over a log's segments;
* ``log``: :class:`Log`, offsets, epochs, producer state and the high watermark (UnifiedLog).
"""

from rafka.logstore.batch import (
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    BatchHeader,
    Record,
    build_batch,
    decode_batches,
    decode_records,
    iter_batches,
    read_header,
    stamp_batch,
    validate_batch,
    validate_batches,
)
from rafka.logstore.cleaner import CompactionResult, SegmentCleanResult
from rafka.logstore.config import LogConfig
from rafka.logstore.epoch_cache import EpochEntry, LeaderEpochCache
from rafka.logstore.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRecordError,
    LogClosedError,
    LogStoreError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from rafka.logstore.log import AppendInfo, FetchData, Log
from rafka.logstore.producer_state import (
    BatchMetadata,
    ProducerEntry,
    SequenceCheck,
    SequenceOutcome,
    check_sequence,
)
from rafka.logstore.retention import RetentionDecision, SegmentSummary, decide_retention

__all__ = [
    "CREATE_TIME",
    "HEADER_SIZE",
    "LOG_APPEND_TIME",
    "AppendInfo",
    "BatchHeader",
    "BatchMetadata",
    "CompactionResult",
    "CorruptRecordError",
    "EpochEntry",
    "FencedLeaderEpochError",
    "FetchData",
    "InvalidRecordError",
    "LeaderEpochCache",
    "Log",
    "LogClosedError",
    "LogConfig",
    "LogStoreError",
    "OffsetOutOfRangeError",
    "ProducerEntry",
    "Record",
    "RecordTooLargeError",
    "RetentionDecision",
    "SegmentCleanResult",
    "SegmentSummary",
    "SequenceCheck",
    "SequenceOutcome",
    "UnexpectedAppendOffsetError",
    "build_batch",
    "check_sequence",
    "decide_retention",
    "decode_batches",
    "decode_records",
    "iter_batches",
    "read_header",
    "stamp_batch",
    "validate_batch",
    "validate_batches",
]
