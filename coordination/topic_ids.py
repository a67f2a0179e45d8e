"""Topic ids (KIP-516): a random UUID given to a topic when it is created, so that a topic
deleted and created again under the same name is another topic to whoever kept its id.

Stored in the topic's znode as Kafka 2.8+ stores it (`"topic_id"` in `/brokers/topics/<t>`),
as Kafka writes a UUID in text: the 16 bytes in URL-safe base64, without padding. Like Kafka's
`Uuid.randomUuid`, an id is never the zero UUID (Kafka's "no id"), nor the one Kafka keeps
for its metadata topic, nor one whose text starts with '-' (it would read as an option on a
command line). Pure.
"""

from __future__ import annotations

import base64
import binascii
import uuid

from rafka.common.errors import RafkaError

NO_TOPIC_ID = uuid.UUID(int=0)
# Kafka's METADATA_TOPIC_ID (UUID(0, 1)), kept for KRaft's own log.
METADATA_TOPIC_ID = uuid.UUID(int=1)


class InvalidTopicIdError(RafkaError, ValueError):
    """Text that is not a topic id."""


def new_topic_id() -> str:
    """A fresh topic id, as text."""
    while True:
        candidate = uuid.uuid4()
        text = topic_id_text(candidate)
        if candidate not in (NO_TOPIC_ID, METADATA_TOPIC_ID) and not text.startswith("-"):
            return text


def topic_id_text(topic_id: uuid.UUID) -> str:
    """A UUID as Kafka writes it: URL-safe base64 of its 16 bytes, unpadded (22 characters)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_uuid(text: str) -> uuid.UUID:
    """The UUID a topic id's text stands for; `InvalidTopicIdError` for other text."""
    if len(text) != 22:
        raise InvalidTopicIdError(f"{text!r} is not a topic id (22 characters of base64)")
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    except (binascii.Error, ValueError):
        raise InvalidTopicIdError(f"{text!r} is not a topic id (URL-safe base64)") from None
