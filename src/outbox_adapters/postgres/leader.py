"""``PostgresLeaderLease``: one worker per lane across replicas, as a lease row (ADR 0008).

Theory of operation
-------------------
Each lane has one row in ``outbox_leader``: who holds it, the term, when the term began and when the
lease expires, in *database* time. :meth:`~PostgresLeaderLease.try_acquire` is one statement
(``LEADER_ACQUIRE``): insert the row, or take it over when it is ours (renewal, same
term) or expired (a new term). Re-election is therefore a compare-and-set that the database
serialises on the row; two candidates can never both get a row back for the same live lease.

The leader trusts itself only until ``monotonic time at the START of the attempt + ttl``. The
database granted ``expires_at = its now + ttl``, and its ``now`` fell no earlier than our attempt
began, so on a clock that runs at the same rate our deadline comes no later than the database's.
Network delay, a slow commit or a pause after the reply only shorten our trust; none can stretch it
past the grant. Wall clocks never enter into it (they jump; monotonic time doesn't).

Why not ``pg_try_advisory_lock``? A session advisory lock belongs to one backend connection: it
vanishes silently when that connection drops (a pool recycling it, a network blip, a failover), and
the worker has no way to notice between two statements; and behind a transaction-pooling PgBouncer
consecutive statements run on different backends, so the lock is taken on one and "held" by nobody
the application can see. A row with a term and an expiry works through any pooler, survives
reconnects, and tells everyone who leads and since when.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres.errors import mapped_outages
from outbox_core.ports import LeaderTerm

__all__ = ["LEADER_ACQUIRE", "LEADER_RELEASE", "PostgresLeaderLease"]

#: Win or renew a lane's leadership in one statement. The row is taken when it is
#: ours and still live (renewal: same term, later expiry) or when it has expired (a new term, even
#: for the same holder: it stopped trusting itself at expiry, so its old term ended). A live lease of
#: another holder matches nothing and no row comes back. Expiry is in database time.
LEADER_ACQUIRE = """
INSERT INTO outbox_leader AS l (lane, holder, term, elected_at, expires_at)
VALUES (
    %(lane)s,
    %(holder)s,
    1,
    coalesce(%(now)s::timestamptz, now()),
    coalesce(%(now)s::timestamptz, now()) + %(ttl)s::interval
)
ON CONFLICT (lane) DO UPDATE
SET term = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > EXCLUDED.elected_at
                THEN l.term ELSE l.term + 1 END,
    elected_at = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > EXCLUDED.elected_at
                      THEN l.elected_at ELSE EXCLUDED.elected_at END,
    holder = EXCLUDED.holder,
    expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder
   OR l.expires_at <= EXCLUDED.elected_at
RETURNING term
"""

#: Step down: expire the lease now, only if it is still this holder's term (compare-and-set).
#: The row stays, so the next winner's term is one higher (terms never repeat in a lane).
LEADER_RELEASE = """
UPDATE outbox_leader
SET expires_at = least(expires_at, coalesce(%(now)s::timestamptz, now()))
WHERE lane = %(lane)s
  AND holder = %(holder)s
  AND term = %(term)s
"""


class PostgresLeaderLease:
    """:class:`outbox_core.ports.LeaderLease` on the ``outbox_leader`` table.

    Statements run one at a time on a pooled connection, each its own transaction (autocommit or an
    explicit one), so the lease works behind transaction-pooling PgBouncer too. An outage raises
    :class:`~outbox_core.errors.StoreUnavailable` (mapped in :mod:`.errors`, as for the store).
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._monotonic = monotonic

    @mapped_outages
    async def try_acquire(
        self, lane: str, holder: str, *, ttl: timedelta, now: datetime | None = None
    ) -> LeaderTerm | None:
        """Win or renew ``lane``; ``None`` while another holder's lease is live.

        ``now`` overrides the database clock (tests only).
        """
        if ttl <= timedelta(0):
            raise ValueError(f"a leader lease needs a positive ttl, got {ttl!r}")
        # Read the monotonic clock BEFORE sending the statement: the database's grant started no
        # earlier than this instant, so trusting ourselves until started + ttl never outlasts it.
        started = self._monotonic()
        params = {"lane": lane, "holder": holder, "ttl": ttl, "now": now}
        async with self._pool.connection() as conn:
            if conn.autocommit:
                cur = await conn.execute(LEADER_ACQUIRE, params)
                row = await cur.fetchone()
            else:
                async with conn.transaction():
                    cur = await conn.execute(LEADER_ACQUIRE, params)
                    row = await cur.fetchone()
        if row is None:
            return None
        return LeaderTerm(
            lane=lane, holder=holder, term=int(row[0]), trusted_until=started + ttl.total_seconds()
        )

    @mapped_outages
    async def release(self, term: LeaderTerm, *, now: datetime | None = None) -> None:
        """Expire the lease at once if it is still ``term``; a lost lease is left alone."""
        params = {"lane": term.lane, "holder": term.holder, "term": term.term, "now": now}
        async with self._pool.connection() as conn:
            if conn.autocommit:
                await conn.execute(LEADER_RELEASE, params)
            else:
                async with conn.transaction():
                    await conn.execute(LEADER_RELEASE, params)
