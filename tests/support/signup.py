"""The reference app (examples/signup_service) for the tests: a database of its own, shrunk timings,
a real uvicorn server on a free port, a real NATS server the test may stop, the SMTP sink.

Each service gets a fresh database (the platform dashboard sees every platform notification of
its database, so a shared one would show other tests' rows) and a topic and stream of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from typing import Any

import attrs
from tests.support.postgres import scratch_database

from examples.signup_service.serve import Urls, free_port, serving
from examples.signup_service.settings import ServiceSettings
from examples.signup_service.web import Service
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.feed import FeedSettings
from outbox_adapters.lanes.channel_workers import ChannelTiming
from outbox_adapters.postgres import schema
from outbox_adapters.smtp import SmtpSettings
from outbox_core.backoff import ExponentialBackoff
from outbox_core.event_timing import RelayTiming

__all__ = ["Running", "fresh_database", "mails", "running_service", "service_settings", "until"]

OPERATOR_PASSWORD = "operator-test-password"
SENDER = "hello@signup.example"


@contextlib.contextmanager
def fresh_database(server_dsn: str) -> Iterator[str]:
    """A new database on ``server_dsn``'s server with the outbox schema; dropped afterwards."""
    with scratch_database(server_dsn, "signup") as dsn:
        schema.apply(dsn)
        yield dsn


def service_settings(
    dsn: str, nats_url: str, sink: SmtpSink, port: int, **changes: Any
) -> ServiceSettings:
    """Settings for a test: every retry and poll shrunk to fractions of a second."""
    run = secrets.token_hex(3)
    smtp = attrs.evolve(
        SmtpSettings.from_url(f"smtp://127.0.0.1:{sink.port}", sender=SENDER),
        tls_context=sink.client_context(),
    )
    fast = ExponentialBackoff(
        max_attempts=2**31 - 1,
        base=timedelta(seconds=0.2),
        factor=2.0,
        cap=timedelta(seconds=0.5),
        jitter_ratio=0.0,
    )
    settings = ServiceSettings(
        dsn=dsn,
        broker_url=nats_url,
        smtp=smtp,
        public_url=f"http://127.0.0.1:{port}",
        platform_owner="owner@platform.example",
        secret_key=secrets.token_urlsafe(32),
        operator_password=OPERATOR_PASSWORD,
        topic=f"signup-{run}.events",
        stream=f"SIGNUP_{run.upper()}",
        stream_max_age=timedelta(hours=1),
        poll_interval=0.2,
        poll_seconds=1.0,
        relay_timing=RelayTiming(publish=timedelta(seconds=1), mark=timedelta(seconds=2)),
        relay_backoff=fast,
        email_backoff=attrs.evolve(fast, max_attempts=50),
        channel_timing=ChannelTiming(
            recheck=timedelta(seconds=0.1),
            recheck_cap=timedelta(seconds=0.5),
            retry_delay=timedelta(seconds=0.5),
        ),
        feed=FeedSettings(ping_interval=5.0),
    )
    return attrs.evolve(settings, **changes)


@attrs.frozen
class Running:
    service: Service
    urls: Urls
    settings: ServiceSettings


@contextlib.asynccontextmanager
async def running_service(
    settings: ServiceSettings, sink: SmtpSink | None = None
) -> AsyncIterator[Running]:
    port = int(settings.public_url.rsplit(":", 1)[1])
    service = Service(settings)
    mailbox = (sink, free_port()) if sink is not None else None
    async with serving(service, port=port, mailbox=mailbox) as urls:
        yield Running(service, urls, settings)


def mails(sink: SmtpSink) -> list[dict[str, str]]:
    """What the sink received: to, subject, text (one dict per mail and recipient)."""
    found = []
    for mail in sink.received:
        message = message_from_bytes(mail.data, policy=default_policy)
        assert isinstance(message, EmailMessage)
        body = message.get_body(preferencelist=("plain",))
        text = body.get_content() if body is not None else ""
        found += [
            {"to": to, "subject": str(message["Subject"]), "text": text} for to in mail.recipients
        ]
    return found


async def until(check: Callable[[], Awaitable[bool] | bool], *, within: float = 20.0) -> bool:
    """Poll ``check`` until it holds (True) or ``within`` seconds pass (False)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        answer = check()
        if answer if isinstance(answer, bool) else await answer:
            return True
        await asyncio.sleep(0.05)
    return False
