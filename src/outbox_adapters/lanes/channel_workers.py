"""One process's consumer channels (ADR 0021): what ``outbox consume --channel email|inapp`` runs,
and what a host running them in-process builds the same way.

- :class:`EmailChannelWorkers`: the e-mail channel's :class:`~outbox_adapters.lanes.consumer.ChannelConsumer`
  (consumer group ``notification-email``) and the ``Worker`` of its lane (the one runtime with
  :class:`~outbox_adapters.lanes.email.EmailHandler` and :data:`CONSUMER_BACKOFF`), on one pool.
  Build it only when SMTP is configured; otherwise log
  :func:`~outbox_adapters.lanes.email_channel.email_channel_disabled_warning`.
- :func:`inapp_consumer`: the in-app channel's consumer (group ``notification-inapp``); it needs no
  worker (its rows are the feed itself) and runs whatever the SMTP configuration.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import attrs
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.clock import SystemClock
from outbox_adapters.lanes.consumer import (
    DEFAULT_IN_FLIGHT,
    EVENT_DEADLINE,
    MAX_FAILURES,
    Channel,
    ChannelConsumer,
    ConsumerStats,
    ParkLedger,
)
from outbox_adapters.lanes.email import EmailHandler
from outbox_adapters.lanes.email_channel import (
    EMAIL_CHANNEL_GROUP,
    EmailRecipes,
    email_channel,
    email_channel_lane,
)
from outbox_adapters.lanes.inapp import (
    INAPP_CHANNEL_GROUP,
    InAppChannel,
    InAppRecipes,
    platform_notifications,
)
from outbox_adapters.lanes.row_channel import RECHECK, RECHECK_CAP
from outbox_adapters.lanes.wind_down import STOP_GRACE
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.channels import (
    NotificationWriter,
    PostgresParkLedger,
    RecipientRows,
)
from outbox_adapters.postgres.tables import outbox_message
from outbox_adapters.runtime import LaneConfig, Worker, WorkerStats
from outbox_adapters.wakeup import Wakeup
from outbox_core.ports import Clock, Consumer, Encryptor, Heartbeat, Mailer, Publisher
from outbox_core.sealing import SealingRules

__all__ = ["ChannelTiming", "EmailChannelStats", "EmailChannelWorkers", "inapp_consumer"]


@attrs.frozen
class ChannelTiming:
    """The consumer's figures (tests shrink them)."""

    event_deadline: timedelta = EVENT_DEADLINE
    retry_delay: timedelta = timedelta(seconds=5)
    overrun_delay: timedelta = timedelta(seconds=10)
    publish_budget: timedelta = timedelta(seconds=5)
    drain_idle: timedelta = timedelta(seconds=1)
    #: Failed handlings of one message (the channel raised or overran the deadline) before it is
    #: parked (kind ``failing``) instead of retried; rechecks of recipients in progress and
    #: outages do not count (``outbox_core.failures``).
    max_failures: int = MAX_FAILURES
    #: How soon an event whose rows are due or being sent is looked at again.
    recheck: timedelta = RECHECK
    recheck_cap: timedelta = RECHECK_CAP
    #: Deliveries handled at once (those of one event key one after the other, in order).
    in_flight: int = DEFAULT_IN_FLIGHT
    #: How long a stop waits for the broker consumer's cancelled fetch, then for its close.
    stop_grace: timedelta = STOP_GRACE

    def consumer(
        self,
        consumer: Consumer,
        channel: Channel,
        *,
        dlq: Publisher,
        parks: ParkLedger,
    ) -> ChannelConsumer:
        return ChannelConsumer(
            consumer,
            channel,
            dlq=dlq,
            parks=parks,
            event_deadline=self.event_deadline,
            retry_delay=self.retry_delay,
            overrun_delay=self.overrun_delay,
            publish_budget=self.publish_budget,
            drain_idle=self.drain_idle,
            max_failures=self.max_failures,
            in_flight=self.in_flight,
            stop_grace=self.stop_grace,
        )


@attrs.define
class EmailChannelStats:
    """What the two parts did."""

    consumer: ConsumerStats
    sender: WorkerStats


class EmailChannelWorkers:
    """The e-mail channel of one process. ``run()`` until :meth:`request_stop` (or drained)."""

    def __init__(  # noqa: PLR0913 - keyword-only knobs, each with a default
        self,
        pool: AsyncConnectionPool[Any],
        consumer: Consumer,
        dlq: Publisher,
        mailer: Mailer,
        *,
        sender: str,
        recipes: EmailRecipes,
        lane_config: LaneConfig | None = None,
        timing: ChannelTiming = ChannelTiming(),
        clock: Clock | None = None,
        wakeup: Wakeup | None = None,
        handler: EmailHandler | None = None,
        heartbeat: Heartbeat | None = None,
        group: str = EMAIL_CHANNEL_GROUP,
        encryptor: Encryptor | None = None,
        sealing: SealingRules = SealingRules(),  # noqa: B008 - frozen, so one shared default is safe
    ) -> None:
        config = lane_config or email_channel_lane()
        self.clock: Clock = clock or SystemClock()
        self.store = PostgresStore(pool, table=outbox_message)
        rows = RecipientRows(pool, lane=config.lane, table=outbox_message)
        channel = email_channel(
            rows,
            recipes,
            name=group,
            recheck=timing.recheck,
            recheck_cap=timing.recheck_cap,
            encryptor=encryptor,
            sealing=sealing,
        )
        self.consumer = timing.consumer(consumer, channel, dlq=dlq, parks=PostgresParkLedger(pool))
        handler = handler or EmailHandler(mailer, sender=sender, clock=self.clock)
        self.worker = Worker(
            self.store, handler, config, clock=self.clock, wakeup=wakeup, heartbeat=heartbeat
        )

    def request_stop(self) -> None:
        """Stop taking events and claiming rows; what is in flight finishes."""
        self.consumer.request_stop()
        self.worker.request_stop()

    async def run(self, *, drain: bool = False) -> EmailChannelStats:
        """Run the consumer and the lane's worker; with ``drain``, until every delivered event
        is acknowledged (so every one of its rows is terminal) and nothing more arrives."""
        try:
            async with asyncio.TaskGroup() as group:
                sending = group.create_task(self.worker.run())
                try:
                    await self.consumer.run(drain=drain)
                finally:
                    self.worker.request_stop()
                await sending
        finally:
            await self.store.close()  # the pool is the caller's
        return EmailChannelStats(consumer=self.consumer.stats, sender=self.worker.stats)


def inapp_consumer(  # noqa: PLR0913 - keyword-only knobs, each with a default
    pool: AsyncConnectionPool[Any],
    consumer: Consumer,
    dlq: Publisher,
    *,
    recipes: InAppRecipes | None = None,
    timing: ChannelTiming = ChannelTiming(),
    group: str = INAPP_CHANNEL_GROUP,
) -> ChannelConsumer:
    """The in-app channel's consumer (group ``notification-inapp`` unless ``group`` names
    another): one feed row per audience."""
    channel = InAppChannel(
        NotificationWriter(pool), recipes or platform_notifications(), name=group
    )
    return timing.consumer(consumer, channel, dlq=dlq, parks=PostgresParkLedger(pool))
