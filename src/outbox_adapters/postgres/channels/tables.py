"""The consumer channels' tables (ADR 0021), in the shared :data:`~outbox_adapters.postgres.tables.metadata`,
so ``outbox schema apply|sql|verify`` and a host's Alembic autogenerate see them with the others.

- ``outbox_notification``: the in-app channel's feed, one row per (event, audience): ``platform``
  (``tenant_id`` NULL) or ``tenant`` (``tenant_id`` set). Unique on ``(event_id, audience)``, so a
  redelivered event writes nothing new. Indexed for the feed (an audience's or a tenant's newest
  first), for the unread count and for retention (read rows by age). A trigger announces
  each insert to the feed's SSE streams (:mod:`.push`, ADR 0022).
- ``outbox_channel_parked``: which recipient kind of which event a channel parked on the dead-letter
  destination, so a redelivered event does not park the same kind twice.

The e-mail channel needs no table of its own: its per-recipient rows are e-mail rows in
``outbox_message`` (lane ``notification-email``), de-duplicated by their idempotency key.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    Table,
    Text,
    UniqueConstraint,
    func,
)

from outbox_adapters.postgres.tables import ADDED_LATER, metadata

__all__ = ["AUDIENCES", "outbox_channel_parked", "outbox_notification"]

#: Who an in-app notification is for.
AUDIENCES: Final = ("platform", "tenant")

outbox_notification: Final = Table(
    "outbox_notification",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    #: The event it was made from (the CloudEvents id).
    Column("event_id", Text, nullable=False),
    #: ``platform`` (the operators) or ``tenant`` (one tenant's users).
    Column("audience", Text, nullable=False),
    #: The tenant of a ``tenant`` notification; NULL for ``platform``.
    Column("tenant_id", Text, nullable=True),
    Column("title", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    #: When it was read (NULL: unread).
    Column("read_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("event_id", "audience"),
    CheckConstraint("audience IN ('platform', 'tenant')", name="audience"),
    CheckConstraint("(audience = 'platform') = (tenant_id IS NULL)", name="tenant"),
)
_n = outbox_notification.c
#: The feed: one audience's (one tenant's) notifications, newest first.
Index("ix_outbox_notification_feed", _n.audience, _n.tenant_id, _n.created_at.desc(), _n.id.desc())
#: The unread badge: only the unread rows, so the count stays cheap as the feed grows.
Index(
    "ix_outbox_notification_unread",
    _n.audience,
    _n.tenant_id,
    postgresql_where=_n.read_at.is_(None),
)
#: Retention (``outbox feed prune``): the read rows by age, so each batch finds its rows at once.
Index(
    "ix_outbox_notification_read_age",
    _n.created_at,
    postgresql_where=_n.read_at.isnot(None),
)

outbox_channel_parked: Final = Table(
    "outbox_channel_parked",
    metadata,
    #: The channel (its consumer group).
    Column("channel", Text, primary_key=True),
    Column("event_id", Text, primary_key=True),
    #: The recipient kind (``tenant_welcome``), or ``undecodable`` for a message that was no event.
    Column("kind", Text, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("parked_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    #: Set by ``outbox dlq redrive``: the event was put back, so the park no longer holds; the
    #: channel re-arms the kind's failed row (requeued, audited) when the event comes back.
    Column("redriven_at", DateTime(timezone=True), nullable=True, info={ADDED_LATER: True}),
    #: Who redrove it, and why (kept in the requeue audit beside the re-armed row).
    Column("redriven_by", Text, nullable=True, info={ADDED_LATER: True}),
    Column("redrive_reason", Text, nullable=True, info={ADDED_LATER: True}),
)
