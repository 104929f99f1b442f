"""The webhook tables (ADR 0017), in the shared :data:`~outbox_adapters.postgres.tables.metadata`,
so ``outbox schema apply|sql|verify`` and a host's Alembic autogenerate see them with the others.

- ``outbox_webhook``: the webhook outbox the host writes in its own transaction
  (:func:`~outbox_adapters.postgres.webhooks.enqueue_webhook`); a :func:`queue_table`, lane
  :data:`WEBHOOK_LANE`, payload ``{"event_type": str, "data": {...}}``. ``event_type`` is a column
  generated from the payload (the producer's INSERT stays the generic one).
- ``outbox_webhook_endpoint``: where events go (the tenant it belongs to, URL, subscribed event
  types, enabled, owner, why and when it was disabled, the signature scheme).
- ``outbox_webhook_secret``: an endpoint's signing secrets (``v1``) or Ed25519 private keys
  (``v1a``); rotation adds a new one and gives the old ones an expiry, and every unexpired one
  signs.
- ``outbox_webhook_event``: one row per event fanned out (or per replay clone), with its stable
  ``msg_id`` (the ``webhook-id`` header), its tenant and its data.
- ``outbox_webhook_delivery``: one row per (event, endpoint), a :func:`queue_table` on lane
  :data:`DELIVERY_LANE` served by the same ``PostgresStore`` as every queue (claim, fenced mark,
  release, operator port). Built with ``legacy_null_due=True``: the claim still takes a pending
  delivery with a NULL due time, as rows written before every delivery was born leased could
  have. Its payload is ``{"event_id", "endpoint_id"}`` plus what the fenced marks patch in
  (``last_status``, ``response``). ``ordering_key`` (the event's, NULL for none) makes the claim
  keep event order per (endpoint, key) (:func:`~outbox_adapters.postgres.statements.delivery_key_order`).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from outbox_adapters.postgres.tables import ADDED_LATER, metadata, queue_table
from outbox_adapters.webhook_model import DELIVERY_LANE, WEBHOOK_LANE

__all__ = [
    "DELIVERY_LANE",
    "WEBHOOK_LANE",
    "outbox_webhook",
    "outbox_webhook_delivery",
    "outbox_webhook_endpoint",
    "outbox_webhook_event",
    "outbox_webhook_secret",
]


def _stamps() -> list[Column[object]]:
    return [
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    ]


#: What the host enqueues: one row per webhook event to fan out.
outbox_webhook: Final = queue_table(
    "outbox_webhook",
    metadata,
    #: The payload's event type, for an operator's queries; generated, so enqueue stays generic.
    Column("event_type", Text, Computed("payload ->> 'event_type'", persisted=True)),
)

outbox_webhook_endpoint: Final = Table(
    "outbox_webhook_endpoint",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    #: Checked by the destination guard when registered, and again at every connect.
    Column("url", Text, nullable=False),
    #: The event types it receives; ``*`` receives every type.
    Column("event_types", ARRAY(Text), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    #: Who is told (through the e-mail outbox) when the endpoint is disabled for failing.
    Column("owner_email", Text, nullable=True),
    Column("disabled_reason", Text, nullable=True),
    Column("disabled_at", DateTime(timezone=True), nullable=True),
    *_stamps(),
    #: The signature scheme (ADR 0017): ``v1`` HMAC-SHA256 (also NULL, as rows written before the
    #: column have it) or ``v1a`` Ed25519. Every secret of the endpoint is a key of this scheme.
    Column("scheme", Text, nullable=True, info={ADDED_LATER: True}),
    #: The tenant (the host's customer) the endpoint belongs to: it receives only that tenant's
    #: events. Never NULL (the ``tenant`` check); the column is nullable only so that ``schema
    #: apply`` can add it to a table of an earlier release, whose rows it then gives one named
    #: tenant (:mod:`outbox_adapters.postgres.upgrades`).
    Column("tenant", Text, nullable=True, info={ADDED_LATER: True}),
    CheckConstraint("cardinality(event_types) >= 1", name="event_types"),
    CheckConstraint("tenant IS NOT NULL", name="tenant"),
    CheckConstraint("enabled OR disabled_at IS NOT NULL", name="disabled_at"),
)
#: Deliveries a second the endpoint takes at most, across the sending process (ADR 0018; NULL:
#: no cap). Enforced by the delivery lane (``lanes.endpoint_pacing``), not by the database.
outbox_webhook_endpoint.append_column(
    Column("max_per_second", Integer, nullable=True, info={ADDED_LATER: True})
)
#: What the host or its customer calls the endpoint (NULL: nothing), shown by the portal.
outbox_webhook_endpoint.append_column(
    Column("description", Text, nullable=True, info={ADDED_LATER: True})
)

outbox_webhook_secret: Final = Table(
    "outbox_webhook_secret",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column(
        "endpoint_id",
        BigInteger,
        ForeignKey("outbox_webhook_endpoint.id", name="fk_outbox_webhook_secret_endpoint"),
        nullable=False,
        index=True,
    ),
    #: ``whsec_<base64>`` (``whsk_<base64>`` for a v1a endpoint), generated by the caller (never
    #: by SQL), or its sealed envelope (ADR 0030): whoever reads a plaintext one can sign as the
    #: library.
    Column("secret", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    #: NULL: no expiry. A rotation sets it on the old secrets to now + overlap.
    Column("expires_at", DateTime(timezone=True), nullable=True),
)

outbox_webhook_event: Final = Table(
    "outbox_webhook_event",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    #: ``msg_`` + 32 hex digits: the ``webhook-id`` of every delivery of this event.
    Column("msg_id", Text, nullable=False, unique=True),
    Column("event_type", Text, nullable=False),
    Column("data", JSONB(), nullable=False),
    #: The webhook outbox row this event came from (at most one event per row); NULL for a replay.
    Column("source_outbox_id", BigInteger, nullable=True, unique=True),
    #: The event this one replays (a clone), and what the replay covers
    #: (``{"endpoint_id": N}`` or ``{"endpoint_id": null}`` for every endpoint).
    Column(
        "replay_of",
        BigInteger,
        ForeignKey("outbox_webhook_event.id", name="fk_outbox_webhook_event_replay_of"),
        nullable=True,
        index=True,
    ),
    Column("replay_scope", JSONB(), nullable=True),
    #: When the replay's deliveries were created; NULL on a clone = an interrupted replay.
    Column("replay_completed_at", DateTime(timezone=True), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    #: The producer's ordering key (``enqueue_webhook(..., ordering_key=)``), copied onto each
    #: delivery; a replay's clone keeps its source's. NULL: the event is ordered against nothing.
    Column("ordering_key", Text, nullable=True, info={ADDED_LATER: True}),
    #: The tenant of the event (from ``enqueue_webhook(..., tenant=)``; a replay's clone keeps its
    #: source's): its deliveries go to that tenant's endpoints only. Never NULL, as on the
    #: endpoints.
    Column("tenant", Text, nullable=True, info={ADDED_LATER: True}),
    CheckConstraint("(replay_of IS NULL) = (replay_scope IS NULL)", name="replay_scope"),
    CheckConstraint("tenant IS NOT NULL", name="tenant"),
)

outbox_webhook_delivery: Final = queue_table(
    "outbox_webhook_delivery",
    metadata,
    Column(
        "event_id",
        BigInteger,
        ForeignKey("outbox_webhook_event.id", name="fk_outbox_webhook_delivery_event"),
        nullable=True,
    ),
    Column(
        "endpoint_id",
        BigInteger,
        ForeignKey("outbox_webhook_endpoint.id", name="fk_outbox_webhook_delivery_endpoint"),
        nullable=True,
    ),
    #: The event's ordering key: the claim never takes a delivery while an earlier one (by event
    #: id) of the same (endpoint, key) is pending (``statements.delivery_key_order``). NULL: none.
    Column("ordering_key", Text, nullable=True, info={ADDED_LATER: True}),
    legacy_null_due=True,
)
# Nullable for the generic queue's sake (the store never writes them); a real delivery has both.
outbox_webhook_delivery.append_constraint(
    CheckConstraint(
        f"lane <> '{DELIVERY_LANE}' OR (event_id IS NOT NULL AND endpoint_id IS NOT NULL)",
        name="delivery_refs",
    )
)
#: The fan-out's lookup: a tenant's endpoints (and the host API's listing, by id).
Index(
    "ix_outbox_webhook_endpoint_tenant",
    outbox_webhook_endpoint.c.tenant,
    outbox_webhook_endpoint.c.id,
)
#: A tenant's events, newest first (the host API's and the portal's listings).
Index("ix_outbox_webhook_event_tenant", outbox_webhook_event.c.tenant, outbox_webhook_event.c.id)
#: One delivery per event and endpoint: a re-run replay or fan-out can't make a second.
Index(
    "uq_outbox_webhook_delivery_event_endpoint",
    outbox_webhook_delivery.c.event_id,
    outbox_webhook_delivery.c.endpoint_id,
    unique=True,
)
#: The keyed claim's test "an earlier pending delivery of this (endpoint, key)", and the fan-out's
#: "a pending delivery of this (endpoint, key)": partial, so keyless and resolved rows cost nothing.
Index(
    "ix_outbox_webhook_delivery_key_order",
    outbox_webhook_delivery.c.endpoint_id,
    outbox_webhook_delivery.c.ordering_key,
    outbox_webhook_delivery.c.event_id,
    postgresql_where=(outbox_webhook_delivery.c.status == "pending")
    & outbox_webhook_delivery.c.ordering_key.is_not(None),
)
#: An endpoint's deliveries by status (``outbox deliveries --endpoint``, endpoint health).
Index(
    "ix_outbox_webhook_delivery_endpoint_status",
    outbox_webhook_delivery.c.endpoint_id,
    outbox_webhook_delivery.c.status,
)
