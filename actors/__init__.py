"""The Ray actors (broker, partition replica, controller, consumer), the producer and consumer
clients, the public topology API (Cluster) and the command line."""
