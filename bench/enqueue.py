"""Enqueue inside the host's transaction vs a bare INSERT of the same row.

Both sides run one host transaction per message on one psycopg async connection (autocommit, with
``async with conn.transaction()``, psycopg's recommended style: BEGIN, the write, COMMIT):

- ``library``: :func:`~outbox_adapters.postgres.enqueue_async` (payload checked against the core's
  rules, the idempotency-aware INSERT, and, when the tree has it, the wake-up NOTIFY in the same
  statement);
- ``bare``: ``INSERT INTO outbox_message (lane, payload) VALUES (...)`` with the payload as JSON.

When ``enqueue_async`` takes ``notify=``, the library is also measured with ``notify=False``.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import psycopg

from bench import rows
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, ratio, rotation
from outbox_adapters.postgres import enqueue_async
from outbox_core.messages import NewMessage

__all__ = ["measure"]

BARE_INSERT: Final = """
INSERT INTO outbox_message (lane, payload) VALUES (%(lane)s, %(payload)s::jsonb)
"""


def _takes_notify() -> bool:
    return "notify" in inspect.signature(enqueue_async).parameters


async def _run(
    dsn: str, count: int, write: Callable[[psycopg.AsyncConnection[Any]], Awaitable[object]]
) -> tuple[int, float]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        for _ in range(count):
            async with conn.transaction():
                await write(conn)
        return count, time.perf_counter() - started


async def measure(
    server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    count = sizes.enqueue_rows
    notify = _takes_notify()

    async def library(conn: psycopg.AsyncConnection[Any]) -> object:
        return await enqueue_async(conn, NewMessage(rows.LANE, dict(rows.PAYLOAD)))

    async def library_no_notify(conn: psycopg.AsyncConnection[Any]) -> object:
        kwargs: dict[str, Any] = {"notify": False}
        return await enqueue_async(conn, NewMessage(rows.LANE, dict(rows.PAYLOAD)), **kwargs)

    async def bare(conn: psycopg.AsyncConnection[Any]) -> object:
        return await conn.execute(
            BARE_INSERT, {"lane": rows.LANE, "payload": json.dumps(rows.PAYLOAD)}
        )

    writers: dict[str, Callable[[psycopg.AsyncConnection[Any]], Awaitable[object]]] = {
        "library": library,
        "bare": bare,
    }
    if notify:
        writers["library_no_notify"] = library_no_notify
    rates: dict[str, list[float]] = {key: [] for key in writers}
    with fresh_database(server_dsn, "enqueue") as dsn:
        for run in range(runs):
            order = rotation(writers, run)
            for key in order:
                rows.reset(dsn)
                rows.checkpoint(dsn)
                done, seconds = await _run(dsn, count, writers[key])
                rates[key].append(done / seconds)
                log(f"enqueue run {run + 1}: {key} {done / seconds:,.0f} rows/s")
    library_fig = Figure.of(rates["library"], "rows/s")
    bare_fig = Figure.of(rates["bare"], "rows/s")
    out: dict[str, Any] = {
        "rows": count,
        "library_rows_per_s": library_fig,
        "bare_insert_rows_per_s": bare_fig,
        "ratio": ratio(library_fig, bare_fig),
        "variant": {
            "transaction": "one host transaction per message (BEGIN, write, COMMIT)",
            "library_notify": notify,
        },
    }
    if notify:
        quiet = Figure.of(rates["library_no_notify"], "rows/s")
        out["library_no_notify_rows_per_s"] = quiet
        out["no_notify_ratio"] = ratio(quiet, bare_fig)
    return out
