"""The controller: one per cluster, on the event loop of the broker ZooKeeper elected. It turns
ZooKeeper's changes into events (`events`), decides elections (`elections`) and reassignment
steps (`reassignment`) as pure functions, and sends LeaderAndIsr to the brokers."""
