"""The broker side: the broker actor, its replica hosts and the partition replicas they hold,
replication (the pure arithmetic in `replication`, the fetchers and fetch sessions that move the
bytes) and the offset manager of `__consumer_offsets`. Clients never import this package."""
