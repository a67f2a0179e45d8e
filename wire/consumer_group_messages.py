"""The new consumer group protocol's messages (KIP-848), which kafka-python's schemas lack:
classes of its message machinery over the schemas in `rafka.wire.schemas`."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from rafka.wire import schemas


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=schemas):  # type: ignore[misc, call-arg]
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=schemas):  # type: ignore[misc, call-arg]
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=schemas):  # type: ignore[misc, call-arg]
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=schemas):  # type: ignore[misc, call-arg]
    pass
