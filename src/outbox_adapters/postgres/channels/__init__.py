"""The consumer channels in PostgreSQL (ADR 0021): the in-app feed (``outbox_notification``), the
parking ledger (``outbox_channel_parked``), and the per-recipient rows a channel writes through a
lane (:class:`RecipientRows`). The tables join the shared metadata on import.
"""

from outbox_adapters.postgres.channels.repository import (
    NewNotification,
    NotificationWriter,
    PostgresParkLedger,
    RecipientRow,
    RecipientRows,
)
from outbox_adapters.postgres.channels.tables import (
    AUDIENCES,
    outbox_channel_parked,
    outbox_notification,
)

__all__ = [
    "AUDIENCES",
    "NewNotification",
    "NotificationWriter",
    "PostgresParkLedger",
    "RecipientRow",
    "RecipientRows",
    "outbox_channel_parked",
    "outbox_notification",
]
