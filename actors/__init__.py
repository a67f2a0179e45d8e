"""The Ray actors and the clients that talk to them, by role: `server` (broker, replica hosts,
replicas, replication), `controller`, `kafka` (Kafka's wire protocol served by a broker),
`group` (Kafka's group coordinator), `clients` (producer, consumers, assignors). The modules here
are what they all share (messages, errors, naming, metrics, config, the offsets topic's format)
and, on top, the topology API (`cluster.Cluster`) and the local stack it starts.

Import the public names from `rafka` (`from rafka import Cluster`); this package imports nothing
by itself, so a replica host loads only the modules it needs."""
