"""Against pgqueuer, on the same server, in the same database, in the same run: drain rate of
no-op jobs, and what a crash can repeat in each mode.

pgqueuer is driven as its own benchmark tool drives it (``tools/benchmark.py``, drain strategy):
all jobs enqueued in one call, then 5 ``PgQueuer`` instances (its default ``--dequeue 5``), each on
a connection of its own, running ``mode=drain`` with ``batch_size=10`` (its default
``--dequeue-batch-size``), on its default driver, asyncpg (``pgqueuer[asyncpg]``; its psycopg
driver when asyncpg is missing; which one ran is recorded), with an *async* no-op entrypoint, its
faster path (its tool mixes sync and async entrypoints 50/50; a sync one runs in a thread). With
asyncpg as its driver, pgqueuer is also measured on psycopg (``peers.pgqueuer_psycopg``,
``peers.ratio_same_driver``), the library's driver, to tell the driver from the design.

The library runs in three modes: strict at 4 x 100 (a crash repeats at most 1 row), 10 rows in
flight at 2 x 100 each marked by its own statement, and 10 rows in flight at 4 x 100 with their
marks grouped per window (both: at most 10 rows per crash, as many as pgqueuer's batch);
``peers.library`` is the best of them, named in ``peers.library.mode``, and each mode's duplicate
window is stated.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench import rows
from bench.library import connection_budget, drain_library, lane_config, pool_size
from bench.server import CONNECT_TIMEOUT, fresh_database
from bench.settings import Sizes
from bench.stats import Figure, ratio, rotation

__all__ = ["DUPLICATE_WINDOW", "measure"]

#: pgqueuer's benchmark defaults: 5 dequeue tasks x batch 10.
PGQ_TASKS: Final = 5
PGQ_BATCH: Final = 10
#: The library's modes in this comparison: name → (workers, batch, rows in flight, grouped marks).
#: On 2 cores fewer connections win: rows_in_flight=100 with a pool of ~20 per worker is slower than
#: the strict mode (too many backends for the cores), so the candidates are the strict mode and 10
#: rows in flight (pgqueuer's batch of 10 is its duplicate window too), marked row by row or with
#: one statement per window of 10 (as pgqueuer logs a batch's completions together).
LIBRARY_MODES: Final = {
    "strict_4x100": (4, 100, 1, False),
    "in_flight_10_2x100": (2, 100, 10, False),
    "grouped_10_4x100": (4, 100, 10, True),
}

DUPLICATE_WINDOW: Final = {
    "pgqueuer": (
        "a whole batch's completions share one statement: finished jobs wait in a buffer"
        " (JobStatusLogBuffer, flushed at batch_size=10 entries or every 0.1 s) and are logged"
        " together, so a crash re-runs every job still in the buffer (a batch or more) once its"
        " heartbeat times out"
    ),
    "library strict": (
        "1 row per crash: each row's fenced mark is its own autocommit statement, run before the"
        " next row starts (rows_in_flight=1)"
    ),
    "library in-flight N": (
        "N rows per crash: up to N rows are sent at once, each still marked by its own"
        " statement; a crash can repeat the N in flight (N = 10 here)"
    ),
    "library grouped N": (
        "N rows per crash: a window of N rows is sent at once and recorded by ONE statement"
        " (each row still fenced on its own); the next window starts only after that commit,"
        " so a crash can repeat the N of one window (N = 10 here)"
    ),
}


async def _pgqueuer_install(dsn: str) -> None:
    from pgqueuer import Queries  # noqa: PLC0415 - optional: only the bench extra installs it

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await Queries.from_psycopg_connection(conn).install()


def pgqueuer_driver() -> str:
    """``asyncpg`` (pgqueuer's default) when installed, else ``psycopg``."""
    try:
        importlib.import_module("asyncpg")
    except ImportError:
        return "psycopg"
    return "asyncpg"


class _Connection(Protocol):
    async def close(self) -> None: ...


async def _connect(dsn: str, driver: str) -> tuple[_Connection, Any]:
    """A connection and the pgqueuer ``PgQueuer`` on it, for ``driver``."""
    from pgqueuer import PgQueuer  # noqa: PLC0415 - optional: only the bench extra installs it

    if driver == "asyncpg":
        asyncpg = importlib.import_module("asyncpg")
        conn = await asyncpg.connect(**_asyncpg_params(dsn), timeout=CONNECT_TIMEOUT)
        return conn, PgQueuer.from_asyncpg_connection(conn)
    pconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    return pconn, PgQueuer.from_psycopg_connection(pconn)


def _asyncpg_params(dsn: str) -> dict[str, Any]:
    """asyncpg takes keywords (or a URL), not libpq's ``key=value`` strings."""
    params = conninfo_to_dict(dsn)
    names = {"host": "host", "port": "port", "user": "user", "password": "password"}
    out: dict[str, Any] = {kw: params[key] for key, kw in names.items() if params.get(key)}
    out["database"] = params.get("dbname")
    if "port" in out:
        out["port"] = int(out["port"])
    return out


async def _pgqueuer_drain(dsn: str, jobs: int, driver: str) -> tuple[int, float]:
    from pgqueuer import Queries  # noqa: PLC0415
    from pgqueuer.models import Job  # noqa: PLC0415
    from pgqueuer.types import QueueExecutionMode  # noqa: PLC0415

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        queries = Queries.from_psycopg_connection(conn)
        await queries.clear_statistics_log()
        await queries.clear_queue()
        await queries.enqueue(["asyncfetch"] * jobs, [b""] * jobs, [0] * jobs)
        await conn.execute("VACUUM ANALYZE")

    done = 0
    opened = [await _connect(dsn, driver) for _ in range(PGQ_TASKS)]
    links = [link for link, _ in opened]
    try:
        queuers = [pgq for _, pgq in opened]
        for pgq in queuers:

            @pgq.entrypoint("asyncfetch")  # type: ignore[untyped-decorator]
            async def asyncfetch(_job: Job) -> None:
                nonlocal done
                done += 1

        started = time.perf_counter()
        await asyncio.gather(
            *(pgq.run(batch_size=PGQ_BATCH, mode=QueueExecutionMode.drain) for pgq in queuers)
        )
        elapsed = time.perf_counter() - started
    finally:
        for link in links:
            await link.close()
    if done != jobs:
        raise RuntimeError(f"pgqueuer drain ran {done} jobs, expected {jobs}")
    return done, elapsed


async def measure(
    server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    with fresh_database(server_dsn, "peers") as dsn:
        return await _measure(dsn, sizes, runs, log)


async def _measure(dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    await _pgqueuer_install(dsn)
    budget = connection_budget(dsn)
    jobs = sizes.peer_rows
    driver = pgqueuer_driver()

    def library(mode: str) -> Callable[[], Awaitable[tuple[int, float]]]:
        workers, batch, in_flight, group = LIBRARY_MODES[mode]

        async def drain() -> tuple[int, float]:
            rows.reset(dsn)
            rows.load_pending(dsn, jobs)
            rows.checkpoint(dsn)
            result = await drain_library(
                dsn,
                workers=workers,
                config=lane_config(batch, rows_in_flight=in_flight, group_marks=group),
                pool=pool_size(in_flight, workers=workers, budget=budget, group_marks=group),
            )
            rows.verify_drain(dsn, jobs, what=f"peers library {mode}")
            return result

        return drain

    async def pgqueuer() -> tuple[int, float]:
        rows.checkpoint(dsn)
        return await _pgqueuer_drain(dsn, jobs, driver)

    async def pgqueuer_psycopg() -> tuple[int, float]:
        rows.checkpoint(dsn)
        return await _pgqueuer_drain(dsn, jobs, "psycopg")

    drains: dict[str, Callable[[], Awaitable[tuple[int, float]]]] = {
        "pgqueuer": pgqueuer,
        **{mode: library(mode) for mode in LIBRARY_MODES},
    }
    if driver != "psycopg":
        # The library runs on psycopg: pgqueuer on the same driver separates driver from design.
        drains["pgqueuer_psycopg"] = pgqueuer_psycopg
    rates: dict[str, list[float]] = {key: [] for key in drains}
    for run in range(runs):
        order = rotation(drains, run)
        for key in order:
            done, seconds = await drains[key]()
            rates[key].append(done / seconds)
            log(f"peers run {run + 1}: {key} {done / seconds:,.0f} jobs/s")
    pgq = Figure.of(rates["pgqueuer"], "jobs/s")
    modes = {mode: Figure.of(rates[mode], "rows/s") for mode in LIBRARY_MODES}
    best = max(modes, key=lambda mode: modes[mode].median)
    out: dict[str, Any] = {
        "jobs": jobs,
        "pgqueuer": {
            "rows_per_s": pgq,
            "settings": f"{PGQ_TASKS} tasks x batch {PGQ_BATCH}, async no-op entrypoint",
            "driver": driver,
            "version": _pgqueuer_version(),
        },
        "library": {
            "rows_per_s": modes[best],
            "mode": best,
            "modes": {mode: {"rows_per_s": figure} for mode, figure in modes.items()},
        },
        "ratio": ratio(modes[best], pgq),
        "duplicate_window": DUPLICATE_WINDOW,
        "goal": "ratio > 1 (ahead of pgqueuer)",
    }
    if "pgqueuer_psycopg" in rates:
        same_driver = Figure.of(rates["pgqueuer_psycopg"], "jobs/s")
        out["pgqueuer_psycopg"] = {"rows_per_s": same_driver, "driver": "psycopg"}
        out["ratio_same_driver"] = ratio(modes[best], same_driver)
    return out


def _pgqueuer_version() -> str:
    from importlib.metadata import version  # noqa: PLC0415

    return version("pgqueuer")
