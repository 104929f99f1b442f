"""The consumer channels in PostgreSQL (ADR 0021): the in-app feed (``outbox_notification``), the
parking ledger (``outbox_channel_parked``), and the per-recipient rows a channel writes through a
lane (:class:`RecipientRows`). The tables (and the feed's push trigger) join the shared metadata on
import. The feed's scoped queries (:mod:`.feed`) and its push (:mod:`.push`) serve
:mod:`outbox_adapters.feed` (ADR 0022).
"""

from outbox_adapters.postgres.channels.feed import (
    Cursor,
    FeedStore,
    Notification,
    Page,
    Scope,
    prune,
)
from outbox_adapters.postgres.channels.push import (
    FEED_CHANNEL,
    FEED_TRIGGER,
    ScopeListener,
)
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
    "FEED_CHANNEL",
    "FEED_TRIGGER",
    "Cursor",
    "FeedStore",
    "NewNotification",
    "Notification",
    "NotificationWriter",
    "Page",
    "PostgresParkLedger",
    "RecipientRow",
    "RecipientRows",
    "Scope",
    "ScopeListener",
    "outbox_channel_parked",
    "outbox_notification",
    "prune",
]
