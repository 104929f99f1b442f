"""Retention (ADR 0025): delete what was delivered long enough ago, in short batches, and never
what another promise still reads.

The outbox tables only grow: every sent e-mail, dispatched webhook-outbox row, delivered webhook
delivery and published event stays as the record of what went out. ``outbox prune`` removes those
older than a cut-off, table by table. Some of those rows are more than a record: they are what
keeps a promise, so each kind says who depends on it (:data:`PRUNABLE`):

=================  ===========================  ==========================  =======================
kind               table                        by default                  never younger than
=================  ===========================  ==========================  =======================
``webhooks``       ``outbox_webhook``           yes (dispatched)            -
``deliveries``     ``outbox_webhook_delivery``  yes (delivered), but each   -
                                                endpoint's newest success
                                                stays
``messages``       ``outbox_message``           no: sent e-mails are the    the broker's retention
                                                delivery record, and the
                                                e-mail channel's rows its
                                                dedup record
``events``         ``outbox_event``             no: an event id's           the broker's retention
                                                idempotency record
``notifications``  ``outbox_notification``      no: the in-app channel's    the broker's retention
                                                dedup record (read ones)
=================  ===========================  ==========================  =======================

A kind outside the defaults is pruned only when named (``--only``), and never with a cut-off younger
than what its dependants need: the broker may redeliver an event for as long as it keeps it
(``--broker-retention``, 7 days by default, the streams' default ``max_age``), and a redelivered
event whose dedup rows were deleted would be sent again. :func:`check_ages` refuses such a run,
naming both figures. The endpoint-health sweep reads an endpoint's newest success (a failure streak
starts after it), so the prune keeps it, however old: deleting it would make an old failure look
like the start of a streak and disable a healthy endpoint.

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

import attrs
import psycopg
from sqlalchemy import Table

from outbox_adapters.postgres.channels.feed import prune as prune_notifications
from outbox_adapters.postgres.queues import QUEUES
from outbox_adapters.postgres.statements import render
from outbox_core.brokers import DEFAULT_MAX_AGE
from outbox_core.errors import ConfigurationError

__all__ = [
    "BROKER_RETENTION",
    "DEFAULT_KINDS",
    "PRUNABLE",
    "PRUNE_QUEUE",
    "Prunable",
    "PruneRefused",
    "check_ages",
    "prune",
    "prune_queue",
]

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
      AND q.resolved_at < %(cutoff)s{keep}
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM {queue} AS q USING doomed WHERE q.id = doomed.id
    RETURNING q.id
)
SELECT (SELECT max(id) FROM chunk), (SELECT min(created_at) FROM chunk),
       (SELECT count(*) FROM gone)
"""

#: A delivery that is its endpoint's newest success stays: the health sweep's streak starts there.
KEEP_NEWEST_SUCCESS: Final = """
      AND (q.status <> 'dispatched' OR EXISTS (
          SELECT 1 FROM {queue} AS newer
          WHERE newer.endpoint_id IS NOT DISTINCT FROM q.endpoint_id
            AND newer.lane = q.lane
            AND newer.status = 'dispatched'
            AND newer.resolved_at > q.resolved_at))"""

#: How long the broker may redeliver an event unless told otherwise (the streams' ``max_age``).
BROKER_RETENTION: Final = DEFAULT_MAX_AGE


@attrs.frozen
class Prunable:
    """One kind ``outbox prune`` knows: its table (None: the feed's own job), whether a run
    without ``--only`` prunes it, and what depends on its rows (None: nothing)."""

    table: Table | None
    default: bool
    #: Who reads the rows while the broker may redeliver their events (the floor is the broker's
    #: retention); None: no floor.
    needed_by: str | None = None
    keep: str = ""


#: What ``outbox prune --only`` names, in the order a run prunes them.
PRUNABLE: Final[Mapping[str, Prunable]] = {
    "messages": Prunable(
        QUEUES["messages"],
        default=False,
        needed_by="sent e-mails are the e-mail channel's dedup record",
    ),
    "webhooks": Prunable(QUEUES["webhooks"], default=True),
    "deliveries": Prunable(QUEUES["deliveries"], default=True, keep=KEEP_NEWEST_SUCCESS),
    "events": Prunable(
        QUEUES["events"], default=False, needed_by="an event's row is its id's idempotency record"
    ),
    "notifications": Prunable(
        None, default=False, needed_by="read notifications are the in-app channel's dedup record"
    ),
}
#: What a run without ``--only`` prunes: the kinds nothing else reads.
DEFAULT_KINDS: Final = tuple(kind for kind, what in PRUNABLE.items() if what.default)


class PruneRefused(ConfigurationError):
    """A prune whose cut-off is younger than what a chosen kind's dependants need."""


def _days(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def check_ages(
    kinds: Sequence[str], older_than: timedelta, *, broker_retention: timedelta = BROKER_RETENTION
) -> None:
    """:class:`PruneRefused` when a kind in ``kinds`` would lose rows its dependants still read:
    a cut-off younger than the broker's retention for a kind that is a dedup record."""
    short = [kind for kind in kinds if PRUNABLE[kind].needed_by and older_than < broker_retention]
    if short:
        why = "; ".join(f"{kind}: {PRUNABLE[kind].needed_by}" for kind in short)
        raise PruneRefused(
            f"--older-than {_days(older_than)} is under the broker's retention of"
            f" {_days(broker_retention)} (--broker-retention), and the broker may redeliver an"
            f" event that long ({why}); prune them at --older-than {_days(broker_retention)} or"
            " more"
        )


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
    keep: str = "",
) -> int:
    """Delete ``table``'s rows sent (dispatched or skipped) before ``cutoff``, ``batch`` rows per
    statement on the autocommit connection ``conn``, ``pause`` seconds between statements (to
    leave the disk and CPU to the workers), sparing the rows ``keep`` (a condition on ``q``)
    spares; how many were deleted."""
    if not conn.autocommit:
        raise ValueError("prune_queue needs an autocommit connection: each batch commits alone")
    statement = render(PRUNE_QUEUE.replace("{keep}", keep), table)
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


def prune(  # noqa: PLR0913 - keyword-only knobs
    dsn: str,
    older_than: timedelta,
    *,
    batch: int = 1000,
    only: Sequence[str] | None = None,
    pause: float = 0.0,
    broker_retention: timedelta = BROKER_RETENTION,
) -> dict[str, int]:
    """Prune the :data:`DEFAULT_KINDS` (or ``only`` those of :data:`PRUNABLE`) older than
    ``older_than``; the rows removed per kind, in :data:`PRUNABLE`'s order. :class:`PruneRefused`
    (before anything is deleted) when a chosen kind's dependants need older rows
    (:func:`check_ages`)."""
    _check(older_than, batch)
    unknown = sorted(set(only or ()) - set(PRUNABLE))
    if unknown:
        raise ValueError(
            f"nothing to prune called {', '.join(unknown)}; known: {', '.join(PRUNABLE)}"
        )
    chosen = set(DEFAULT_KINDS if only is None else only)
    kinds = [kind for kind in PRUNABLE if kind in chosen]
    check_ages(kinds, older_than, broker_retention=broker_retention)
    removed: dict[str, int] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT now() - %s::interval", (older_than,)).fetchone()
        if found is None:  # pragma: no cover - SELECT always answers a row
            raise RuntimeError("the database did not answer SELECT now()")
        cutoff: datetime = found[0]
        for kind in kinds:
            what = PRUNABLE[kind]
            if what.table is None:
                removed[kind] = prune_notifications(dsn, older_than, batch=batch)
            else:
                removed[kind] = prune_queue(
                    conn, what.table, cutoff, batch=batch, pause=pause, keep=what.keep
                )
    return removed
