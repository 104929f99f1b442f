"""What ordering keys cost the webhook path: ``library`` (keyless) against
``library_ordered_100_keys`` (every event with one of 100 ordering keys in turn, ADR 0018), the
two library drains of :mod:`bench.webhooks` and nothing else, so the figure can be taken alone
(``python -m bench --quick --only webhook_ordering``) on a shared machine where the naive clients'
400 fresh connections take minutes.

Each run writes the events before the clock starts and drains them with
``WebhookWorkers.run(drain=True)`` against the same local receiver; the two drains alternate run by
run. Each run checks every delivery ended dispatched after one attempt. With keys, a delivery whose
key's previous delivery is still in flight is born waiting and goes out through the retry lane's
keyed claim: how many did is reported per run (``by_retry_lane``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool

from bench import webhooks
from bench.library import connection_budget
from bench.receiver_process import ReceiverProcess
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, ratio, rotation
from outbox_adapters.postgres.webhooks import WebhookRepository
from outbox_adapters.runtime.born import DEFAULT_FIRST_ATTEMPTS
from outbox_core.signing import WebhookSecret

__all__ = ["measure"]


async def measure(
    server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    with fresh_database(server_dsn, "webhook_ordering") as dsn:
        return await _measure(dsn, sizes, runs, log)


async def _measure(dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    events = sizes.webhook_events
    secret = WebhookSecret.generate_from(secrets.token_bytes(32))
    pool_size = min(webhooks.POOL_SIZE, connection_budget(dsn))
    keys = {"library": None, "library_ordered_100_keys": webhooks.ORDERING_KEYS}
    rates: dict[str, list[float]] = {name: [] for name in keys}
    with ReceiverProcess() as receiver:
        async with AsyncConnectionPool(
            dsn, min_size=pool_size, max_size=pool_size, kwargs={"autocommit": True}, open=False
        ) as pool:
            await pool.wait(timeout=30.0)
            await WebhookRepository(pool).add_endpoint(
                receiver.url, [webhooks.EVENT_TYPE], secret=secret.to_text(), tenant="acme"
            )
            for run in range(runs):
                for name in rotation(keys, run):
                    done, seconds = await webhooks.library_drain(
                        pool, dsn, events, DEFAULT_FIRST_ATTEMPTS, keys=keys[name]
                    )
                    rates[name].append(done / seconds)
                    log(
                        f"webhook_ordering run {run + 1}: {name} {done / seconds:,.0f} deliveries/s"
                    )
    figures = {name: Figure.of(values, "deliveries/s") for name, values in rates.items()}
    return {
        "events": events,
        **{f"{name}_per_s": figure for name, figure in figures.items()},
        "ordered_vs_keyless": ratio(figures["library_ordered_100_keys"], figures["library"]),
        "by_retry_lane": webhooks.retry_lane_share(),
        "variant": (
            f"WebhookWorkers.run(drain=True), first_attempts={DEFAULT_FIRST_ATTEMPTS}, pool"
            f" {pool_size}, one endpoint; ordered: event n has the key k(n % {webhooks.ORDERING_KEYS})"
        ),
    }


def section(r: Any, cell: Callable[[Any, str], str]) -> list[str]:  # noqa: ANN401
    """The report's section (bench/report.py)."""
    return [
        "## Webhook ordering keys: the cost",
        "",
        f"{cell(r, 'webhook_ordering.events')} events per run; {cell(r, 'webhook_ordering.variant')}.",
        "",
        "| drain | deliveries/s |",
        "| --- | --- |",
        f"| keyless | {cell(r, 'webhook_ordering.library_per_s')} |",
        f"| 100 ordering keys | {cell(r, 'webhook_ordering.library_ordered_100_keys_per_s')} |",
        "",
        (
            f"Ordered against keyless, run by run: {cell(r, 'webhook_ordering.ordered_vs_keyless')};"
            f" deliveries sent by the retry lane per ordered run:"
            f" {cell(r, 'webhook_ordering.by_retry_lane')}."
        ),
        "",
    ]
