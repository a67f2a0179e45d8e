"""Topic ids in Kafka clients' requests (KIP-516): the requests that name topics by id (Metadata
v10+ and DeleteTopics v6+ may, Fetch v13+ always does) have each id turned into the topic's
name, from the broker's metadata cache, before their API's checks and handler see them; an id
no topic has stays nameless, and the handler answers it UNKNOWN_TOPIC_ID. Answers carry the ids
back (`uuid_of`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.actors.broker_view import BrokerView
from rafka.coordination.topic_ids import NO_TOPIC_ID, topic_id_text, topic_id_uuid
from rafka.wire.protocol import Api

Handler = Callable[[Api, int, Any], Awaitable[Any]]

# The APIs whose requests may name topics by id: from which version, and each topic's name
# field (the list is `topics` in every one).
_BY_ID = {ApiKey.Metadata: (10, "name"), ApiKey.DeleteTopics: (6, "name"),
          ApiKey.Fetch: (13, "topic")}


def uuid_of(topic_ids: Mapping[str, str], name: str | None) -> uuid.UUID:
    """The id of topic `name` as a UUID, from `{name: id text}`; Kafka's zero id if unknown."""
    text = topic_ids.get(name) if name is not None else None
    return NO_TOPIC_ID if text is None else topic_id_uuid(text)


class TopicIdResolver:
    """Names the topics a request gives by id alone (see the module docstring)."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker

    def wrap(self, handlers: dict[int, Handler]) -> dict[int, Handler]:
        wrapped = dict(handlers)
        for key in _BY_ID:
            wrapped[key] = self._resolving(handlers[key])
        return wrapped

    def _resolving(self, handler: Handler) -> Handler:
        async def resolved(api: Api, version: int, request: Any) -> Any:
            since, name_field = _BY_ID[api.key]
            if version >= since:
                # A version that names topics by id leaves the name out: None, or "" where
                # the field is not in the version at all (Fetch v13+).
                for topic in request.topics or ():
                    if not getattr(topic, name_field) and topic.topic_id:
                        setattr(topic, name_field,
                                self.broker.topic_name_of(topic_id_text(topic.topic_id)))
            return await handler(api, version, request)

        return resolved
