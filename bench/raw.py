"""The protocol of DESIGN.md written directly on psycopg 3, with no library: the baseline the
worker's dispatch overhead is measured against.

Per worker: one autocommit connection. A claim is ONE statement (its own transaction): lock up to
``batch`` due rows with ``FOR UPDATE SKIP LOCKED``, count the attempt, stamp the lease and a fresh
token, return the rows in claim order. Then, per row: the (no-op) send, and ONE autocommit fenced
UPDATE (status and token guard) that sets the row dispatched and scrubs its secret keys in the same
statement. The same rows are written, with the same columns, as the library writes them; only the
code around the statements is missing (no budgets, no timeouts, no detached marks, no decision
core, no pool).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import timedelta
from typing import Any, Final

import psycopg

from outbox_core.scrub import DEFAULT_SECRET_KEYS

__all__ = ["CLAIM", "MARK_DISPATCHED", "drain_raw"]

#: Claim-lease, one statement: same locking, same columns stamped, same rows back, same order.
CLAIM: Final = """
WITH due AS (
    SELECT id, next_attempt_at AS due_at
    FROM outbox_message
    WHERE lane = %(lane)s AND status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_message AS m
SET attempts = m.attempts + 1,
    next_attempt_at = now() + %(lease)s::interval,
    claim_token = %(token)s,
    claimed_at = now(),
    updated_at = now()
FROM due
WHERE m.id = due.id
RETURNING m.id, m.lane, m.payload, m.attempts, m.claim_token, m.next_attempt_at, m.created_at,
          due.due_at
"""

#: The fenced dispatched mark, one autocommit statement per row, scrub included.
MARK_DISPATCHED: Final = """
UPDATE outbox_message
SET status = 'dispatched',
    last_error = NULL,
    resolved_at = now(),
    payload = payload - %(scrub)s::text[],
    scrubbed_at = now(),
    updated_at = now()
WHERE id = %(id)s AND status = 'pending' AND claim_token = %(token)s
"""

_SCRUB: Final = sorted(DEFAULT_SECRET_KEYS)


async def _send(_row: tuple[Any, ...]) -> None:
    """The no-op send (an await, like the library's handler)."""


async def _worker(
    conn: psycopg.AsyncConnection[Any], *, lane: str, batch: int, lease: timedelta
) -> int:
    done = 0
    while True:
        token = secrets.token_hex(16)
        cur = await conn.execute(
            CLAIM, {"lane": lane, "limit": batch, "lease": lease, "token": token}
        )
        rows = sorted(await cur.fetchall(), key=lambda r: (r[7], r[0]))
        if not rows:
            return done
        for row in rows:
            await _send(row)
            marked = await conn.execute(
                MARK_DISPATCHED, {"id": row[0], "token": token, "scrub": _SCRUB}
            )
            if marked.rowcount != 1:
                raise RuntimeError(f"raw mark of row {row[0]} matched {marked.rowcount} rows")
            done += 1


async def drain_raw(
    dsn: str, *, workers: int, batch: int, lease: timedelta, lane: str = "email"
) -> tuple[int, float]:
    """Drain the lane with ``workers`` concurrent tasks; returns (rows, seconds)."""
    conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(workers)]
    try:
        started = time.perf_counter()
        counts = await asyncio.gather(
            *(_worker(conn, lane=lane, batch=batch, lease=lease) for conn in conns)
        )
        elapsed = time.perf_counter() - started
    finally:
        for conn in conns:
            await conn.close()
    return sum(counts), elapsed
