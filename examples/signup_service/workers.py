"""The workers that run beside the web app: the relay and both consumer channels.

Each is the library's own: the relay is the one runtime's ``Worker`` with ``RelayHandler`` on the
event outbox, under the relay's leader lease (one relay per database, however many replicas run);
the e-mail channel is ``EmailChannelWorkers`` (consumer group ``notification-email`` and the worker
of its e-mail lane, which also sends the mails :func:`~.accounts.mail_admin` enqueues); the in-app
channel is ``inapp_consumer`` (group ``notification-inapp``), whose rows the feed serves. The relay
and the e-mail lane are woken by the process's one LISTEN connection when a row is written.

None of them is on the signup's path: with the broker or SMTP down, they retry on their own and
the signups keep committing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any, Self

from psycopg_pool import AsyncConnectionPool

from examples.signup_service.recipes import ConfirmLinks, signup_recipes
from examples.signup_service.settings import ServiceSettings
from outbox_adapters.brokers import broker_from_url
from outbox_adapters.lanes.channel_workers import EmailChannelWorkers, inapp_consumer
from outbox_adapters.lanes.email_channel import (
    EMAIL_CHANNEL_GROUP,
    EMAIL_CHANNEL_LANE,
    email_channel_lane,
)
from outbox_adapters.lanes.inapp import INAPP_CHANNEL_GROUP
from outbox_adapters.lanes.relay import RelayHandler, relay_lane
from outbox_adapters.postgres import PostgresLeaderLease, PostgresStore, WakeupListener
from outbox_adapters.postgres.events import outbox_event
from outbox_adapters.postgres.events.tables import RELAY_LANE
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer
from outbox_core.brokers import StreamSpec

__all__ = ["ServiceWorkers"]

_log = logging.getLogger("examples.signup_service.workers")


class ServiceWorkers:
    """``async with ServiceWorkers(settings, pool, links):`` runs them; leaving stops them."""

    def __init__(
        self, settings: ServiceSettings, pool: AsyncConnectionPool[Any], links: ConfirmLinks
    ) -> None:
        self.settings = settings
        spec = StreamSpec(
            name=settings.stream, subjects=(settings.topic,), max_age=settings.stream_max_age
        )
        self.broker = broker_from_url(settings.broker_url, streams=[spec])
        self.listener = WakeupListener(settings.dsn)
        self.mailer = SmtpMailer(settings.smtp)
        holder = f"{socket.gethostname()}:{os.getpid()}"
        self.relay_store = PostgresStore(pool, table=outbox_event)
        self.relay = Worker(
            self.relay_store,
            RelayHandler(self.broker.publisher()),
            relay_lane(
                timing=settings.relay_timing,
                backoff=settings.relay_backoff,
                poll_interval=settings.poll_interval,
            ),
            leader=PostgresLeaderLease(pool),
            holder=f"signup-relay@{holder}",
            wakeup=self.listener.wakeup(RELAY_LANE),
        )
        self.email = EmailChannelWorkers(
            pool,
            self.broker.consumer(EMAIL_CHANNEL_GROUP, [settings.topic]),
            self.broker.publisher(),
            self.mailer,
            sender=settings.smtp.policy.sender,
            recipes=signup_recipes(links, settings.platform_owner),
            lane_config=email_channel_lane(
                backoff=settings.email_backoff, poll_interval=settings.poll_interval
            ),
            timing=settings.channel_timing,
            wakeup=self.listener.wakeup(EMAIL_CHANNEL_LANE),
        )
        self.inapp = inapp_consumer(
            pool,
            self.broker.consumer(INAPP_CHANNEL_GROUP, [settings.topic]),
            self.broker.publisher(),
            timing=settings.channel_timing,
        )
        self._tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> None:
        await self.listener.start()
        self._tasks = [
            asyncio.create_task(self.relay.run(), name="relay"),
            asyncio.create_task(self.email.run(), name="email-channel"),
            asyncio.create_task(self.inapp.run(), name="inapp-channel"),
        ]
        for task in self._tasks:
            task.add_done_callback(_report_exit)

    async def aclose(self) -> None:
        """Stop taking work; what is in flight finishes (each under its own budget)."""
        self.relay.request_stop()
        self.email.request_stop()
        self.inapp.request_stop()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.relay_store.close()
        await self.mailer.aclose()
        await self.broker.aclose()
        await self.listener.aclose()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()


def _report_exit(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.error("%s stopped: %r", task.get_name(), task.exception())
