"""What the consumer channels write and read in PostgreSQL (ADR 0021).

- :class:`RecipientRows`: a channel's per-recipient rows in a queue table, written by one
  statement per event (insert-or-nothing on the lane's idempotency key, the payload checked by the
  enqueue's rule, one PRODUCER span per row) and read back with their state. The rows are then
  worked by the lane's ``Worker`` like any other.
- :class:`PostgresParkLedger`: which kinds of which event a channel parked on the dead-letter
  destination (``outbox_channel_parked``).
- :class:`NotificationWriter`: the in-app channel's insert-or-nothing into ``outbox_notification``.

Every psycopg error that means "the database is unavailable" leaves here as ``StoreUnavailable``
(the one mapping, :func:`~outbox_adapters.postgres.errors.mapped_outages`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Final

import attrs
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import Table

from outbox_adapters.postgres.channels.redrive import mark_redriven, rearm_redriven
from outbox_adapters.postgres.errors import mapped_outages
from outbox_adapters.postgres.statements import render
from outbox_adapters.postgres.tables import check_queue_table, outbox_message
from outbox_adapters.store_rules import RecipientRow, payload_json
from outbox_adapters.telemetry.tracing import producing_each
from outbox_core.delivery import Status
from outbox_core.messages import NewMessage

__all__ = [
    "NewNotification",
    "NotificationWriter",
    "PostgresParkLedger",
    "RecipientRow",
    "RecipientRows",
]

# How long until a pending row is worth looking at again: 0 while it is claimed (a send is in
# flight) or due; else until its backoff ends.
_STATES: Final = """
SELECT idempotency_key, status, attempts, last_error,
       CASE WHEN claim_token IS NOT NULL THEN 0
            ELSE GREATEST(EXTRACT(EPOCH FROM next_attempt_at - now()), 0) END AS wait
FROM {table}
WHERE lane = %(lane)s AND idempotency_key = ANY(%(keys)b::text[]) AND idempotency_key IS NOT NULL
"""

# An event's recipient rows, one statement: insert-or-nothing on (lane, idempotency key), as the
# enqueue's own statement, for every row at once; the created rows' keys come back, and the lane's
# wake-up is sent for them (folded into one notification by PostgreSQL).
_WRITE: Final = """
WITH created AS (
    INSERT INTO {queue} (lane, payload, idempotency_key, next_attempt_at, trace_context)
    SELECT %(lane)s, m.payload::jsonb, m.idempotency_key, coalesce(m.not_before, now()),
           m.trace_context
    FROM unnest(%(payloads)b::text[], %(keys)b::text[], %(not_befores)b::timestamptz[],
                %(trace_contexts)b::text[])
         WITH ORDINALITY AS m(payload, idempotency_key, not_before, trace_context, n)
    ORDER BY m.n
    ON CONFLICT (lane, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, idempotency_key
)
SELECT id, idempotency_key, pg_notify({channel}, %(lane)s) FROM created
"""

# A park that ``outbox dlq redrive`` lifted (redriven_at set) no longer counts: parked again if
# the event still cannot be delivered, the entry overwritten (a new park, a new DLQ copy).
_PARKED: Final = """
SELECT kind FROM outbox_channel_parked
WHERE channel = %(channel)s AND event_id = %(event_id)s AND redriven_at IS NULL
"""

_PARK: Final = """
INSERT INTO outbox_channel_parked (channel, event_id, kind, reason, attempts)
VALUES (%(channel)s, %(event_id)s, %(kind)s, %(reason)s, %(attempts)s)
ON CONFLICT (channel, event_id, kind) DO UPDATE
SET reason = EXCLUDED.reason, attempts = EXCLUDED.attempts, parked_at = now(),
    redriven_at = NULL, redriven_by = NULL, redrive_reason = NULL
WHERE outbox_channel_parked.redriven_at IS NOT NULL
"""

_NOTIFY: Final = """
INSERT INTO outbox_notification (event_id, audience, tenant_id, title, body)
VALUES (%(event_id)s, %(audience)s, %(tenant_id)s, %(title)s, %(body)s)
ON CONFLICT (event_id, audience) DO NOTHING
"""


class RecipientRows:
    """Per-recipient rows of one lane in a queue table (default ``outbox_message``)."""

    def __init__(
        self, pool: AsyncConnectionPool[Any], *, lane: str, table: Table = outbox_message
    ) -> None:
        self._pool = pool
        self.lane = lane
        self.table = check_queue_table(table)
        self._states = sql.SQL(_STATES).format(table=sql.Identifier(self.table.name))
        self._insert = render(_WRITE, self.table)

    @mapped_outages
    async def ensure(
        self, messages: Sequence[NewMessage], *, new: bool = False
    ) -> dict[str, RecipientRow]:
        """Write each message unless a row with its idempotency key exists (insert-or-nothing),
        then return every row by key. Each message carries this lane and a key; a payload the
        enqueue would refuse raises :class:`~outbox_core.errors.InvalidPayload` before anything
        is written (checked only when a row is to be written).

        The rows are read first: when every one exists (an event looked at again while its
        recipients are being sent), that one read is all it costs. ``new``: the caller has not
        seen the event before (its first delivery), so that read is skipped. The missing rows are
        written by one statement (its own transaction: all of them or none). A row it created
        (due at once) is known without reading it: pending, no attempt, no error, due now. Only
        a row that was there already (another process wrote it) is read back."""
        keys = []
        for message in messages:
            if message.lane != self.lane or not message.idempotency_key:
                raise ValueError(f"a recipient row needs lane {self.lane!r} and an idempotency key")
            keys.append(message.idempotency_key)
        async with self._pool.connection() as conn:
            found = {} if new else await self._read(conn, keys)
            todo = [i for i, key in enumerate(keys) if key not in found]
            if todo:
                created = await self._write(conn, [messages[i] for i in todo])
                for i in todo:
                    if keys[i] in created and messages[i].not_before is None:
                        found[keys[i]] = _created(keys[i])
                missing = [key for key in keys if key not in found]
                if missing:
                    found.update(await self._read(conn, missing))
        return found

    async def _write(
        self,
        conn: AsyncConnection[Any],
        messages: list[NewMessage],
    ) -> set[str]:
        """Insert-or-nothing ``messages`` in one statement, one PRODUCER span each; the keys of
        the rows it created. Every payload is checked by the enqueue's rule first."""
        payloads = [payload_json(message.payload) for message in messages]
        with producing_each(messages, queue=self.table.name) as produced:
            params = {
                "lane": self.lane,
                "payloads": payloads,
                "keys": [each.message.idempotency_key for each in produced],
                "not_befores": [each.message.not_before for each in produced],
                "trace_contexts": [each.message.trace_context for each in produced],
            }
            # One statement: its own transaction on an autocommit connection; on one that is not,
            # the pool commits it when the connection goes back.
            cursor = await conn.execute(self._insert, params)
            rows = await cursor.fetchall()
            ids = {str(key): row_id for row_id, key, _ in rows}
            for each in produced:
                key = str(each.message.idempotency_key)
                each.wrote(ids.get(key), created=key in ids)
        return set(ids)

    async def _read(self, conn: AsyncConnection[Any], keys: list[str]) -> dict[str, RecipientRow]:
        cursor = await conn.execute(self._states, {"lane": self.lane, "keys": keys})
        return {
            key: RecipientRow(
                key=key,
                status=Status(status),
                attempts=int(attempts),
                last_error=last_error,
                wait=timedelta(seconds=float(wait)),
            )
            for key, status, attempts, last_error, wait in await cursor.fetchall()
        }

    @mapped_outages
    async def rearm(self, channel: str, event_id: str) -> frozenset[str]:
        """Put back to pending the failed rows of ``event_id`` whose park ``outbox dlq redrive``
        lifted for ``channel`` (audited with who redrove it and why), and drop those parks, in one
        transaction; the kinds re-armed (:mod:`outbox_adapters.postgres.channels.redrive`)."""
        async with self._pool.connection() as conn, conn.transaction():
            return await rearm_redriven(
                conn, self.table, lane=self.lane, channel=channel, event_id=event_id
            )


class PostgresParkLedger:
    """``lanes.consumer.ParkLedger`` on ``outbox_channel_parked``."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    @mapped_outages
    async def parked(self, channel: str, event_id: str) -> frozenset[str]:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(_PARKED, {"channel": channel, "event_id": event_id})
            return frozenset(kind for (kind,) in await cursor.fetchall())

    @mapped_outages
    async def redriven(
        self, event_ids: Sequence[str], *, actor: str, reason: str | None = None
    ) -> int:
        """Lift the parks of ``event_ids`` in every channel (``outbox dlq redrive``, before the
        events go back on their topic); how many parks were lifted."""
        async with self._pool.connection() as conn, conn.transaction():
            return await mark_redriven(conn, event_ids, actor=actor, reason=reason)

    @mapped_outages
    async def record(
        self, channel: str, event_id: str, kind: str, *, reason: str, attempts: int
    ) -> None:
        params = {
            "channel": channel,
            "event_id": event_id,
            "kind": kind,
            "reason": reason,
            "attempts": attempts,
        }
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(_PARK, params)


@attrs.frozen
class NewNotification:
    """One in-app notification to write."""

    audience: str = attrs.field(validator=attrs.validators.in_(("platform", "tenant")))
    tenant_id: str | None
    title: str
    body: str

    def __attrs_post_init__(self) -> None:
        if (self.audience == "platform") != (self.tenant_id is None):
            raise ValueError("a platform notification has no tenant; a tenant one needs one")


class NotificationWriter:
    """Insert-or-nothing into ``outbox_notification``: one row per (event, audience)."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    @mapped_outages
    async def write(self, event_id: str, notifications: Sequence[NewNotification]) -> int:
        """Write the notifications of ``event_id`` in one transaction; how many were new."""
        created = 0
        async with self._pool.connection() as conn, conn.transaction():
            for item in notifications:
                cursor = await conn.execute(
                    _NOTIFY,
                    {
                        "event_id": event_id,
                        "audience": item.audience,
                        "tenant_id": item.tenant_id,
                        "title": item.title,
                        "body": item.body,
                    },
                )
                created += cursor.rowcount
        return created


def _created(key: str) -> RecipientRow:
    """The state of a row this transaction just created, due at once."""
    return RecipientRow(
        key=key, status=Status.PENDING, attempts=0, last_error=None, wait=timedelta(0)
    )
