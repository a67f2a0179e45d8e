"""Kafka's classic group protocol for Kafka clients: a pure state machine per group
(`classic_group`) and the coordinator that drives it on a broker (`coordinator`). rafka's own
consumers form groups through ZooKeeper instead (`actors.clients.group_consumer`)."""
