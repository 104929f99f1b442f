"""What ``outbox dlq redrive`` changes in PostgreSQL for the consumer channels (ADR 0021).

A channel parks a recipient kind it gave up on (``outbox_channel_parked``) and acknowledges the
event. For the e-mail channel the kind's row stays ``failed``: a redriven event that found the row
failed and the park recorded would be acknowledged again and send nothing. So a redrive works in
two steps, each one transaction:

1. :func:`mark_redriven`, by the command, BEFORE the events go back on their topic: the parks of
   the redriven events, in every channel, are marked lifted (``redriven_at``, who, why). A lifted
   park no longer counts as parked.
2. :func:`rearm_redriven`, by the channel, when the event comes back and one of its rows is
   failed: each failed row of a lifted kind goes back to pending with its attempts reset, audited
   in ``outbox_requeue_audit`` like ``outbox requeue`` (who redrove it, ``dlq redrive: <why>``),
   and the lifted park is dropped. The lane's worker sends the row; if it fails again, the kind is
   parked again.

A kind re-armed once is re-armed no more: its park is gone, so a second redelivery (or a second
redrive) of the event finds the row sent, or parked anew. Exactly one e-mail per (event, kind)
results from a redrive, however often the event comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg
from psycopg import sql
from sqlalchemy import Table

from outbox_adapters.postgres.operator_statements import REQUEUED_ROW

__all__ = ["MARK_REDRIVEN", "REARM_REDRIVEN", "mark_redriven", "rearm_redriven"]

#: Lift the parks of the given events, in every channel (parks already lifted stay as they are).
MARK_REDRIVEN: Final = """
UPDATE outbox_channel_parked
SET redriven_at = now(), redriven_by = %(actor)s, redrive_reason = %(reason)s
WHERE event_id = ANY(%(event_ids)b::text[]) AND redriven_at IS NULL
"""

#: One channel's lifted parks of one event: drop them, put each kind's failed row back to pending
#: (:data:`~outbox_adapters.postgres.operator_statements.REQUEUED_ROW`, as ``outbox requeue``
#: does) and audit it; the kinds re-armed.
REARM_REDRIVEN: Final = """
WITH lifted AS (
    DELETE FROM outbox_channel_parked
    WHERE channel = %(channel)s AND event_id = %(event_id)s AND redriven_at IS NOT NULL
    RETURNING kind, redriven_by, redrive_reason
),
previous AS (
    SELECT m.id, m.attempts, m.last_error, lifted.kind, lifted.redriven_by, lifted.redrive_reason
    FROM {queue} AS m
    JOIN lifted ON m.idempotency_key = %(event_id)s || ':' || lifted.kind
    WHERE m.lane = %(lane)s AND m.status = 'failed'
    FOR UPDATE OF m
),
requeued AS (
    UPDATE {queue} AS m
{requeued_row}    FROM previous
    WHERE m.id = previous.id AND m.status = 'failed'
    RETURNING m.id, previous.attempts, previous.last_error, previous.kind,
              previous.redriven_by, previous.redrive_reason
),
audited AS (
    INSERT INTO outbox_requeue_audit
        (queue, message_id, actor, previous_attempts, previous_error, reason)
    SELECT {queue_name}, id, coalesce(redriven_by, 'outbox dlq redrive'), attempts, last_error,
           'dlq redrive' || coalesce(': ' || redrive_reason, '')
    FROM requeued
    RETURNING message_id
)
SELECT requeued.kind FROM requeued
""".replace("{requeued_row}", REQUEUED_ROW.lstrip("\n"))


async def mark_redriven(
    conn: psycopg.AsyncConnection[Any],
    event_ids: Sequence[str],
    *,
    actor: str,
    reason: str | None,
) -> int:
    """:data:`MARK_REDRIVEN` on ``conn`` (in the caller's transaction); parks lifted."""
    cursor = await conn.execute(
        MARK_REDRIVEN, {"event_ids": list(event_ids), "actor": actor, "reason": reason}
    )
    return int(cursor.rowcount)


async def rearm_redriven(
    conn: psycopg.AsyncConnection[Any], table: Table, *, lane: str, channel: str, event_id: str
) -> frozenset[str]:
    """:data:`REARM_REDRIVEN` for ``table``'s rows of ``lane`` (in the caller's transaction)."""
    statement = sql.SQL(REARM_REDRIVEN).format(
        queue=sql.Identifier(table.name), queue_name=sql.Literal(table.name)
    )
    cursor = await conn.execute(statement, {"channel": channel, "event_id": event_id, "lane": lane})
    return frozenset(kind for (kind,) in await cursor.fetchall())
