"""What a store shows an operator: rows, failed rows grouped by error, counters (ADR 0026).

The value types of :class:`~outbox_core.ports.OperatorStore` (``outbox get``, ``outbox failed``,
``outbox stats``, ``outbox requeue``, ``outbox keys rotate``), shared by every store adapter so the
command line is written once against the port. Plain frozen records; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import attrs

from outbox_core.delivery import Status
from outbox_core.messages import JSONObject

__all__ = [
    "AuditEntry",
    "ErrorGroup",
    "FailedReport",
    "LaneStats",
    "ParkedEvent",
    "ParkedReport",
    "PayloadRewrites",
    "StoreStats",
    "StoredRow",
]


@attrs.define
class StoreStats:
    """A store object's counters since it was built (for logs, metrics and tests)."""

    #: Rows handed out by ``claim_due``.
    claimed_rows: int = 0
    #: Marks (and releases) the fence accepted.
    applied_marks: int = 0
    #: Marks (and releases) the fence refused: dropped, never applied.
    stale_marks: int = 0


@attrs.frozen
class StoredRow:
    """A row as an operator sees it. ``payload`` is raw: redact it before showing it anywhere."""

    id: int
    lane: str
    status: Status
    #: The decoded payload, or the stored JSON text when it cannot be decoded (a poison row).
    payload: JSONObject | str
    attempts: int
    next_attempt_at: datetime
    claim_token: str | None
    claimed_at: datetime | None
    last_error: str | None
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    scrubbed_at: datetime | None


@attrs.frozen
class ErrorGroup:
    """Failed rows that share an error."""

    error: str | None
    rows: int
    first_failed_at: datetime | None
    last_failed_at: datetime | None


@attrs.frozen
class FailedReport:
    """The newest failed rows, and every failed row grouped by error."""

    rows: tuple[StoredRow, ...]
    by_error: tuple[ErrorGroup, ...]


@attrs.frozen
class LaneStats:
    """One lane of ``outbox stats``: rows per status, and the marks the fence refused.

    ``stale_marks`` counts, since the table was created, the marks that matched no row pending
    under their claim (a worker paused past its lease while a sibling re-claimed the row, or the
    row was already resolved): each was dropped, never applied.
    """

    rows: Mapping[Status, int] = attrs.field(factory=dict)
    stale_marks: int = 0


@attrs.frozen
class AuditEntry:
    """Who put which failed row back to pending, and what it had failed with (PostgreSQL:
    a row of ``outbox_requeue_audit``)."""

    message_id: int
    actor: str
    requeued_at: datetime
    previous_attempts: int
    previous_error: str | None
    #: Why, as the operator said it (``outbox requeue --reason``).
    reason: str | None = None


@attrs.frozen
class PayloadRewrites:
    """What ``OperatorStore.rewrite_payloads`` did (``outbox keys rotate``)."""

    #: Batches run (one transaction each on PostgreSQL).
    batches: int
    #: Unsent rows read.
    examined: int
    #: Rows whose new payload was written.
    rewritten: tuple[int, ...]
    #: Rows whose payload changed between the read and the write (a worker marked them): left as
    #: they were.
    changed: tuple[int, ...]


@attrs.frozen
class ParkedEvent:
    """One recipient kind of one event that a consumer channel parked on the dead-letter
    destination (PostgreSQL: a row of ``outbox_channel_parked``). The event itself is on the
    broker's ``<topic>.dlq``: it is put back with ``outbox dlq redrive``, not requeued."""

    channel: str
    event_id: str
    kind: str
    reason: str
    attempts: int
    parked_at: datetime


@attrs.frozen
class ParkedReport:
    """The newest parked events, and every parked event grouped by reason."""

    rows: tuple[ParkedEvent, ...]
    by_error: tuple[ErrorGroup, ...]
