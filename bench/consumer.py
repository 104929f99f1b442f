"""The e-mail consumer channel against its e-mail lane alone, on the relay's NATS JetStream server.

Consumer to e-mail: N ``tenant.provisioned`` events already on a stream of their own (published
before the clock starts); the clock runs from ``EmailChannelWorkers.run()`` (group
``notification-email`` and the worker of its e-mail lane, 8 rows in flight, marks grouped, 8 SMTP
sessions) until the STARTTLS sink, in its own process, has accepted the 2N e-mails
(``tenant_welcome`` + ``owner_notify`` per event). Reported as events/s.

Baseline: the e-mail lane alone (``_email_lane_once``), the same number of e-mails written before
the clock starts, the same worker settings and sink, run in turn with the channel.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

import nats
import psycopg
from psycopg_pool import AsyncConnectionPool

from bench import rows
from bench.cpu import CpuShares, cpu_figures
from bench.events import IN_FLIGHT, PUBLISH_SECONDS, TRUNCATE, nats_headers, new_events
from bench.library import connection_budget, drain_library, lane_config
from bench.sink_process import SinkProcess
from bench.stats import Figure, ratio
from outbox_adapters.brokers import NatsBroker
from outbox_adapters.clock import SystemClock
from outbox_adapters.lanes.channel_workers import ChannelTiming, EmailChannelWorkers
from outbox_adapters.lanes.email import EmailHandler
from outbox_adapters.lanes.email_channel import (
    EMAIL_CHANNEL_GROUP,
    email_channel_lane,
    platform_recipes,
)
from outbox_adapters.lanes.relay import event_message
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.brokers import StreamSpec
from outbox_core.timing import EmailTiming
from outbox_core.tls import SmtpSecurityPolicy

__all__ = ["measure_consumer"]

#: Rows per claim of the consumer's e-mail lane (as bench/smtp_e2e.py).
BATCH: Final = 50
SENDER: Final = "bench@bench.example"
OWNER: Final = "owner@bench.example"
#: The e-mail worker's sleep after a short claim: the consumer writes rows as events arrive.
CONSUMER_POLL: Final = 0.01


def _smtp(sink: SinkProcess) -> SmtpSettings:
    return SmtpSettings(
        host="127.0.0.1",
        port=sink.port,
        policy=SmtpSecurityPolicy(sender=SENDER),
        tls_context=sink.client_context(),
        max_sessions=IN_FLIGHT,
    )


async def _consume_once(  # noqa: PLR0913 - keyword-only, one argument per part of the run
    dsn: str,
    url: str,
    sink: SinkProcess,
    *,
    run: int,
    events: int,
    cpu: CpuShares,
) -> float:
    topic = f"bench-consume-{run}"
    spec = StreamSpec(name=f"BENCH_CONSUME_{run}", subjects=(topic,))
    broker = NatsBroker([url], streams=[spec])
    client = await nats.connect(url)
    js = client.jetstream(timeout=PUBLISH_SECONDS)
    try:
        await broker.jetstream()
        for event in new_events(f"consume{run}", events):
            message = event_message(topic, event)
            await js.publish(topic, message.body, headers=nats_headers(message))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(TRUNCATE)
        pool_size = min(6, connection_budget(dsn))
        async with (
            AsyncConnectionPool(
                dsn,
                min_size=pool_size,
                max_size=pool_size,
                kwargs={"autocommit": True},
                open=False,
                name="bench-consume",
            ) as pool,
            SmtpMailer(_smtp(sink)) as mailer,
        ):
            await pool.wait(timeout=30.0)
            workers = EmailChannelWorkers(
                pool,
                broker.consumer(EMAIL_CHANNEL_GROUP, [topic]),
                broker.publisher(),
                mailer,
                sender=SENDER,
                recipes=platform_recipes("https://app.bench.example", OWNER),
                lane_config=email_channel_lane(
                    timing=EmailTiming(batch_size=BATCH),
                    poll_interval=CONSUMER_POLL,
                    rows_in_flight=IN_FLIGHT,
                    group_marks=True,
                ),
            )
            before = sink.count()
            cpu.start()
            started = time.perf_counter()
            task = asyncio.create_task(workers.run())
            try:
                while sink.count() - before < 2 * events:
                    if task.done():
                        await task
                        raise RuntimeError("relay consumer: the channel stopped early")
                    await asyncio.sleep(0.01)
                elapsed = time.perf_counter() - started
                cpu.stop()
            finally:
                workers.request_stop()
                await asyncio.gather(task, return_exceptions=True)
        received = sink.count() - before
        if received != 2 * events:
            raise RuntimeError(
                f"relay consumer: the sink received {received}, expected {2 * events}"
            )
        return elapsed
    finally:
        await client.close()
        await broker.aclose()


async def _email_lane_once(dsn: str, sink: SinkProcess, *, emails: int, cpu: CpuShares) -> float:
    """The e-mail lane alone on the same sink and settings as the channel's lane: ``emails`` rows
    written before the clock starts, drained by one worker (batch, rows in flight, grouped marks
    and SMTP sessions as the channel's); the seconds until every row is marked."""
    rows.reset(dsn)
    rows.load_pending(dsn, emails)
    async with SmtpMailer(_smtp(sink)) as mailer:
        handler = EmailHandler(mailer, sender=SENDER, clock=SystemClock())
        done, seconds = await drain_library(
            dsn,
            workers=1,
            config=lane_config(BATCH, rows_in_flight=IN_FLIGHT, group_marks=True),
            pool=min(6, connection_budget(dsn)),
            handler=handler,
            cpu=cpu,
        )
    if done != emails:
        raise RuntimeError(f"relay consumer baseline: {done} e-mails sent, expected {emails}")
    rows.verify_drain(dsn, emails, what="relay consumer baseline (the e-mail lane alone)")
    return seconds


async def measure_consumer(
    dsn: str, url: str, events: int, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    rates: list[float] = []
    lane_rates: list[float] = []
    cpu = CpuShares("postgres", "nats-server")
    shares: dict[str, list[dict[str, float | None]]] = {"channel": [], "lane": []}
    with SinkProcess() as sink:
        for run in range(runs):
            # The two in turn, so a shared machine's load falls on both alike.
            order = ("channel", "lane") if run % 2 == 0 else ("lane", "channel")
            for which in order:
                if which == "channel":
                    seconds = await _consume_once(dsn, url, sink, run=run, events=events, cpu=cpu)
                    rates.append(events / seconds)
                    shares["channel"].append(cpu.per_event(2 * events, seconds))
                    log(
                        f"relay consumer run {run + 1}: {events / seconds:,.0f} events/s"
                        f" ({2 * events / seconds:,.0f} e-mails/s)"
                    )
                else:
                    seconds = await _email_lane_once(dsn, sink, emails=2 * events, cpu=cpu)
                    lane_rates.append(2 * events / seconds)
                    shares["lane"].append(cpu.per_event(2 * events, seconds))
                    log(
                        f"relay consumer run {run + 1}: the e-mail lane alone"
                        f" {2 * events / seconds:,.0f} e-mails/s"
                    )
    figure = Figure.of(rates, "events/s")
    emails = Figure.of([2 * r for r in rates], "e-mails/s")
    lane = Figure.of(lane_rates, "e-mails/s")
    return {
        "consumer_events": events,
        "consumer_email_events_per_s": figure,
        "consumer_emails_per_s": emails,
        "email_lane_alone_emails_per_s": lane,
        "consumer_vs_email_lane": ratio(emails, lane),
        "consumer_cpu_per_email": {key: cpu_figures(runs) for key, runs in shares.items()},
        "consumer_variant": "EmailChannelWorkers (group notification-email, ChannelTiming"
        f" defaults: {ChannelTiming().in_flight} deliveries handled at once) + its e-mail lane's"
        f" worker: batch {BATCH}, rows_in_flight={IN_FLIGHT}, group_marks,"
        f" poll {CONSUMER_POLL * 1000:g} ms, {IN_FLIGHT} SMTP sessions; 2 e-mails per event"
        " (tenant_welcome, owner_notify) to a STARTTLS sink in its own process; the events"
        " published before the clock starts. Baseline: the e-mail lane alone, the same number"
        " of e-mails written before the clock starts, the same worker settings and sink, run in"
        " turn with the channel",
    }
