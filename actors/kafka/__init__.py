"""Kafka's wire protocol served by a broker: the TCP listener and its request handlers, the admin
APIs among them. It sees the broker only through `broker_view.BrokerView`, so nothing here
imports the server side; the broker imports the listener, only when it serves Kafka clients."""
