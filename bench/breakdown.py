"""Where the worker's dispatch time goes: a ladder from the bare protocol up to the worker.

``python -m bench.breakdown [--dsn URL] [--rows 5000] [--runs 3] [--setting 1x10]``

Each rung adds one layer of the library on top of the one below, and drains the same no-op rows:

====================  ==========================================================================
``raw``               :mod:`bench.raw`: claim = one autocommit statement, one autocommit mark/row
``+claim_txn``        the claim inside ``conn.transaction()`` (BEGIN … COMMIT, as the store does)
``+pool``             every statement on a connection checked out of a ``psycopg_pool`` pool
``store``             :class:`PostgresStore` ``claim_due`` / ``mark_if_pending`` in a plain loop
                      (rows built as ``ClaimedRow``, marks as ``Mark``, the library's SQL)
``worker``            :class:`Worker` (strict): budgets, timeouts, ``decide``, detached marks
====================  ==========================================================================

Wall time and this process's CPU time per row are printed for each rung; the step from one rung to
the next is what that layer costs. CPU time per row is the steadier figure on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any, Final

import psycopg
from psycopg_pool import AsyncConnectionPool

from bench import loop, rows, server
from bench.library import drain_library, lane_config
from bench.raw import CLAIM, MARK_DISPATCHED, drain_raw
from bench.stats import rotation
from outbox_adapters.postgres import PostgresStore
from outbox_core.delivery import Status
from outbox_core.messages import ClaimToken, Mark
from outbox_core.ports import ClaimRequest
from outbox_core.scrub import DEFAULT_SECRET_KEYS

__all__ = ["main"]

_SCRUB: Final = sorted(DEFAULT_SECRET_KEYS)


async def _raw_claim_txn(dsn: str, *, batch: int, lease: timedelta, pooled: bool) -> int:
    """The raw loop with the claim in a transaction, optionally every statement via a pool."""
    pool: AsyncConnectionPool[Any] | None = None
    conn: psycopg.AsyncConnection[Any] | None = None
    if pooled:
        pool = AsyncConnectionPool(
            dsn, min_size=2, max_size=2, kwargs={"autocommit": True}, open=False
        )
        await pool.open(wait=True)
    else:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    done = 0
    try:
        while True:
            token = secrets.token_hex(16)
            params = {"lane": rows.LANE, "limit": batch, "lease": lease, "token": token}
            if pool is not None:
                async with pool.connection() as c, c.transaction():
                    claimed = await (await c.execute(CLAIM, params)).fetchall()
            else:
                assert conn is not None  # noqa: S101 - one of the two is open
                async with conn.transaction():
                    claimed = await (await conn.execute(CLAIM, params)).fetchall()
            if not claimed:
                return done
            for row in sorted(claimed, key=lambda r: (r[7], r[0])):
                mark = {"id": row[0], "token": token, "scrub": _SCRUB}
                if pool is not None:
                    async with pool.connection() as c:
                        await c.execute(MARK_DISPATCHED, mark)
                else:
                    assert conn is not None  # noqa: S101
                    await conn.execute(MARK_DISPATCHED, mark)
                done += 1
    finally:
        if pool is not None:
            await pool.close()
        if conn is not None:
            await conn.close()


async def _store_loop(dsn: str, *, batch: int, lease: timedelta) -> int:
    """PostgresStore's claim and mark, in the simplest loop (no Worker)."""
    store = await PostgresStore.open(dsn, min_size=2, max_size=2)
    done = 0
    try:
        while True:
            token = ClaimToken.from_entropy(secrets.token_bytes(16))
            claimed = await store.claim_due(ClaimRequest(rows.LANE, batch, lease, token))
            if not claimed:
                return done
            for row in claimed:
                mark = Mark(
                    row.id, row.token, Status.DISPATCHED, "", scrub_keys=DEFAULT_SECRET_KEYS
                )
                await store.mark_if_pending(mark)
                done += 1
    finally:
        await store.close()


def _rungs(dsn: str, workers: int, batch: int) -> dict[str, Callable[[], Coroutine[Any, Any, int]]]:
    config = lane_config(batch)
    lease = config.timing.claim_lease()

    async def fan(one: Callable[[], Awaitable[int]]) -> int:
        return sum(await asyncio.gather(*(one() for _ in range(workers))))

    async def raw() -> int:
        return (await drain_raw(dsn, workers=workers, batch=batch, lease=lease))[0]

    async def claim_txn() -> int:
        return await fan(lambda: _raw_claim_txn(dsn, batch=batch, lease=lease, pooled=False))

    async def pooled() -> int:
        return await fan(lambda: _raw_claim_txn(dsn, batch=batch, lease=lease, pooled=True))

    async def store() -> int:
        return await fan(lambda: _store_loop(dsn, batch=batch, lease=lease))

    async def worker() -> int:
        return (await drain_library(dsn, workers=workers, config=config, pool=2))[0]

    return {"raw": raw, "+claim_txn": claim_txn, "+pool": pooled, "store": store, "worker": worker}


def _measure(
    dsn: str, count: int, runs: int, workers: int, batch: int
) -> list[tuple[str, float, float]]:
    rungs = _rungs(dsn, workers, batch)
    wall: dict[str, list[float]] = {name: [] for name in rungs}
    cpu: dict[str, list[float]] = {name: [] for name in rungs}
    for run in range(runs):
        order = rotation(rungs, run)
        for name in order:
            rows.reset(dsn)
            rows.load_pending(dsn, count)
            rows.checkpoint(dsn)
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            done = loop.run(rungs[name]())
            wall[name].append((time.perf_counter() - wall_start) * 1e6 / done)
            cpu[name].append((time.process_time() - cpu_start) * 1e6 / done)
            rows.verify_drain(dsn, count, what=f"breakdown {name}")
    return [(name, statistics.median(wall[name]), statistics.median(cpu[name])) for name in rungs]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.breakdown", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dsn")
    parser.add_argument("--rows", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--setting", default="1x10", help="WORKERSxBATCH, e.g. 1x10 or 4x100")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    workers, batch = (int(part) for part in args.setting.split("x"))
    with server.server(args.dsn) as found, server.fresh_database(found.dsn, "breakdown") as dsn:
        results = _measure(dsn, args.rows, args.runs, workers, batch)
    base_wall, base_cpu = results[0][1], results[0][2]
    out = [
        f"{args.setting}, {args.rows} rows, median of {args.runs} runs, loop {loop.loop_name()}",
        f"{'rung':12s} {'wall us/row':>12s} {'step':>8s} {'cpu us/row':>11s} {'step':>8s} {'rows/s':>8s}",
    ]
    previous = results[0]
    for name, wall, cpu in results:
        out.append(
            f"{name:12s} {wall:12.1f} {wall - previous[1]:+8.1f} {cpu:11.1f} {cpu - previous[2]:+8.1f}"
            f" {1e6 / wall:8.0f}"
        )
        previous = (name, wall, cpu)
    out.append(
        f"worker / raw throughput: {base_wall / results[-1][1]:.2f}; cpu: {results[-1][2] / base_cpu:.2f}x"
    )
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
