"""What ``outbox top`` reads: per lane of every queue table, one statement, cheap enough to poll.

Every figure but the recent ones comes through a partial index (pending rows, failed rows), so its
cost follows the backlog, not the history. The recent figures (sent in the last minute, enqueue →
sent percentiles over the last 5 minutes) read only the newest :data:`RECENT_ROWS` ids of the table
(a primary-key range), so a lane sending more than that in 5 minutes shows the rate of its newest
rows: the figure is a floor, said in ``--help``.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from sqlalchemy import Table

from outbox_adapters.postgres.queues import QUEUES as BY_NAME
from outbox_adapters.postgres.statements import render
from outbox_core.top import LaneRow, error_class

__all__ = ["LANES", "QUEUES", "RECENT_ROWS", "read_lanes", "read_parked"]

#: How many of the newest ids the recent figures look at.
RECENT_ROWS: Final = 100_000
QUEUES: Final[tuple[Table, ...]] = tuple(BY_NAME.values())

LANES: Final = """
WITH pending AS (
    SELECT lane, count(*) AS pending,
           extract(epoch FROM now() - min(created_at)) AS oldest_s,
           count(*) FILTER (WHERE claim_token IS NOT NULL AND next_attempt_at > now()) AS in_flight,
           count(*) FILTER (WHERE claim_token IS NOT NULL AND next_attempt_at <= now()) AS expired
    FROM {queue} WHERE status = 'pending' GROUP BY lane
),
failed AS (
    SELECT lane, count(*) AS failed FROM {queue} WHERE status = 'failed' GROUP BY lane
),
recent AS (
    SELECT lane,
           count(*) FILTER (WHERE resolved_at > now() - interval '1 minute') AS sent_per_min,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM resolved_at - created_at))
               AS p50_s,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM resolved_at - created_at))
               AS p95_s
    FROM {queue}
    WHERE id > (SELECT coalesce(max(id), 0) FROM {queue}) - %(recent)s
      AND status = 'dispatched' AND resolved_at > now() - interval '5 minutes'
    GROUP BY lane
),
errors AS (
    SELECT DISTINCT ON (lane) lane, last_error,
           count(*) OVER (
               PARTITION BY lane,
               regexp_replace(
                   regexp_replace(last_error, ':([[:space:]].*)?$', ''),
                   '[^[:space:]]+@[^[:space:]]+', '', 'g'
               )
           ) AS same_class
    FROM {queue}
    WHERE status IN ('pending', 'failed') AND last_error IS NOT NULL
    ORDER BY lane, updated_at DESC
),
lanes AS (
    SELECT lane FROM pending UNION SELECT lane FROM failed UNION SELECT lane FROM recent
),
workers AS (
    SELECT lane, count(*) AS live FROM outbox_heartbeat
    WHERE beat_at >= now() - stale_after GROUP BY lane
)
SELECT lanes.lane, coalesce(pending.pending, 0), pending.oldest_s,
       coalesce(pending.in_flight, 0), coalesce(pending.expired, 0), coalesce(failed.failed, 0),
       coalesce(recent.sent_per_min, 0), recent.p50_s, recent.p95_s,
       errors.last_error, coalesce(errors.same_class, 0), leader.holder, leader.term,
       coalesce(workers.live, 0)
FROM lanes
LEFT JOIN pending USING (lane)
LEFT JOIN failed USING (lane)
LEFT JOIN recent USING (lane)
LEFT JOIN errors USING (lane)
LEFT JOIN workers USING (lane)
LEFT JOIN outbox_leader AS leader ON leader.lane = lanes.lane AND leader.expires_at > now()
ORDER BY lanes.lane
"""


def _float(value: Any) -> float | None:  # noqa: ANN401 - a numeric or NULL column
    return None if value is None else round(float(value), 3)


def _lane(queue: str, row: Any) -> LaneRow:  # noqa: ANN401 - a database row
    return LaneRow(
        queue=queue,
        lane=str(row[0]),
        pending=int(row[1]),
        oldest_pending_s=_float(row[2]),
        in_flight=int(row[3]),
        leases_expired=int(row[4]),
        failed=int(row[5]),
        sent_per_min=int(row[6]),
        p50_s=_float(row[7]),
        p95_s=_float(row[8]),
        last_error_class=error_class(row[9]),
        last_error_count=int(row[10]),
        leader=None if row[11] is None else str(row[11]),
        term=None if row[12] is None else int(row[12]),
        workers=int(row[13]),
    )


def read_lanes(dsn: str, *, recent: int = RECENT_ROWS) -> list[LaneRow]:
    """Every lane with pending, failed or recently sent rows, of every queue table."""
    lanes: list[LaneRow] = []
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        for table in QUEUES:
            lanes.extend(
                _lane(table.name, row)
                for row in conn.execute(render(LANES, table), {"recent": recent})
            )
    return lanes


def read_parked(dsn: str) -> dict[str, int]:
    """How many events each consumer channel parked (its ledger, ``outbox_channel_parked``)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute("SELECT channel, count(*) FROM outbox_channel_parked GROUP BY channel")
        return {str(channel): int(n) for channel, n in rows}
