"""Kafka message schemas that kafka-python (the schema library, `rafka.wire.protocol`) lacks,
written in the JSON form of Kafka's message definitions that its loader reads: the new consumer
group protocol's requests and responses (KIP-848)."""
