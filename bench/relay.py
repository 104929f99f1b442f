"""The event relay and (``bench/consumer.py``) the e-mail consumer channel, on a real NATS
JetStream server in its own process.

Relay (issue 11 item 7: goal library / bare >= 0.8x):

- ``bare``: the loop a user would write with nats-py: ``await js.publish(subject, body,
  headers=..., timeout=5)`` per event, in sequence, each awaiting its PubAck; the same envelopes
  (body = the CloudEvents JSON, the relay's ``content-type`` / ``ce-*`` headers, ``Nats-Msg-Id`` =
  the event id) on the same broker and stream. Connected before the clock starts; no database.
- ``library``: N events written to the event outbox (``publish_async``) BEFORE the clock
  starts; the clock runs over ``Worker(PostgresStore(pool, table=outbox_event),
  RelayHandler(publisher), relay_lane()).run(drain=True)`` with the relay's defaults: the
  per-key-ordered claim (batch 500), the batch published in windows of 500 (rows of one key one
  after the other, each awaiting its PubAck), one grouped fenced mark per window recording
  ``published_at``. A crash repeats at most one window (ADR 0023).
- ``library_strict``: the same with ``RelayTiming(batch_size=50, window=1)``: one publish awaited
  at a time and one committed mark per row. A crash repeats at most 1 row.
- ``bare_in_flight``: a diagnostic: the bare loop with 8 publishes awaiting their PubAck at once.
- ``publisher_only``: a diagnostic: the library's ``NatsPublisher`` alone, one publish awaited at a
  time, messages built before the clock starts, no database: the adapter's cost over nats-py.
- ``store_only``: a diagnostic: ``library`` with a no-op handler instead of the publish: what the
  claim, the grouped marks and the runtime cost alone.

Events carry one of 50 partition keys in turn (several events per key, as a tenant's lifecycle
has). Every run publishes fresh event ids (JetStream would drop a repeated ``Nats-Msg-Id`` within
its duplicate window, which is cheaper than storing it) and checks that the stream stored exactly
N new messages; the library's runs also that every row ended ``dispatched`` after one attempt.

Consumer to e-mail: ``bench/consumer.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Final

import nats
import psycopg
from psycopg_pool import AsyncConnectionPool

from bench.consumer import measure_consumer
from bench.cpu import CpuShares, cpu_figures
from bench.events import IN_FLIGHT, KEYS, PUBLISH_SECONDS, TRUNCATE, nats_headers, new_events
from bench.library import DRAIN_POLL, connection_budget, noop_handler
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, ratio, rotation
from outbox_adapters.brokers import NatsBroker
from outbox_adapters.brokers.embedded import find_nats
from outbox_adapters.lanes.relay import RelayHandler, event_message, relay_lane
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.events import outbox_event, publish_async
from outbox_adapters.runtime import Worker
from outbox_core.brokers import StreamSpec
from outbox_core.events import EventEnvelope
from outbox_core.outcomes import OutcomeKind
from outbox_core.ports import BrokerMessage, RowHandler
from outbox_core.timing import DEFAULT_RELAY_TIMING, RelayTiming

__all__ = ["measure"]

TOPIC: Final = "bench-relay-events"
STREAM: Final = StreamSpec(name="BENCH_RELAY_EVENTS", subjects=(TOPIC,))
#: The strict relay: one publish and one committed mark at a time.
STRICT: Final = RelayTiming(batch_size=50, window=1)
_EVENT_ROWS: Final = "SELECT status, attempts, count(*) FROM outbox_event GROUP BY 1, 2"


async def _stored(js: Any, stream: str) -> int:  # noqa: ANN401 - nats-py's JetStreamContext
    info = await js.stream_info(stream)
    return int(info.state.messages)


async def _bare(
    js: Any,  # noqa: ANN401 - nats-py's JetStreamContext
    messages: list[BrokerMessage],
    in_flight: int,
    cpu: CpuShares,
) -> float:
    slots = asyncio.Semaphore(in_flight)

    async def one(message: BrokerMessage) -> None:
        async with slots:
            await js.publish(
                message.subject,
                message.body,
                timeout=PUBLISH_SECONDS,
                headers=nats_headers(message),
            )

    cpu.start()
    started = time.perf_counter()
    if in_flight == 1:
        for message in messages:
            await js.publish(
                message.subject,
                message.body,
                timeout=PUBLISH_SECONDS,
                headers=nats_headers(message),
            )
    else:
        await asyncio.gather(*(one(message) for message in messages))
    elapsed = time.perf_counter() - started
    cpu.stop()
    return elapsed


async def _publisher_only(
    broker: NatsBroker, messages: list[BrokerMessage], cpu: CpuShares
) -> float:
    publisher = broker.publisher()
    budget = timedelta(seconds=PUBLISH_SECONDS)
    cpu.start()
    started = time.perf_counter()
    for message in messages:
        outcome = await publisher.publish(message, budget=budget)
        if outcome.kind is not OutcomeKind.SENT:
            raise RuntimeError(f"relay publisher_only: {outcome}")
    elapsed = time.perf_counter() - started
    cpu.stop()
    return elapsed


async def _load(dsn: str, events: list[EventEnvelope]) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(TRUNCATE)
        async with conn.transaction():
            for event in events:
                await publish_async(
                    conn,
                    topic=TOPIC,
                    key=event.key,
                    type=event.type,
                    source=event.source,
                    data=event.data,
                    event_id=event.id,
                    time=event.time,
                    notify=False,
                )
        await conn.execute("VACUUM ANALYZE outbox_event")


async def _library(
    pool: AsyncConnectionPool[Any],
    broker: NatsBroker | None,
    events: int,
    timing: RelayTiming,
    cpu: CpuShares,
) -> float:
    """The relay's drain of ``events`` loaded rows; ``broker`` None: a no-op handler instead of
    the publish (the claim, the marks and the runtime alone)."""
    config = relay_lane(poll_interval=DRAIN_POLL, timing=timing)
    store = PostgresStore(pool, table=outbox_event)
    handler: RowHandler = noop_handler if broker is None else RelayHandler(broker.publisher())
    try:
        worker = Worker(store, handler, config)
        cpu.start()
        started = time.perf_counter()
        stats = await worker.run(drain=True)
        elapsed = time.perf_counter() - started
        cpu.stop()
    finally:
        await store.close()  # the connection the store kept goes back to the pool
    async with pool.connection() as conn:
        rows = await (await conn.execute(_EVENT_ROWS)).fetchall()
    if stats.dispatched != events or rows != [("dispatched", 1, events)]:
        raise RuntimeError(
            f"relay library window={timing.window}: dispatched {stats.dispatched}, rows by"
            f" (status, attempts) {rows}; expected {events} dispatched once"
        )
    return elapsed


async def measure(
    server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    with (
        fresh_database(server_dsn, "relay") as dsn,
        find_nats(env="OUTBOX_BENCH_NATS_URL") as found,
    ):
        relay = await _measure_relay(dsn, found.url, sizes.relay_events, runs, log)
        consumer = await measure_consumer(dsn, found.url, sizes.consumer_events, runs, log)
        return {
            **relay,
            **consumer,
            "broker": f"nats-server -js ({found.source}, its own process, file store)"
            f" at {found.url}",
            "goal": "ratio (library / bare) >= 0.8",
        }


async def _measure_relay(  # noqa: C901 - one closure per variant
    dsn: str, url: str, events: int, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    broker = NatsBroker([url], streams=[STREAM])
    client = await nats.connect(url)
    js = client.jetstream(timeout=PUBLISH_SECONDS)
    pool_size = min(4, connection_budget(dsn))
    try:
        await broker.jetstream()  # connected and the stream declared before any clock starts
        async with AsyncConnectionPool(
            dsn,
            min_size=pool_size,
            max_size=pool_size,
            kwargs={"autocommit": True},
            open=False,
            name="bench-relay",
        ) as pool:
            await pool.wait(timeout=30.0)
            counter = iter(range(1_000_000))
            cpu = CpuShares("postgres", "nats-server")

            def fresh() -> list[EventEnvelope]:
                return new_events(f"run{next(counter)}", events)

            async def bare() -> float:
                return await _bare(js, [event_message(TOPIC, e) for e in fresh()], 1, cpu)

            async def bare_in_flight() -> float:
                return await _bare(js, [event_message(TOPIC, e) for e in fresh()], IN_FLIGHT, cpu)

            async def publisher_only() -> float:
                return await _publisher_only(
                    broker, [event_message(TOPIC, e) for e in fresh()], cpu
                )

            async def library() -> float:
                await _load(dsn, fresh())
                return await _library(pool, broker, events, DEFAULT_RELAY_TIMING, cpu)

            async def library_strict() -> float:
                await _load(dsn, fresh())
                return await _library(pool, broker, events, STRICT, cpu)

            async def store_only() -> float:
                await _load(dsn, fresh())
                return await _library(pool, None, events, DEFAULT_RELAY_TIMING, cpu)

            variants: dict[str, Callable[[], Awaitable[float]]] = {
                "bare": bare,
                "library": library,
                "library_strict": library_strict,
                "bare_in_flight": bare_in_flight,
                "publisher_only": publisher_only,
                "store_only": store_only,
            }
            rates: dict[str, list[float]] = {key: [] for key in variants}
            shares: dict[str, list[dict[str, float | None]]] = {key: [] for key in variants}
            for run in range(runs):
                for key in rotation(variants, run):
                    before = await _stored(js, STREAM.name)
                    seconds = await variants[key]()
                    stored = await _stored(js, STREAM.name) - before
                    if stored != (0 if key == "store_only" else events):
                        raise RuntimeError(
                            f"relay {key}: the stream stored {stored} messages, expected {events}"
                        )
                    rates[key].append(events / seconds)
                    shares[key].append(cpu.per_event(events, seconds))
                    log(f"relay run {run + 1}: {key} {events / seconds:,.0f} events/s")
    finally:
        await client.close()
        await broker.aclose()
    figures = {key: Figure.of(values, "events/s") for key, values in rates.items()}
    bare_fig = figures["bare"]
    return {
        "events": events,
        **{f"{key}_per_s": figure for key, figure in figures.items()},
        "ratio": ratio(figures["library"], bare_fig),
        "strict_ratio": ratio(figures["library_strict"], bare_fig),
        "library_vs_bare_in_flight": ratio(figures["library"], figures["bare_in_flight"]),
        "bare_in_flight_ratio": ratio(figures["bare_in_flight"], bare_fig),
        "publisher_only_ratio": ratio(figures["publisher_only"], bare_fig),
        "store_only_ratio": ratio(figures["store_only"], bare_fig),
        "cpu_per_event": {key: cpu_figures(runs) for key, runs in shares.items()},
        "variant": {
            "bare": "nats-py js.publish per event, each PubAck awaited, in sequence; same"
            " envelopes, headers and Nats-Msg-Id; no database",
            "library": "Worker + RelayHandler on outbox_event with relay_lane()'s defaults:"
            f" batch {DEFAULT_RELAY_TIMING.batch_size} published in windows of"
            f" {DEFAULT_RELAY_TIMING.window} (rows of one key one after the other), one grouped"
            f" mark per window, leader lease off, pool {pool_size} (a crash repeats at most one"
            " window, dropped by JetStream's duplicate window)",
            "library_strict": f"the same with RelayTiming(batch_size={STRICT.batch_size},"
            " window=1): one publish and one committed mark at a time (a crash repeats at most 1"
            " row)",
            "bare_in_flight": f"the bare loop with {IN_FLIGHT} publishes awaiting their PubAck at"
            " once (diagnostic)",
            "publisher_only": "the library's NatsPublisher alone, one publish awaited at a time,"
            " no database (diagnostic)",
            "store_only": "library with a no-op handler instead of the publish: the per-key"
            " claim, the grouped marks and the runtime alone (diagnostic)",
            "keys": f"{KEYS} partition keys in turn",
        },
    }
