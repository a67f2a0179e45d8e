"""What every layer shares, at the bottom of the import graph: the topic-partition, Kafka's
sentinel offsets and epochs, the two clocks, sequence arithmetic, the config schema and
`wait_until`. It imports no other rafka package."""
