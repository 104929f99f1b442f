"""The demo's domain-event part on real servers: signups → relay → NATS JetStream → the e-mail
channel (the real SMTP sink) and the in-app channel, with the broker outage when the session owns
its NATS server; every invariant of its report holds."""

from __future__ import annotations

import io

import pytest
from tests.support.smtp import settings_for

from outbox_adapters.brokers.embedded import NatsServer, NatsSource
from outbox_adapters.demo.events import run_event_demo
from outbox_adapters.demo.sink import SmtpSink

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]


async def test_the_event_demo_delivers_one_email_per_kind_and_survives_a_broker_outage(
    dsn: str, nats_url: str, nats_server: NatsServer | None, sink: SmtpSink
):
    # The session's own server is stopped and started again by the demo; a configured one
    # (OUTBOX_TEST_NATS) is left alone and the outage is skipped.
    nats = NatsSource(nats_url, "env" if nats_server is None else "embedded", nats_server)
    out = io.StringIO()

    report = await run_event_demo(
        dsn, nats, sink, settings_for(sink), tenants=2, sender="noreply@example.org", out=out
    )

    assert report.broken() == [], report.table()
    events = 2 if nats_server is None else 3
    assert report.per_kind() == {"tenant_welcome": events, "owner_notify": events}
    assert report.notifications == {"platform": (events,) * 3, "tenant": (events,) * 3}
    if nats_server is not None:
        assert report.outage is not None
        assert report.outage.attempts_while_down >= 2
        assert not report.outage.published_while_down
        assert nats_server.running  # started again
    assert "tenant_welcome" in report.table()
