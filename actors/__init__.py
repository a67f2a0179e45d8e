"""The Ray actors (broker, partition replica, controller, consumer), the producer and consumer
clients, the public topology API (Cluster) and the command line."""

from actors.cluster import Cluster
from actors.consumer import Consumer, ConsumerRecord
from actors.producer import Producer, RecordMetadata

__all__ = ["Cluster", "Consumer", "ConsumerRecord", "Producer", "RecordMetadata"]
