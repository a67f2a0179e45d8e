"""The address of the Kafka client whose request is being answered, set per connection by the
listener, which both protocols' coordinators report as a member's client host (as Kafka does)."""

from __future__ import annotations

import contextvars

CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
