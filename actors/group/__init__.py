"""Kafka's group protocols for Kafka clients: the classic one and Kafka 4's consumer groups
(KIP-848), each a pure state machine per group (`classic_group`, `consumer_group`, with the
server assignors in `server_assignors`) driven on a broker by the coordinator (`coordinator`,
`consumer_groups`, `group_listing`). rafka's own consumers form groups through ZooKeeper instead
(`actors.clients.group_consumer`)."""
