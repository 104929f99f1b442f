"""The demo's webhook part: events fanned out to two local receivers, one healthy, one that answers
500 and then 410 Gone, through the webhook lane as a host runs it (:class:`~outbox_adapters.app.Outbox`
with a :class:`~outbox_adapters.app.WebhookLane`: the drainer, first attempts, retry worker and
HTTP sender).

It prints the deliveries per endpoint, the retry, the disabled endpoint and how many signatures the
healthy receiver verified, and checks the promises: every event delivered exactly once to the
healthy receiver, each signature verified, the gone endpoint retried once and then disabled.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import timedelta
from typing import Final, TextIO

import attrs
import psycopg

from outbox_adapters.app import Outbox, WebhookLane
from outbox_adapters.demo.receiver import Behaviour, Receiver
from outbox_adapters.lanes.webhooks import WEBHOOK_LANE
from outbox_adapters.postgres.pools import connection_pool
from outbox_adapters.postgres.webhooks import WebhookRepository, enqueue_webhook_async
from outbox_core.backoff import SlotSchedule
from outbox_core.delivery import Status
from outbox_core.signing import WebhookSecret

__all__ = ["WebhookDemoReport", "run_webhook_demo"]

#: The gone receiver's 500 is retried after this wait (instead of 5 s), so the demo sees its 410.
DEMO_WEBHOOK_BACKOFF: Final = SlotSchedule((timedelta(seconds=0.2),) * 3, jitter_ratio=0.0)
#: The tenant (a customer of the demo's host) both endpoints and every event belong to.
DEMO_TENANT: Final = "acme"


@attrs.frozen
class WebhookDemoReport:
    events: int
    healthy_received: int
    healthy_distinct: int
    healthy_verified: int
    healthy_retried: int
    gone_requests: tuple[int, ...]
    gone_disabled: bool
    gone_reason: str | None
    by_status: dict[str, int]
    elapsed: float

    def broken(self) -> list[str]:
        checks = [
            (self.healthy_distinct == self.events, "the healthy receiver missed an event"),
            (self.healthy_verified == self.events, "an event was not verified exactly once"),
            (self.healthy_retried == 1, "the delivery answered 503 was not retried once"),
            (self.gone_disabled, "the endpoint answering 410 was not disabled"),
        ]
        return [reason for holds, reason in checks if not holds]

    def table(self) -> str:
        lines = [
            ("webhook events enqueued", self.events),
            ("requests to the healthy receiver", self.healthy_received),
            ("signatures it verified (one per event)", self.healthy_verified),
            ("retried after its first answer, 503", self.healthy_retried),
            ("requests to the 500-then-410 receiver", len(self.gone_requests)),
            ("its answers", " ".join(str(s) for s in self.gone_requests) or "-"),
            ("endpoint disabled", f"yes ({self.gone_reason})" if self.gone_disabled else "no"),
            ("deliveries", ", ".join(f"{k} {v}" for k, v in sorted(self.by_status.items()))),
            ("", "(a delivery attempted after the 410 was recorded is skipped: endpoint disabled)"),
            ("elapsed", f"{self.elapsed:.2f} s"),
        ]
        width = max(len(label) for label, _ in lines)
        return "\n".join(f"  {label:<{width}}  {value}" for label, value in lines)


async def run_webhook_demo(dsn: str, *, events: int, out: TextIO) -> WebhookDemoReport:
    """Fan ``events`` events out to the two receivers and report what happened."""
    event_type = f"demo_{secrets.token_hex(3)}.invoice.paid"
    # The webhook lane as a host describes it, with the receivers' loopback addresses allowed.
    app = Outbox(
        database_url=dsn,
        poll_interval=0.05,
        leader=False,
        lanes=[WebhookLane(allow=("127.0.0.0/8",), allow_http=True, backoff=DEMO_WEBHOOK_BACKOFF)],
    )
    async with (
        Receiver(Behaviour.VERIFYING_AFTER_503) as healthy,
        Receiver(Behaviour.GONE_AFTER_ERROR) as gone,
        connection_pool(dsn, max_size=2) as pool,
    ):
        repository = WebhookRepository(pool)
        secret = WebhookSecret.generate_from(secrets.token_bytes(32))
        healthy.secrets = (secret,)
        fine = await repository.add_endpoint(
            healthy.url, [event_type], tenant=DEMO_TENANT, secret=secret.to_text()
        )
        doomed = await repository.add_endpoint(
            gone.url,
            [event_type],
            tenant=DEMO_TENANT,
            secret=WebhookSecret.generate_from(secrets.token_bytes(32)).to_text(),
        )
        out.write(
            f"webhooks: {events} events of type {event_type} to {healthy.url} (503 once, then"
            f" verifies every signature) and {gone.url} (500, then 410 Gone)\n"
        )
        out.flush()
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            for n in range(events):
                await enqueue_webhook_async(
                    conn, event_type, {"invoice": n, "amount_cents": 1200}, tenant=DEMO_TENANT
                )
        started = time.monotonic()
        async with app.running(WEBHOOK_LANE):
            await _until_settled(repository, (fine.id, doomed.id), events, give_up_after=30.0)
        elapsed = time.monotonic() - started
        by_status = await _by_status(repository, (fine.id, doomed.id))
        endpoint = await repository.endpoint(doomed.id)
    ids = [r.msg_id for r in healthy.received]
    verified = [r.msg_id for r in healthy.received if r.verified]
    return WebhookDemoReport(
        events=events,
        healthy_received=len(ids),
        healthy_distinct=len(set(verified)),
        healthy_verified=len(verified),
        healthy_retried=len(ids) - len(set(ids)),
        gone_requests=tuple(r.status for r in gone.received),
        gone_disabled=endpoint is not None and not endpoint.enabled,
        gone_reason=None if endpoint is None else endpoint.disabled_reason,
        by_status={str(status): n for status, n in by_status.items()},
        elapsed=elapsed,
    )


async def _by_status(
    repository: WebhookRepository, endpoints: tuple[int, ...]
) -> dict[Status, int]:
    """The demo's deliveries per status (its two endpoints only)."""
    totals: dict[Status, int] = {}
    for endpoint_id in endpoints:
        report = await repository.deliveries(endpoint_id=endpoint_id)
        for status, count in report.by_status.items():
            totals[status] = totals.get(status, 0) + count
    return totals


async def _until_settled(
    repository: WebhookRepository, endpoints: tuple[int, ...], events: int, *, give_up_after: float
) -> None:
    """Until the healthy endpoint has every event, nothing is pending and the 410 endpoint is
    disabled (events fanned out after that make no delivery to it), or the time is up."""
    deadline = time.monotonic() + give_up_after
    healthy, doomed = endpoints
    while time.monotonic() < deadline:
        sent = (await repository.deliveries(endpoint_id=healthy)).by_status
        pending = (await _by_status(repository, endpoints)).get(Status.PENDING, 0)
        endpoint = await repository.endpoint(doomed)
        disabled = endpoint is not None and not endpoint.enabled
        if sent.get(Status.DISPATCHED, 0) == events and not pending and disabled:
            return
        await asyncio.sleep(0.05)
