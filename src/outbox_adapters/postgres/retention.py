"""Retention (ADR 0025): delete what was delivered long enough ago, in short batches.

The outbox tables only grow: every sent e-mail, dispatched webhook-outbox row, delivered webhook
delivery and published event stays as the record of what went out. ``outbox prune`` removes those
older than a cut-off, table by table:

=================================  ===================================  =============================
what                               table                                pruned when
=================================  ===================================  =============================
``messages``  (e-mail)             ``outbox_message``                   dispatched or skipped, resolved
                                                                        before the cut-off
``webhooks``  (webhook outbox)     ``outbox_webhook``                   the same
``deliveries`` (webhook attempts)  ``outbox_webhook_delivery``          the same (delivered)
``events``    (event outbox)       ``outbox_event``                     the same (published)
``notifications`` (in-app feed)    ``outbox_notification``              read, created before it
=================================  ===================================  =============================

Pending and failed rows are never touched, however old: a pending row is work, a failed one is the
operator's (``outbox failed``, requeue). Webhook events stay: they are what a replay re-sends.

How a queue table is pruned (:data:`PRUNE_QUEUE`, rendered per table like every store statement):
a keyset walk up the primary key, ``batch`` rows at a time, each batch ONE short autocommit
statement that locks and deletes only its own qualifying rows (``FOR UPDATE SKIP LOCKED``: a row
some worker or operator holds is left for the next run, never waited for). The walk stops at the
first batch whose rows were all created after the cut-off (ids grow with time, so nothing beyond
can qualify), so a run reads the old part of the table once and not the young rest. The claim's
index holds pending rows only, and the deleted rows are resolved ones, so the claim's cost does
not move while a prune runs. The cut-off is read once from the database clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import psycopg
from sqlalchemy import Table

from outbox_adapters.postgres.channels.feed import prune as prune_notifications
from outbox_adapters.postgres.queues import QUEUES
from outbox_adapters.postgres.statements import render

__all__ = ["PRUNABLE", "PRUNE_QUEUE", "prune", "prune_queue"]

#: One batch of the walk. ``after``: the last id the previous batch looked at (0 at first).
#: Returns (the last id looked at, the oldest creation time looked at, rows deleted); the first
#: two are NULL past the end of the table.
PRUNE_QUEUE: Final = """
WITH chunk AS (
    SELECT id, created_at FROM {queue}
    WHERE id > %(after)s
    ORDER BY id
    LIMIT %(batch)s
),
doomed AS (
    SELECT q.id FROM {queue} AS q
    WHERE q.id IN (SELECT id FROM chunk)
      AND q.status IN ('dispatched', 'skipped')
      AND q.resolved_at < %(cutoff)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM {queue} AS q USING doomed WHERE q.id = doomed.id
    RETURNING q.id
)
SELECT (SELECT max(id) FROM chunk), (SELECT min(created_at) FROM chunk),
       (SELECT count(*) FROM gone)
"""

#: What ``outbox prune --only`` names, and the queue table of each (None: the feed's own job).
PRUNABLE: Final[Mapping[str, Table | None]] = {**QUEUES, "notifications": None}


def _check(older_than: timedelta, batch: int) -> None:
    if older_than <= timedelta(0):
        raise ValueError(f"older_than must be positive, got {older_than}")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")


def prune_queue(  # noqa: PLR0913 - keyword-only knobs
    conn: psycopg.Connection[Any],
    table: Table,
    cutoff: datetime,
    *,
    batch: int = 1000,
    pause: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Delete ``table``'s rows sent (dispatched or skipped) before ``cutoff``, ``batch`` rows per
    statement on the autocommit connection ``conn``, ``pause`` seconds between statements (to
    leave the disk and CPU to the workers); how many were deleted."""
    if not conn.autocommit:
        raise ValueError("prune_queue needs an autocommit connection: each batch commits alone")
    statement = render(PRUNE_QUEUE, table)
    deleted, after = 0, 0
    while True:
        found = conn.execute(
            statement, {"after": after, "batch": batch, "cutoff": cutoff}
        ).fetchone()
        last, oldest, removed = found if found is not None else (None, None, 0)
        deleted += int(removed)
        if last is None or oldest is None or oldest >= cutoff:
            return deleted
        after = int(last)
        if pause > 0:
            sleep(pause)


def prune(
    dsn: str,
    older_than: timedelta,
    *,
    batch: int = 1000,
    only: Sequence[str] | None = None,
    pause: float = 0.0,
) -> dict[str, int]:
    """Prune every kind of :data:`PRUNABLE` (or ``only`` those) older than ``older_than``; the
    rows removed per kind, in :data:`PRUNABLE`'s order."""
    _check(older_than, batch)
    kinds = list(PRUNABLE) if only is None else [k for k in PRUNABLE if k in set(only)]
    unknown = sorted(set(only or ()) - set(PRUNABLE))
    if unknown:
        raise ValueError(
            f"nothing to prune called {', '.join(unknown)}; known: {', '.join(PRUNABLE)}"
        )
    removed: dict[str, int] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT now() - %s::interval", (older_than,)).fetchone()
        if found is None:  # pragma: no cover - SELECT always answers a row
            raise RuntimeError("the database did not answer SELECT now()")
        cutoff: datetime = found[0]
        for kind in kinds:
            table = PRUNABLE[kind]
            if table is None:
                removed[kind] = prune_notifications(dsn, older_than, batch=batch)
            else:
                removed[kind] = prune_queue(conn, table, cutoff, batch=batch, pause=pause)
    return removed
