"""Every queue table by the name the operator's commands use for it (``--queue``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sqlalchemy import Table

from outbox_adapters.postgres.events import outbox_event
from outbox_adapters.postgres.tables import outbox_message
from outbox_adapters.postgres.webhooks.tables import outbox_webhook, outbox_webhook_delivery

__all__ = ["QUEUES"]

#: ``messages`` (e-mail lanes), ``webhooks`` (the webhook outbox), ``deliveries`` (webhook
#: deliveries), ``events`` (the event outbox).
QUEUES: Final[Mapping[str, Table]] = {
    "messages": outbox_message,
    "webhooks": outbox_webhook,
    "deliveries": outbox_webhook_delivery,
    "events": outbox_event,
}
