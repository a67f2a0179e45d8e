"""rafka's clients, which run in the caller's process: the producer (with its accumulator and
partitioner), the consumer, the group consumer and its assignors, consumer-group member actors,
the clients' configuration and their metadata cache. They never import the server side."""
