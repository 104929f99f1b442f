"""Memory while draining many rows: RSS sampled through the whole drain, in a fresh process.

The drain runs in a child process of its own (spawned: nothing else of the bench is loaded in it),
in the library's fastest mode on 2 cores (2 workers x batch 100, 10 rows in flight each). A thread
reads ``VmRSS`` from ``/proc/self/status`` every 0.1 s. ``rss_growth_mb`` is the RSS at the end less the
RSS once 10 % of the drain's time had passed (imports, pools and prepared statements are warm by
then); a flat line means growth small against the start. One drain: the figure is a profile over
time, not a rate, and the full size takes minutes.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

from bench import rows
from bench.server import fresh_database
from bench.settings import Sizes

__all__ = ["measure"]

WORKERS: Final = 2
BATCH: Final = 100
#: 10 rows in flight per worker: the fastest mode found on 2 cores (more connections only thrash).
IN_FLIGHT: Final = 10
SAMPLE_EVERY: Final = 0.1


def rss_mb(pid: int | str = "self") -> float:
    """The resident set size of process ``pid`` (default: this one) in MiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def _child(dsn: str, pipe: Connection) -> None:
    from bench import loop  # noqa: PLC0415 - the child imports only what the drain needs
    from bench.library import connection_budget, drain_library, lane_config, pool_size  # noqa: PLC0415

    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter(), rss_mb()))
            stop.wait(SAMPLE_EVERY)

    start: list[float] = []

    async def drain() -> tuple[int, float]:
        pool = pool_size(IN_FLIGHT, workers=WORKERS, budget=connection_budget(dsn))
        start.append(rss_mb())
        sampler.start()
        return await drain_library(
            dsn, workers=WORKERS, config=lane_config(BATCH, rows_in_flight=IN_FLIGHT), pool=pool
        )

    sampler = threading.Thread(target=sample, name="rss-sampler", daemon=True)
    try:
        done, seconds = loop.run(drain())
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join(5)
    pipe.send(
        {
            "done": done,
            "seconds": seconds,
            "start_rss": start[0] if start else float("nan"),
            "samples": samples,
        }
    )


def _profile(result: dict[str, Any]) -> dict[str, Any]:
    samples: list[tuple[float, float]] = result["samples"]
    if not samples:
        raise RuntimeError("the memory drain took no RSS sample")
    first, last = samples[0][0], samples[-1][0]
    warm_at = first + (last - first) * 0.1
    warm = next(rss for at, rss in samples if at >= warm_at)
    end = samples[-1][1]
    peak = max(rss for _, rss in samples)
    step = max(1, len(samples) // 50)
    return {
        "start_rss_mb": round(result["start_rss"], 1),
        "warm_rss_mb": round(warm, 1),
        "end_rss_mb": round(end, 1),
        "peak_rss_mb": round(peak, 1),
        "rss_growth_mb": round(end - warm, 1),
        "rss_growth_from_start_mb": round(end - result["start_rss"], 1),
        "drain_rows_per_s": round(result["done"] / result["seconds"]),
        "samples_mb": [round(rss, 1) for _, rss in samples[::step]],
    }


def measure(
    server_dsn: str, sizes: Sizes, _runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    count = sizes.memory_rows
    with fresh_database(server_dsn, "memory") as dsn:
        rows.load_pending(dsn, count)
        rows.checkpoint(dsn)
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=_child, args=(dsn, child), name="bench-memory")
        process.start()
        child.close()
        try:
            if not parent.poll(sizes.comparison_timeout):
                raise TimeoutError(
                    f"the memory drain of {count} rows did not end within"
                    f" {sizes.comparison_timeout}s"
                )
            result = parent.recv()
        finally:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join(5)
        rows.verify_drain(dsn, count, what="memory drain")
    profile = _profile(result)
    log(
        f"memory: {count:,} rows, peak {profile['peak_rss_mb']} MB,"
        f" growth {profile['rss_growth_mb']} MB"
    )
    return {
        "rows": count,
        "mode": f"{WORKERS} workers x batch {BATCH}, rows_in_flight={IN_FLIGHT}, own process",
        **profile,
        "note": "one drain (a profile over time)"
        + ("" if count >= 1_000_000 else f"; quick: {count:,} rows instead of 1M"),
    }
