"""Webhooks end to end: the naive loop a user would write vs the library's webhook workers, both
POSTing signed events to the same local HTTP receiver in its own process.

- ``naive``: ``httpx.post(url, content=body, headers=signed_headers)`` per event, in sequence:
  the synchronous module-level function, so a new ``httpx.Client`` (and a new connection) for
  every request. Each body is the library's own encoding of the event (:func:`event_body`) and each
  request is signed with the Standard Webhooks headers (:func:`webhook_headers`), as the library
  does. No database at all.
- ``naive_async``: the same with ``async with httpx.AsyncClient() as client: await
  client.post(...)`` per event (a new client and connection each time).
- ``library``: N events written to the webhook outbox (one endpoint subscribed) BEFORE the clock
  starts; the clock runs from ``WebhookWorkers.run(drain=True)`` until it returns, i.e. until every
  delivery is dispatched: the drainer claims the events 20 at a time and fans each claimed batch
  out in one transaction (the rows' fenced marks, their events, their deliveries born leased), the deliveries' first attempts run in this
  process, up to 32 at once (the default), each loading its target, signing, POSTing and writing
  its fenced mark; the retry lane then finds nothing due. A crash repeats at most the first
  attempts in flight (32) plus the one retry row in flight.
- ``library_one_in_flight``: ``WebhookWorkers(first_attempts=1)``: one first attempt at a time;
  a crash repeats at most 1 first attempt plus the one retry row in flight.
- ``library_per_row_fan_out``: ``library`` with the drainer one row at a time
  (``drain_lane(rows_in_flight=1)``): one fan-out transaction per event, the drainer as it was
  before the batched fan-out; the "before" beside ``library``'s "after", in the same run.
- ``library_ordered_100_keys``: ``library`` with every event enqueued with an ordering key, 100
  keys in turn (``enqueue_webhook(..., ordering_key=)``, ADR 0018): a delivery is not attempted
  while an earlier one of its (endpoint, key) is pending, so a delivery whose key's previous one
  is still in flight is born waiting and goes out through the retry lane's keyed claim once that
  one is dispatched. Beside ``library`` (keyless): the cost of the order.
- ``library_1000_tenants``: ``library`` with 999 endpoints of 999 other tenants subscribed to the
  same type beside the one (added before the clock starts, removed after): each event still goes
  to its own tenant's one endpoint, so the fan-out picks it among 1,000 (ADR 0017, "Tenants").
  Beside ``library``: the cost of many tenants.
- ``reused_client``: a diagnostic: the naive loop with ONE ``httpx.Client`` for all the requests
  (keep-alive), in sequence, no database.
- ``sender_only``: a diagnostic: the library's ``HttpxWebhookSender`` alone, 32 POSTs in flight,
  bodies and headers made before the clock starts, no database. The gap between it and
  ``library`` is what the fan-out, the per-delivery target load, the marks and the runtime cost.

Each run checks the receiver answered exactly N requests; for the library, that every delivery row
ended ``dispatched`` with ``attempts = 1`` (no first attempt was handed to the retry lane, except,
with ordering keys, the deliveries born waiting, each claimed once) and every outbox row
``dispatched``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from bench.library import DRAIN_POLL, connection_budget
from bench.receiver_process import ReceiverProcess
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, ratio, rotation
from outbox_adapters.http import DestinationGuard, HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.postgres.webhooks import (
    WebhookRepository,
    enqueue_webhook_async,
    event_body,
)
from outbox_adapters.runtime.born import DEFAULT_FIRST_ATTEMPTS
from outbox_core.outcomes import OutcomeKind
from outbox_core.signing import WebhookSecret, webhook_headers

__all__ = ["library_drain", "load_events", "measure", "retry_lane_share", "verify_deliveries"]

EVENT_TYPE: Final = "invoice.paid"
#: Seconds one naive request may take (httpx's own default is 5).
NAIVE_TIMEOUT: Final = 10.0
#: The ordering keys of ``library_ordered_100_keys``, used in turn.
ORDERING_KEYS: Final = 100
#: The tenants of ``library_1000_tenants`` (the events' own, ``acme``, among them).
TENANTS: Final = 1000
#: The pool of the library's workers: the size ``outbox worker --lane webhooks`` opens.
POOL_SIZE: Final = 12
GUARD: Final = DestinationGuard(allow=("127.0.0.0/8",), require_https=False)

_TRUNCATE: Final = (
    "TRUNCATE outbox_webhook_delivery, outbox_webhook_event, outbox_webhook RESTART IDENTITY"
)
_DELIVERIES: Final = (
    "SELECT status, attempts, count(*) FROM outbox_webhook_delivery GROUP BY 1, 2 ORDER BY 1, 2"
)
_OUTBOX: Final = "SELECT status, count(*) FROM outbox_webhook GROUP BY 1 ORDER BY 1"


def _data(number: int) -> dict[str, Any]:
    return {"invoice": f"in_{number:08d}", "amount_cents": 1200, "currency": "EUR"}


def _signed(secret: WebhookSecret, number: int, prefix: str) -> tuple[bytes, dict[str, str]]:
    """One event's body (the library's encoding) and its signed headers, made now."""
    body = event_body(EVENT_TYPE, datetime.now(UTC), _data(number))
    headers = webhook_headers(
        [secret], msg_id=f"msg_{prefix}{number:08d}", timestamp=int(time.time()), body=body
    )
    return body, {"content-type": "application/json", **headers}


def _naive(url: str, secret: WebhookSecret, events: int) -> tuple[int, float]:
    started = time.perf_counter()
    for number in range(events):
        body, headers = _signed(secret, number, "naive")
        response = httpx.post(url, content=body, headers=headers, timeout=NAIVE_TIMEOUT)
        response.raise_for_status()
    return events, time.perf_counter() - started


async def _naive_async(url: str, secret: WebhookSecret, events: int) -> tuple[int, float]:
    started = time.perf_counter()
    for number in range(events):
        body, headers = _signed(secret, number, "naiveasync")
        async with httpx.AsyncClient(timeout=NAIVE_TIMEOUT) as client:
            response = await client.post(url, content=body, headers=headers)
        response.raise_for_status()
    return events, time.perf_counter() - started


def _reused_client(url: str, secret: WebhookSecret, events: int) -> tuple[int, float]:
    started = time.perf_counter()
    with httpx.Client(timeout=NAIVE_TIMEOUT) as client:
        for number in range(events):
            body, headers = _signed(secret, number, "reused")
            client.post(url, content=body, headers=headers).raise_for_status()
    return events, time.perf_counter() - started


async def _sender_only(url: str, secret: WebhookSecret, events: int) -> tuple[int, float]:
    requests = [_signed(secret, number, "sender") for number in range(events)]
    slots = asyncio.Semaphore(DEFAULT_FIRST_ATTEMPTS)
    budget = timedelta(seconds=NAIVE_TIMEOUT)

    async with HttpxWebhookSender(GUARD) as sender:

        async def one(body: bytes, headers: dict[str, str]) -> bool:
            async with slots:
                outcome = await sender.send(url, headers=headers, body=body, budget=budget)
            return outcome.kind is OutcomeKind.SENT

        started = time.perf_counter()
        sent = await asyncio.gather(*(one(body, headers) for body, headers in requests))
        elapsed = time.perf_counter() - started
    if not all(sent):
        raise RuntimeError(f"webhooks sender_only: {sent.count(False)} requests not sent")
    return events, elapsed


async def load_events(dsn: str, events: int, keys: int | None = None) -> None:
    """Empty the webhook tables (the endpoint stays) and write ``events`` events, one transaction;
    with ``keys``, event ``n`` has the ordering key ``k{n % keys}``."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(_TRUNCATE)
        async with conn.transaction():
            for number in range(events):
                key = None if keys is None else f"k{number % keys}"
                await enqueue_webhook_async(
                    conn, EVENT_TYPE, _data(number), ordering_key=key, notify=False, tenant="acme"
                )
        await conn.execute("VACUUM ANALYZE outbox_webhook")


#: Per library variant, how many deliveries each run sent through the retry lane (born waiting).
_RETRY_LANE_SHARE: dict[str, list[int]] = {}


def retry_lane_share() -> dict[str, list[int]]:
    """Per ordered library variant, the deliveries each run sent through the retry lane."""
    return {
        what: list(counts) for what, counts in _RETRY_LANE_SHARE.items() if "keys=None" not in what
    }


async def verify_deliveries(pool: AsyncConnectionPool[Any], events: int, what: str) -> None:
    async with pool.connection() as conn:
        deliveries = await (await conn.execute(_DELIVERIES)).fetchall()
        outbox = await (await conn.execute(_OUTBOX)).fetchall()
    if deliveries != [("dispatched", 1, events)]:
        raise RuntimeError(
            f"webhooks {what}: deliveries by (status, attempts) {deliveries},"
            f" expected [('dispatched', 1, {events})]"
        )
    if outbox != [("dispatched", events)]:
        raise RuntimeError(f"webhooks {what}: outbox rows {outbox}, expected all dispatched")


async def _other_tenants(pool: AsyncConnectionPool[Any], url: str, *, add: bool) -> None:
    """Add (or remove) one endpoint of each of ``TENANTS - 1`` other tenants, subscribed to the
    events' type, beside ``acme``'s."""
    async with pool.connection() as conn, conn.transaction():
        if not add:
            await conn.execute(
                "DELETE FROM outbox_webhook_secret WHERE endpoint_id IN"
                " (SELECT id FROM outbox_webhook_endpoint WHERE tenant <> 'acme')"
            )
            await conn.execute("DELETE FROM outbox_webhook_endpoint WHERE tenant <> 'acme'")
            return
        await conn.execute(
            "INSERT INTO outbox_webhook_endpoint (tenant, url, event_types)"
            " SELECT 'tenant-' || n, %s, ARRAY[%s] FROM generate_series(1, %s) AS n",
            (url, EVENT_TYPE, TENANTS - 1),
        )
    async with pool.connection() as conn:
        await conn.execute("ANALYZE outbox_webhook_endpoint")


async def library_drain(  # noqa: PLR0913 - one drain and its variant's options
    pool: AsyncConnectionPool[Any],
    dsn: str,
    events: int,
    first_attempts: int,
    *,
    per_row: bool = False,
    keys: int | None = None,
) -> tuple[int, float]:
    await load_events(dsn, events, keys)
    # per_row: the drainer one row at a time, one fan-out transaction per row (before ADR 0017's
    # batched fan-out); else the default: a claimed batch fanned out in one transaction.
    drain = drain_lane(poll_interval=DRAIN_POLL, **({"rows_in_flight": 1} if per_row else {}))
    async with HttpxWebhookSender(GUARD) as sender:
        workers = WebhookWorkers(
            pool,
            sender,
            drain_config=drain,
            delivery_config=delivery_lane(poll_interval=DRAIN_POLL),
            first_attempts=first_attempts,
        )
        started = time.perf_counter()
        stats = await workers.run(drain=True)
        elapsed = time.perf_counter() - started
    what = f"library first_attempts={first_attempts} per_row={per_row} keys={keys}"
    # Keyless, every delivery goes out on its first attempt in-process; with keys, those born
    # waiting behind their key's previous delivery go out through the retry lane's claim.
    by_retry_lane = stats.retries.dispatched if keys is not None else 0
    if stats.first_attempts.dispatched + by_retry_lane != events or (
        keys is None and stats.retries.dispatched
    ):
        raise RuntimeError(
            f"webhooks {what}: first attempts dispatched {stats.first_attempts.dispatched},"
            f" retries {stats.retries.dispatched}; expected {events} in all"
        )
    _RETRY_LANE_SHARE.setdefault(what, []).append(by_retry_lane)
    await verify_deliveries(pool, events, what)
    return events, elapsed


async def measure(
    server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    with fresh_database(server_dsn, "webhooks") as dsn:
        return await _measure(dsn, sizes, runs, log)


def _drains(
    pool: AsyncConnectionPool[Any], dsn: str, url: str, secret: WebhookSecret, events: int
) -> dict[str, Callable[[], Awaitable[tuple[int, float]]]]:
    """Every client of the comparison, each a drain of ``events`` deliveries to ``url``."""

    async def naive() -> tuple[int, float]:
        return _naive(url, secret, events)

    async def naive_async() -> tuple[int, float]:
        return await _naive_async(url, secret, events)

    async def library() -> tuple[int, float]:
        return await library_drain(pool, dsn, events, DEFAULT_FIRST_ATTEMPTS)

    async def library_one_in_flight() -> tuple[int, float]:
        return await library_drain(pool, dsn, events, 1)

    async def library_per_row_fan_out() -> tuple[int, float]:
        return await library_drain(pool, dsn, events, DEFAULT_FIRST_ATTEMPTS, per_row=True)

    async def library_ordered_100_keys() -> tuple[int, float]:
        return await library_drain(pool, dsn, events, DEFAULT_FIRST_ATTEMPTS, keys=ORDERING_KEYS)

    async def library_1000_tenants() -> tuple[int, float]:
        await _other_tenants(pool, url, add=True)
        try:
            return await library_drain(pool, dsn, events, DEFAULT_FIRST_ATTEMPTS)
        finally:
            await _other_tenants(pool, url, add=False)

    async def reused_client() -> tuple[int, float]:
        return _reused_client(url, secret, events)

    async def sender_only() -> tuple[int, float]:
        return await _sender_only(url, secret, events)

    return {
        "naive": naive,
        "naive_async": naive_async,
        "library": library,
        "library_one_in_flight": library_one_in_flight,
        "library_per_row_fan_out": library_per_row_fan_out,
        "library_ordered_100_keys": library_ordered_100_keys,
        "library_1000_tenants": library_1000_tenants,
        "reused_client": reused_client,
        "sender_only": sender_only,
    }


async def _measure(dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    events = sizes.webhook_events
    secret = WebhookSecret.generate_from(secrets.token_bytes(32))
    pool_size = min(POOL_SIZE, connection_budget(dsn))
    with ReceiverProcess() as receiver:
        url = receiver.url
        async with AsyncConnectionPool(
            dsn,
            min_size=pool_size,
            max_size=pool_size,
            kwargs={"autocommit": True},
            open=False,
            name="bench-webhooks",
        ) as pool:
            await pool.wait(timeout=30.0)
            await WebhookRepository(pool).add_endpoint(
                url, [EVENT_TYPE], secret=secret.to_text(), tenant="acme"
            )

            drains = _drains(pool, dsn, url, secret, events)
            rates: dict[str, list[float]] = {key: [] for key in drains}
            connections: dict[str, int] = {}
            for run in range(runs):
                for key in rotation(drains, run):
                    before, opened_before = receiver.counts()
                    done, seconds = await drains[key]()
                    after, opened_after = receiver.counts()
                    if after - before != events:
                        raise RuntimeError(
                            f"webhooks {key}: the receiver answered {after - before} requests,"
                            f" expected {events}"
                        )
                    connections[key] = opened_after - opened_before
                    rates[key].append(done / seconds)
                    log(
                        f"webhooks run {run + 1}: {key} {done / seconds:,.0f} deliveries/s"
                        f" ({opened_after - opened_before} connections)"
                    )
    figures = {key: Figure.of(values, "deliveries/s") for key, values in rates.items()}
    naive_fig = figures["naive"]
    return {
        "events": events,
        **{f"{key}_per_s": figure for key, figure in figures.items()},
        "ratio": ratio(figures["library"], naive_fig),
        "one_in_flight_ratio": ratio(figures["library_one_in_flight"], naive_fig),
        "per_row_fan_out_ratio": ratio(figures["library_per_row_fan_out"], naive_fig),
        "ordered_ratio": ratio(figures["library_ordered_100_keys"], naive_fig),
        "tenants_1000_ratio": ratio(figures["library_1000_tenants"], naive_fig),
        "batched_vs_per_row": ratio(figures["library"], figures["library_per_row_fan_out"]),
        "ordered_vs_keyless": ratio(figures["library_ordered_100_keys"], figures["library"]),
        "tenants_1000_vs_one": ratio(figures["library_1000_tenants"], figures["library"]),
        "ordered_by_retry_lane": retry_lane_share(),
        "naive_async_ratio": ratio(figures["naive_async"], naive_fig),
        "reused_client_ratio": ratio(figures["reused_client"], naive_fig),
        "sender_only_ratio": ratio(figures["sender_only"], naive_fig),
        "connections_last_run": connections,
        "duplicate_window": {
            "library": f"a crash repeats at most the first attempts in flight"
            f" ({DEFAULT_FIRST_ATTEMPTS}) plus the one retry row in flight",
            "library_one_in_flight": "a crash repeats at most 1 first attempt plus the one retry"
            " row in flight",
            "library_per_row_fan_out": "the same as library (the fan-out writes nothing twice"
            " either way)",
            "library_ordered_100_keys": "the same as library",
            "library_1000_tenants": "the same as library",
            "naive": "none recorded: no database, so nothing is repeated and nothing is resumed"
            " after a crash",
            "naive_async": "the same",
            "reused_client": "none recorded",
            "sender_only": "none recorded",
        },
        "variant": {
            "naive": "httpx.post per event (sync; a new client and connection each time)",
            "naive_async": "httpx.AsyncClient() per event (a new client and connection each time)",
            "library": f"WebhookWorkers.run(drain=True), first_attempts={DEFAULT_FIRST_ATTEMPTS}"
            f" (default), drain and retry lanes at their defaults, leader lease off, pool"
            f" {pool_size}, HttpxWebhookSender (keep-alive)",
            "library_one_in_flight": "the same with first_attempts=1",
            "library_per_row_fan_out": "the same with the drainer one row at a time"
            " (drain_lane(rows_in_flight=1)): one fan-out transaction per event, as before the"
            " batched fan-out",
            "library_ordered_100_keys": f"the same as library, every event with an ordering key"
            f" ({ORDERING_KEYS} keys in turn); deliveries born waiting go out by the retry lane",
            "library_1000_tenants": f"the same as library, beside {TENANTS - 1} endpoints of"
            f" {TENANTS - 1} other tenants subscribed to the same type (events: one tenant's)",
            "reused_client": "one httpx.Client for every request, in sequence (diagnostic)",
            "sender_only": f"HttpxWebhookSender alone, {DEFAULT_FIRST_ATTEMPTS} in flight,"
            " requests signed before the clock starts, no database (diagnostic)",
            "receiver": "asyncio HTTP/1.1 server answering 204 keep-alive, in its own process"
            " (multiprocessing, spawn)",
        },
        "goal": "ratio >= 10",
    }
