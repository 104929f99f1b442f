"""Heartbeats on ``outbox_heartbeat`` (the runtime's ``Heartbeat`` port) and what ``outbox
healthcheck`` reads: the database's clock, this host's beats on a lane, the lane's leader row.

The verdict is the core's (:func:`outbox_core.health.assess`); here are the statements.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs
import psycopg
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres.errors import mapped_outages
from outbox_core.health import Beat, LeaderSeen

__all__ = ["BEAT", "STOP", "HealthReading", "PostgresHeartbeat", "read_health"]

#: Upsert this worker's beat (in database time), and forget the lane's workers silent for a day.
BEAT: Final = """
WITH forgotten AS (
    DELETE FROM outbox_heartbeat
    WHERE lane = %(lane)s AND beat_at < now() - interval '1 day' AND holder <> %(holder)s
)
INSERT INTO outbox_heartbeat AS h
    (lane, holder, host, pid, started_at, beat_at, stale_after, leads)
VALUES (%(lane)s, %(holder)s, %(host)s, %(pid)s, now(), now(), %(stale_after)s, %(leading)s)
ON CONFLICT (lane, holder) DO UPDATE
SET host = EXCLUDED.host, pid = EXCLUDED.pid, beat_at = now(),
    stale_after = EXCLUDED.stale_after, leads = EXCLUDED.leads, stopped_at = NULL
"""

#: This worker's stop beat: it stopped cleanly now (in database time), so it is not live.
STOP: Final = """
UPDATE outbox_heartbeat SET beat_at = now(), stopped_at = now()
WHERE lane = %(lane)s AND holder = %(holder)s
"""

_BEATS: Final = """
SELECT holder, now() - beat_at, stale_after, leads, stopped_at IS NOT NULL
FROM outbox_heartbeat WHERE lane = %(lane)s AND host = %(host)s
ORDER BY beat_at DESC
"""
_LEADER: Final = "SELECT holder, term, expires_at - now() FROM outbox_leader WHERE lane = %(lane)s"


class PostgresHeartbeat:
    """:class:`outbox_core.ports.Heartbeat` on ``outbox_heartbeat``: one autocommit upsert a beat,
    one update for the stop beat (``stopped_at``)."""

    def __init__(
        self, pool: AsyncConnectionPool[Any], *, host: str | None = None, pid: int | None = None
    ) -> None:
        self._pool = pool
        self.host = host or socket.gethostname()
        self.pid = os.getpid() if pid is None else pid

    @mapped_outages
    async def beat(
        self, lane: str, holder: str, *, stale_after: timedelta, leading: bool | None
    ) -> None:
        params = {
            "lane": lane,
            "holder": holder,
            "host": self.host,
            "pid": self.pid,
            "stale_after": stale_after,
            "leading": leading,
        }
        async with self._pool.connection() as conn:
            await conn.execute(BEAT, params)

    @mapped_outages
    async def stop(self, lane: str, holder: str) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(STOP, {"lane": lane, "holder": holder})


@attrs.frozen
class HealthReading:
    """What the database said, and how far its clock is from this host's."""

    skew: timedelta
    beats: tuple[Beat, ...]
    leader: LeaderSeen | None


def read_health(dsn: str, lane: str, host: str, *, connect_timeout: float = 3.0) -> HealthReading:
    """One short connection: the database's clock against this host's (the midpoint of the round
    trip), this host's beats on ``lane``, and ``lane``'s leader row. psycopg's errors propagate
    (the command reports an unreachable database)."""
    with psycopg.connect(
        dsn, autocommit=True, connect_timeout=max(1, round(connect_timeout))
    ) as conn:
        before = time.time()
        found = conn.execute("SELECT clock_timestamp()").fetchone()
        after = time.time()
        database_now: datetime = found[0] if found else datetime.now(UTC)
        here = datetime.fromtimestamp((before + after) / 2, UTC)
        beats = tuple(
            Beat(holder=str(h), age=age, stale_after=bound, leading=leading, stopped=stopped)
            for h, age, bound, leading, stopped in conn.execute(
                _BEATS, {"lane": lane, "host": host}
            )
        )
        row = conn.execute(_LEADER, {"lane": lane}).fetchone()
    leader = (
        None if row is None else LeaderSeen(holder=str(row[0]), term=int(row[1]), expires_in=row[2])
    )
    return HealthReading(skew=here - database_now, beats=beats, leader=leader)
