"""Kafka's wire protocol without I/O: listener strings, request and response codecs, and record
batches converted between Kafka's format and rafka's. The broker's listener
(`actors/kafka/listener.py`) does the I/O around them."""
