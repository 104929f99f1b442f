"""The consumer channels' dead letters as an operator reads them: ``outbox failed --queue parked``
and the dead-letter page's "parked events" (docs/operations.md).

A channel parks a recipient kind it will never deliver by publishing the raw event on the broker's
``<topic>.dlq`` and recording the park in ``outbox_channel_parked`` (ADR 0021). The ledger is what
is read here: it is in the database the operator already reaches, grouped by reason like failed
rows. Putting an event back goes through the broker (``outbox dlq redrive``).
"""

from __future__ import annotations

from typing import Any, Final

from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres.errors import mapped_outages
from outbox_core.operator import ErrorGroup, ParkedEvent, ParkedReport

__all__ = ["REDRIVE_HINT", "parked_report"]

#: How an operator puts a parked event back (said wherever parked events are listed).
REDRIVE_HINT: Final = (
    "parked events are put back through the broker, once the cause is fixed:"
    " outbox dlq redrive --topic TOPIC --database-url URL [ID...]"
)

_GROUPS: Final = """
SELECT reason, count(*), min(parked_at), max(parked_at)
FROM outbox_channel_parked
WHERE %(channel)s::text IS NULL OR channel = %(channel)s
GROUP BY reason
ORDER BY count(*) DESC, reason
"""

_NEWEST: Final = """
SELECT channel, event_id, kind, reason, attempts, parked_at
FROM outbox_channel_parked
WHERE %(channel)s::text IS NULL OR channel = %(channel)s
ORDER BY parked_at DESC, event_id, kind
LIMIT %(limit)s
"""


@mapped_outages
async def parked_report(
    pool: AsyncConnectionPool[Any], *, channel: str | None = None, limit: int = 50
) -> ParkedReport:
    """Every parked event grouped by reason, and the newest ``limit`` (of ``channel``, or all)."""
    params = {"channel": channel, "limit": limit}
    async with pool.connection() as conn:
        groups = await (await conn.execute(_GROUPS, params)).fetchall()
        newest = await (await conn.execute(_NEWEST, params)).fetchall()
    return ParkedReport(
        rows=tuple(
            ParkedEvent(channel=c, event_id=e, kind=k, reason=r, attempts=int(a), parked_at=at)
            for c, e, k, r, a, at in newest
        ),
        by_error=tuple(
            ErrorGroup(error=r, rows=int(n), first_failed_at=first, last_failed_at=last)
            for r, n, first, last in groups
        ),
    )
