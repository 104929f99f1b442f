"""The e-mail lane's send caps end to end: real PostgreSQL, a real SMTP server, the one lane runner.

The sink holds every DATA for a moment and counts the transactions in DATA per recipient domain at
once: the most it ever saw per domain is what the per-domain cap promises (never above N), while
the other domains' sends run beside them. The rate cap is checked on the sink's receive times with
a generous tolerance (the exact schedule is proved on a fake clock in
tests/unit/test_send_caps_adapter.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session
from tests.support import smtp as smtp_support
from tests.support.postgres import enqueue_all, query
from tests.support.smtp import SENDER

from outbox_adapters.app import EmailLane, Outbox
from outbox_adapters.app.runner import run_lane
from outbox_adapters.demo.sink import SinkHandler, SmtpSink
from outbox_adapters.lanes.email import email_message
from outbox_core.timing import EmailTiming

pytestmark = [pytest.mark.integration]

#: How long the sink keeps each message in DATA, so that sends overlap when nothing stops them.
HOLD = 0.3


class CountingHandler(SinkHandler):
    """Counts the transactions in DATA per recipient domain at once (the maximum seen), and
    when each message was received (monotonic seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self._guard = threading.Lock()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.total = 0
        self.most_total = 0
        self.received_at: list[float] = []

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        domains = {str(rcpt).rpartition("@")[2] for rcpt in envelope.rcpt_tos}
        with self._guard:
            self.received_at.append(time.monotonic())
            self.total += 1
            self.most_total = max(self.most_total, self.total)
            for domain in domains:
                self.now[domain] += 1
                self.most[domain] = max(self.most[domain], self.now[domain])
        try:
            await asyncio.sleep(HOLD)
            return await super().handle_DATA(server, session, envelope)
        finally:
            with self._guard:
                self.total -= 1
                for domain in domains:
                    self.now[domain] -= 1


@pytest.fixture
def counting_sink() -> Iterator[SmtpSink]:
    sink = SmtpSink(tls="starttls")
    sink.handler = CountingHandler()
    with sink as running:
        yield running


def _app(dsn: str, sink: SmtpSink, lane: EmailLane) -> Outbox:
    smtp = smtp_support.settings_for(sink, max_sessions=8)
    return Outbox(
        lanes=(lane,), database_url=dsn, smtp=smtp, sender=SENDER, listen=False, leader=False
    )


def _statuses(dsn: str, lane: str) -> Counter[str]:
    rows = query(dsn, "SELECT status FROM outbox_message WHERE lane = %s", lane)
    return Counter(status for (status,) in rows)


async def test_no_more_than_n_sends_in_flight_to_one_domain_while_others_proceed(
    dsn: str, counting_sink: SmtpSink, lane: str
) -> None:
    handler = counting_sink.handler
    assert isinstance(handler, CountingHandler)
    recipients = [
        *(f"user{n}@GMail.com" for n in range(8)),  # one domain, however it is spelt
        *(f"user{n}@yahoo.example" for n in range(5)),
        *(f"user{n}@mail.example" for n in range(3)),
    ]
    messages = [email_message(to=to, subject="Hi", text="Hi", lane=lane) for to in recipients]
    # Two domains at once: a slot of each, taken in sorted order.
    messages.append(
        email_message(
            to=["both@gmail.com", "both@yahoo.example"], subject="Hi", text="Hi", lane=lane
        )
    )
    await enqueue_all(dsn, messages, notify=False)
    mail = EmailLane(
        name=lane,
        rows_in_flight=8,
        timing=EmailTiming(batch_size=len(messages)),
        max_per_domain=2,
    )

    await run_lane(_app(dsn, counting_sink, mail), mail, drain=True)

    assert _statuses(dsn, lane) == {"dispatched": len(messages)}
    assert handler.most["gmail.com"] == 2
    assert handler.most["yahoo.example"] <= 2
    assert handler.most["mail.example"] <= 2
    # While gmail.com had its two, the other domains were being sent too.
    assert handler.most_total > 2


async def test_a_lane_starts_at_most_its_rate_of_sends_a_second(
    dsn: str, counting_sink: SmtpSink, lane: str
) -> None:
    handler = counting_sink.handler
    assert isinstance(handler, CountingHandler)
    rate, count = 4, 12
    messages = [
        email_message(to=f"user{n}@rate.example", subject="Hi", text="Hi", lane=lane)
        for n in range(count)
    ]
    await enqueue_all(dsn, messages, notify=False)
    mail = EmailLane(
        name=lane, rows_in_flight=8, timing=EmailTiming(batch_size=count), max_per_second=rate
    )

    await run_lane(_app(dsn, counting_sink, mail), mail, drain=True)

    assert _statuses(dsn, lane) == {"dispatched": count}
    received = sorted(handler.received_at)
    # Starts are 1/rate apart; the sink sees them a little later, with scheduling noise: a second
    # of receive times holds the rate's worth and, generously, one more.
    busiest = max(sum(1 for t in received if start <= t < start + 1.0) for start in received)
    assert busiest <= rate + 1
    # Uncapped, 8 rows in flight would all arrive within the same fraction of a second.
    assert received[-1] - received[0] >= (count - 1) / rate * 0.5
