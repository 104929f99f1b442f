"""Dispatch overhead: the library's worker with a no-op handler vs the same protocol written by hand.

For each setting (``1x10``: 1 worker x batch 10; ``4x100``: 4 workers x batch 100), every run loads
N due rows, drains them, and checks that each row was dispatched exactly once and scrubbed:

- ``library``: :class:`~outbox_adapters.runtime.Worker` in its strict mode (``rows_in_flight=1``: a
  crash repeats at most the one row in flight), one store (pool) per worker;
- ``raw``: :mod:`bench.raw`, the same claim and one autocommit fenced mark per row on psycopg;
- ``library_grouped``: the worker with 10 rows in flight and their marks grouped per window
  (opt-in: ``rows_in_flight=10, group_marks=True``; a crash may repeat up to 10 rows, as many as
  pgqueuer's batch), reported beside the others.

Workers are asyncio tasks in this one process (each with its own connections), for both sides. The
order of the three drains rotates from run to run, so none always runs first or last.

Beside the rate, each strict and raw drain's CPU cost per row is measured (:mod:`bench.cpu`: this
process plus the server's processes): a second view of the overhead the library's code owns. On a
machine whose CPU is shared it spreads about as widely as the rate (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from bench import rows
from bench.cpu import CpuMeter, server_seconds
from bench.library import connection_budget, drain_library, lane_config, pool_size
from bench.raw import drain_raw
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, ratio, rotation

__all__ = ["SETTINGS", "measure"]

#: Rows in flight (and so rows per grouped mark) in the grouped mode.
GROUP_WINDOW: Final = 10
#: name → (workers, batch size)
SETTINGS: Final = {"1x10": (1, 10), "4x100": (4, 100)}


async def measure(
    server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    with fresh_database(server_dsn, "dispatch") as dsn:
        return await _measure(dsn, sizes, runs, log)


async def _measure(dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    budget = connection_budget(dsn)
    out: dict[str, Any] = {}
    for name, (workers, batch) in SETTINGS.items():
        strict = lane_config(batch)
        window = min(GROUP_WINDOW, batch)
        grouped = lane_config(batch, rows_in_flight=window, group_marks=True)
        lease = strict.timing.claim_lease()
        strict_pool = pool_size(1, workers=workers, budget=budget)
        grouped_pool = pool_size(window, workers=workers, budget=budget, group_marks=True)

        async def library() -> tuple[int, float]:
            return await drain_library(dsn, workers=workers, config=strict, pool=strict_pool)  # noqa: B023

        async def library_grouped() -> tuple[int, float]:
            return await drain_library(dsn, workers=workers, config=grouped, pool=grouped_pool)  # noqa: B023

        async def raw() -> tuple[int, float]:
            return await drain_raw(dsn, workers=workers, batch=batch, lease=lease)  # noqa: B023

        drains: dict[str, Callable[[], Awaitable[tuple[int, float]]]] = {
            "library": library,
            "raw": raw,
            "library_grouped": library_grouped,
        }
        rates: dict[str, list[float]] = {key: [] for key in drains}
        cpu: dict[str, list[float]] = {"library": [], "raw": []}
        meter = CpuMeter()
        for run in range(runs):
            order = rotation(drains, run)
            for key in order:
                rows.reset(dsn)
                rows.load_pending(dsn, sizes.dispatch_rows)
                rows.checkpoint(dsn)
                meter.start()
                done, seconds = await drains[key]()
                client_us, server_us = meter.stop(done)
                rows.verify_drain(dsn, sizes.dispatch_rows, what=f"dispatch {name} {key}")
                rates[key].append(done / seconds)
                if key in cpu:
                    cpu[key].append(client_us + (server_us or 0.0))
                log(
                    f"dispatch {name} run {run + 1}: {key} {done / seconds:,.0f} rows/s,"
                    f" cpu {client_us:,.0f} us/row here + {_us(server_us)} us/row server"
                )
        library_fig = Figure.of(rates["library"], "rows/s")
        raw_fig = Figure.of(rates["raw"], "rows/s")
        grouped_fig = Figure.of(rates["library_grouped"], "rows/s")
        out[name] = {
            "workers": workers,
            "batch": batch,
            "rows": sizes.dispatch_rows,
            "pool_per_worker": {"strict": strict_pool, "grouped": grouped_pool},
            "library_rows_per_s": library_fig,
            "raw_rows_per_s": raw_fig,
            "ratio": ratio(library_fig, raw_fig),
            "library_grouped_rows_per_s": grouped_fig,
            "grouped_ratio": ratio(grouped_fig, raw_fig),
            "grouped_window": window,
            "library_cpu_us_per_row": Figure.of(cpu["library"], "us/row"),
            "raw_cpu_us_per_row": Figure.of(cpu["raw"], "us/row"),
            "cpu_ratio": ratio(
                Figure.of(cpu["library"], "us/row"), Figure.of(cpu["raw"], "us/row")
            ),
        }
    out["concurrency"] = "asyncio tasks in one process, each worker with its own connections"
    out["cpu"] = (
        "this process + the server's processes"
        if server_seconds() is not None
        else "this process only (the server's processes are not visible here)"
    )
    out["goal"] = "ratio >= 0.9"
    return out


def _us(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"
