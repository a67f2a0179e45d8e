"""The durable partition log: record batches, segments, indexes, retention and compaction.

Pure Python with no Ray and no ZooKeeper: everything here can be driven by a unit test.
"""
