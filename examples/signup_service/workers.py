"""The workers that run beside the web app: the relay and both consumer channels.

The service describes its outbox once, as the library's application object
(:func:`service_outbox`): the relay (:class:`~outbox_adapters.app.RelayLane`, under the relay's
leader lease: one relay per database, however many replicas run), the e-mail channel
(:class:`~outbox_adapters.app.EmailChannelLane`: consumer group ``notification-email`` with the
service's recipes, and the worker of its e-mail lane, which also sends the mails
:func:`~.accounts.mail_admin` enqueues) and the in-app channel
(:class:`~outbox_adapters.app.InAppChannelLane`, group ``notification-inapp``), whose rows the
feed serves. :class:`ServiceWorkers` runs that object in the web app's process, through the same
runner as ``outbox --app ... worker --lane NAME``.

None of them is on the signup's path: with the broker or SMTP down, they retry on their own and
the signups keep committing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Self

from examples.signup_service.recipes import ConfirmLinks, signup_recipes
from examples.signup_service.settings import ServiceSettings
from outbox_adapters.app import EmailChannelLane, EmailLane, InAppChannelLane, Outbox, RelayLane
from outbox_adapters.lanes.email_channel import EMAIL_CHANNEL_LANE
from outbox_core.brokers import StreamSpec

__all__ = ["ServiceWorkers", "service_outbox"]

_log = logging.getLogger("examples.signup_service.workers")


def service_outbox(settings: ServiceSettings, links: ConfirmLinks) -> Outbox:
    """The service's outbox: its database, SMTP, broker and stream, and its three lanes."""
    return Outbox(
        database_url=settings.dsn,
        smtp=settings.smtp,
        broker=settings.broker_url,
        streams=[
            StreamSpec(
                name=settings.stream, subjects=(settings.topic,), max_age=settings.stream_max_age
            )
        ],
        poll_interval=settings.poll_interval,
        lanes=[
            RelayLane(
                topics=(settings.topic,),
                timing=settings.relay_timing,
                backoff=settings.relay_backoff,
            ),
            EmailChannelLane(
                recipes=signup_recipes(links, settings.platform_owner),
                topic=settings.topic,
                mail=EmailLane(EMAIL_CHANNEL_LANE, backoff=settings.email_backoff),
                timing=settings.channel_timing,
            ),
            InAppChannelLane(topic=settings.topic, timing=settings.channel_timing),
        ],
    )


class ServiceWorkers:
    """``async with ServiceWorkers(settings, links):`` runs the service's lanes; leaving stops
    them (what is in flight finishes, each under its own budget)."""

    def __init__(self, settings: ServiceSettings, links: ConfirmLinks) -> None:
        self.outbox = service_outbox(settings, links)
        self._running: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> Self:
        async with contextlib.AsyncExitStack() as stack:
            tasks = await stack.enter_async_context(self.outbox.running())
            for task in tasks.values():
                task.add_done_callback(_report_exit)
            self._running = stack.pop_all()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        running, self._running = self._running, None
        if running is not None:
            # A lane that stopped on an error was logged when it did; the web app still stops.
            with contextlib.suppress(Exception):
                await running.aclose()


def _report_exit(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.error("%s stopped: %r", task.get_name(), task.exception())
