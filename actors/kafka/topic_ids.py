"""Topic ids in Kafka clients' requests (KIP-516): the requests that may name a topic by its
id alone (Metadata v10+, DeleteTopics v6+) have each id turned into the topic's name, from the
broker's metadata cache, before their API's checks and handler see them; an id no topic has
stays nameless, and the handler answers it UNKNOWN_TOPIC_ID. Answers carry the ids back
(`uuid_of`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.actors.broker_view import BrokerView
from rafka.coordination.topic_ids import NO_TOPIC_ID, topic_id_uuid
from rafka.wire.protocol import Api

Handler = Callable[[Api, int, Any], Awaitable[Any]]

# The APIs whose requests may name topics by id, from the version that may: where the topics
# are listed in each.
_BY_ID = {ApiKey.Metadata: (10, "topics"), ApiKey.DeleteTopics: (6, "topics")}


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
            since, field = _BY_ID[api.key]
            if version >= since:
                await self.name_topics(getattr(request, field) or ())
            return await handler(api, version, request)

        return resolved

    async def name_topics(self, topics: Any) -> None:
        """Give each entry of `topics` that has an id and no name its topic's name."""
        by_id = [topic for topic in topics if topic.name is None and topic.topic_id]
        if not by_id:
            return
        known = (await self.broker.metadata(None))["topic_ids"]
        names = {topic_id_uuid(text): name for name, text in known.items()}
        for topic in by_id:
            topic.name = names.get(topic.topic_id)
