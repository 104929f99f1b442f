"""Driving the library's own worker: a no-op handler, lane configs, and a timed drain."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Final

import psycopg

from bench.cpu import CpuShares
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.runtime import LaneConfig, Worker
from outbox_core.messages import ClaimedRow
from outbox_core.outcomes import Outcome
from outbox_core.ports import RowHandler
from outbox_core.timing import EmailTiming

__all__ = [
    "DRAIN_POLL",
    "connection_budget",
    "drain_library",
    "lane_config",
    "noop_handler",
    "pool_size",
]

#: The worker's sleep after a short claim. A drain ends with one short claim per worker, so the
#: sleep is kept tiny: it would otherwise be counted as dispatch time.
DRAIN_POLL: Final = 0.001

_SENT: Final = Outcome.sent()


async def noop_handler(row: ClaimedRow, *, budget: timedelta) -> Outcome:  # noqa: ARG001
    """The no-op send: the row is "delivered" at once."""
    return _SENT


def lane_config(
    batch: int,
    *,
    rows_in_flight: int = 1,
    group_marks: bool = False,
    poll_interval: float = DRAIN_POLL,
) -> LaneConfig:
    """The e-mail lane with its default budgets, at ``batch`` rows per claim."""
    return email_lane(
        timing=EmailTiming(batch_size=batch),
        rows_in_flight=rows_in_flight,
        group_marks=group_marks,
        poll_interval=poll_interval,
    )


#: What the budget leaves for everything else (superuser slots, the bench's own side connections).
_RESERVE: Final = 12

#: The server's connection limit, and how many connections are open now (anyone's).
_CONNECTIONS: Final = """
SELECT current_setting('max_connections')::int, (SELECT count(*) FROM pg_stat_activity)
"""


def connection_budget(dsn: str, *, reserve: int = _RESERVE) -> int:
    """Connections the bench may add now: max_connections less those already open and a reserve.

    On a shared server other clients hold connections too; sizing pools from max_connections alone
    would end in "too many clients".
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(_CONNECTIONS).fetchone()
    limit, used = (int(row[0]), int(row[1])) if row else (100, 0)
    return max(4, limit - used - reserve)


def pool_size(rows_in_flight: int, *, workers: int, budget: int, group_marks: bool = False) -> int:
    """One connection for the claim plus one per mark in flight, within the server's budget
    (grouped marks: one write per window, so one for the claim and one for the marks)."""
    marks = 1 if group_marks else rows_in_flight
    return max(2, min(marks + 1, budget // workers))


async def drain_library(  # noqa: PLR0913 - keyword-only, one argument per knob of the drain
    dsn: str,
    *,
    workers: int,
    config: LaneConfig,
    pool: int,
    handler: RowHandler = noop_handler,
    worker_kwargs: dict[str, Any] | None = None,
    during: Callable[[], Awaitable[None]] | None = None,
    cpu: CpuShares | None = None,
) -> tuple[int, float]:
    """Drain the lane with ``workers`` workers, each on a store (pool) of its own.

    Returns (rows dispatched, seconds from the first claim to the last mark). Pools are opened
    before the clock starts. ``during`` runs alongside the drain and is cancelled when it ends.
    ``cpu``, if given, measures the CPU spent while the clock runs.
    """
    stores = [await PostgresStore.open(dsn, min_size=pool, max_size=pool) for _ in range(workers)]
    try:
        runners = [Worker(store, handler, config, **(worker_kwargs or {})) for store in stores]
        side = asyncio.ensure_future(during()) if during is not None else None
        if cpu is not None:
            cpu.start()
        started = time.perf_counter()
        stats = await asyncio.gather(*(worker.run(drain=True) for worker in runners))
        elapsed = time.perf_counter() - started
        if cpu is not None:
            cpu.stop()
        if side is not None:
            side.cancel()
            await asyncio.gather(side, return_exceptions=True)
    finally:
        for store in stores:
            await store.close()
    return sum(s.dispatched for s in stats), elapsed
