"""Enqueue → send latency at low load: one message at a time, a no-op handler noting the time.

A worker runs on the lane (batch 10, poll interval 0.05 s). Each message is enqueued in a host
transaction; the clock starts when COMMIT returns (the row is visible from then) and stops when
the handler is called with that row. A random pause of up to one poll interval separates messages,
so arrivals don't line up with the worker's poll.

With the LISTEN/NOTIFY wake-up in the tree (``outbox_adapters.postgres.notify.WakeupListener`` and
``Worker(wakeup=...)``), the main figure uses it and polling is measured beside it; without it, the
main figure is polling.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

import psycopg

from bench import rows, variants
from bench.library import lane_config
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, percentile
from outbox_adapters.postgres import PostgresStore, enqueue_async
from outbox_adapters.runtime import Worker
from outbox_core.messages import ClaimedRow, NewMessage
from outbox_core.outcomes import Outcome

__all__ = ["measure"]

POLL: Final = 0.05
#: Longest wait for one message to be sent before the run is abandoned.
SEND_TIMEOUT: Final = 10.0


class _Recorder:
    """The no-op handler: notes when each row reached it."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self.arrived = asyncio.Event()

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:  # noqa: ARG002
        self.seen[int(row.id)] = time.perf_counter()
        self.arrived.set()
        return Outcome.sent()


async def _series(dsn: str, messages: int, *, wakeup: bool, seed: int) -> list[float]:
    recorder = _Recorder()
    pauses = random.Random(seed)  # noqa: S311 - spacing, not secrets
    store = await PostgresStore.open(dsn, min_size=2, max_size=2)
    listener: Any = None
    try:
        kwargs: dict[str, Any] = {}
        if wakeup:
            listener_class = variants.wakeup_listener()
            listener = listener_class(dsn)
            await listener.start()
            kwargs["wakeup"] = listener.wakeup(rows.LANE)
        worker = Worker(store, recorder, lane_config(10, poll_interval=POLL), **kwargs)
        running = asyncio.ensure_future(worker.run())
        latencies: list[float] = []
        try:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                for _ in range(messages):
                    await asyncio.sleep(pauses.uniform(0, POLL))
                    recorder.arrived.clear()
                    async with conn.transaction():
                        result = await enqueue_async(
                            conn, NewMessage(rows.LANE, dict(rows.PAYLOAD))
                        )
                    committed = time.perf_counter()
                    async with asyncio.timeout(SEND_TIMEOUT):
                        while int(result.row_id) not in recorder.seen:
                            await recorder.arrived.wait()
                            recorder.arrived.clear()
                    latencies.append((recorder.seen[int(result.row_id)] - committed) * 1000.0)
        finally:
            worker.request_stop()
            async with asyncio.timeout(SEND_TIMEOUT):
                await running
    finally:
        if listener is not None:
            await listener.aclose()
        await store.close()
    return latencies


async def measure(
    server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    has_wakeup = variants.wakeup_listener() is not None
    modes = {"wakeup": True, "polling": False} if has_wakeup else {"polling": False}
    p50: dict[str, list[float]] = {mode: [] for mode in modes}
    p99: dict[str, list[float]] = {mode: [] for mode in modes}
    with fresh_database(server_dsn, "latency") as dsn:
        for run in range(runs):
            for mode, wakeup in modes.items():
                series = await _series(dsn, sizes.latency_messages, wakeup=wakeup, seed=run)
                p50[mode].append(percentile(series, 50))
                p99[mode].append(percentile(series, 99))
                log(
                    f"latency run {run + 1}: {mode} p50 {p50[mode][-1]:.1f} ms,"
                    f" p99 {p99[mode][-1]:.1f} ms"
                )
    main = "wakeup" if has_wakeup else "polling"
    out: dict[str, Any] = {
        "messages": sizes.latency_messages,
        "p50_ms": Figure.of(p50[main], "ms"),
        "p99_ms": Figure.of(p99[main], "ms"),
        "variant": (
            "LISTEN/NOTIFY wake-up (WakeupListener), poll interval 0.05 s as the fallback"
            if has_wakeup
            else "polling every 0.05 s (no WakeupListener in this tree)"
        ),
    }
    if has_wakeup:
        out["polling"] = {
            "p50_ms": Figure.of(p50["polling"], "ms"),
            "p99_ms": Figure.of(p99["polling"], "ms"),
        }
    return out
