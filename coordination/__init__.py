"""ZooKeeper coordination: the embedded server, the znode layout, registration, elections,
watches and fencing. No Ray."""
