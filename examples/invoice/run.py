"""The example's run: issue one invoice, show its e-mail row, send everything, show what happened.

1. Apply the outbox schema and create the host's ``invoice`` table.
2. Start a local SMTP sink (STARTTLS, a throwaway CA) and a local webhook receiver that verifies
   every signature; register the receiver as an endpoint for ``invoice.issued`` (its URL passes
   the destination guard first, loopback allowed explicitly, as ``outbox endpoints add
   --allow-destination 127.0.0.0/8 --allow-http`` would).
3. Issue the invoice: the invoice row, its e-mail and its webhook event in ONE host transaction.
4. Print the stored e-mail row: the payment link and the PDF are in it.
5. Run the e-mail worker (``Worker`` + ``EmailHandler`` + ``SmtpMailer`` in strict STARTTLS, with
   the lane's scrub rules naming ``pay_url``) and the webhook workers (drainer, first attempts,
   retries) side by side until the e-mail row is terminal and the delivery recorded.
6. Print the row again (dispatched, the link and the files gone), the mail the sink received and
   the webhook the receiver verified.

The e-mail goes on a lane of its own per run (``invoice-<hex>``), so a database shared with other
work never has its other e-mail rows sent by the example. The webhook workers, like ``outbox worker
--lane webhooks``, work the database's whole webhook outbox: point the example at a scratch
database. The endpoint is disabled when the run ends (its receiver is gone), so a later run on the
same database makes no delivery to it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any, Final, TextIO

import attrs
import psycopg
from psycopg_pool import AsyncConnectionPool

from examples.invoice.evidence import delivery_of, stored_row
from examples.invoice.host import (
    CREATE_INVOICE_TABLE,
    EVENT_TYPE,
    INVOICE_SCRUB,
    IssuedInvoice,
    issue_invoice,
)
from examples.invoice.report import InvoiceReport, show_before
from outbox_adapters.clock import SystemClock
from outbox_adapters.demo.receiver import Behaviour, Receiver
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.http import DestinationGuard, HttpxWebhookSender
from outbox_adapters.lanes.email import EmailHandler, email_lane
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.postgres import PostgresStore, schema
from outbox_adapters.postgres.webhooks import WebhookRepository
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.delivery import Status
from outbox_core.signing import WebhookSecret
from outbox_core.timing import DEFAULT_EMAIL_TIMING

__all__ = ["SENDER", "run_invoice_example"]

SENDER: Final = "billing@shop.example"
CUSTOMER: Final = "ann@customer.example"
#: Longest the example waits for both deliveries (they take well under a second).
GIVE_UP_AFTER: Final = 30.0
POLL_INTERVAL: Final = 0.05
#: The receiver is on loopback over plain HTTP: allowed for this example only (never production).
GUARD: Final = DestinationGuard(allow=("127.0.0.0/8",), require_https=False)
_ENDED: Final = "the invoice example has ended (its local receiver is gone)"


async def run_invoice_example(dsn: str, *, out: TextIO) -> InvoiceReport:
    """Run the example against the PostgreSQL server at ``dsn``; print to ``out``."""
    await asyncio.to_thread(schema.apply, dsn)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(CREATE_INVOICE_TABLE)
    lane = f"invoice-{secrets.token_hex(3)}"
    with SmtpSink(tls="starttls") as sink:
        async with (
            Receiver(Behaviour.VERIFYING) as receiver,
            AsyncConnectionPool(
                dsn, min_size=1, max_size=6, kwargs={"autocommit": True}, open=False
            ) as pool,
        ):
            repository = WebhookRepository(pool)
            await GUARD.check_registration(receiver.url)
            secret = WebhookSecret.generate_from(secrets.token_bytes(32))
            receiver.secrets = (secret,)
            endpoint = await repository.add_endpoint(
                receiver.url, [EVENT_TYPE], secret=secret.to_text()
            )
            out.write(
                f"invoice example\n"
                f"  SMTP sink: {sink.host}:{sink.port}, STARTTLS with a throwaway CA\n"
                f"  webhook receiver: {receiver.url} (verifies every signature), registered as"
                f" endpoint {endpoint.id} for {EVENT_TYPE}\n"
            )
            try:
                issued = await issue_invoice(
                    dsn, lane=lane, customer=CUSTOMER, customer_name="Ann", amount_cents=125_000
                )
                out.write(
                    f"\none host transaction: invoice {issued.number} (row {issued.invoice_id},"
                    f" {issued.amount}), its e-mail (outbox_message row {issued.email_row_id},"
                    f" lane {lane}) and its {EVENT_TYPE} event (webhook outbox row"
                    f" {issued.webhook_row_id})\n"
                )
                before = await stored_row(dsn, issued.email_row_id)
                show_before(before, out)
                scrubbed = ", ".join(sorted(INVOICE_SCRUB.keys))
                out.write(
                    f"\nsending: the e-mail worker (its lane scrubs {scrubbed}) and the webhook"
                    " workers (drainer, first attempts, retries)...\n"
                )
                out.flush()
                started = time.monotonic()
                settled = await _deliver(
                    dsn,
                    pool=pool,
                    sink=sink,
                    lane=lane,
                    issued=issued,
                    endpoint_id=endpoint.id,
                )
                elapsed = time.monotonic() - started
                after = await stored_row(dsn, issued.email_row_id)
                delivery = await delivery_of(dsn, issued.webhook_row_id, endpoint.id)
            finally:
                await repository.disable_endpoint(endpoint.id, _ENDED)
        report = InvoiceReport(
            invoice=issued,
            before=before,
            after=after,
            mails=tuple(sink.received),
            webhooks=tuple(receiver.received),
            delivery=delivery,
            settled=settled,
            elapsed=elapsed,
        )
    report.write(out)
    return report


async def _deliver(  # noqa: PLR0913 - keyword-only, one per thing the two lanes work with
    dsn: str,
    *,
    pool: AsyncConnectionPool[Any],
    sink: SmtpSink,
    lane: str,
    issued: IssuedInvoice,
    endpoint_id: int,
) -> bool:
    """Run the e-mail worker and the webhook workers until both are delivered (or time is up)."""
    timing = DEFAULT_EMAIL_TIMING
    settings = SmtpSettings.from_url(
        f"smtp://{sink.host}:{sink.port}", tls="starttls", sender=SENDER
    )
    # Trust the sink's throwaway CA, and nothing else.
    settings = attrs.evolve(settings, tls_context=sink.client_context())
    store = await PostgresStore.open(dsn, max_size=2)
    mailer = SmtpMailer(settings, steps=timing.budgets)
    try:
        handler = EmailHandler(mailer, sender=SENDER, clock=SystemClock(), steps=timing.budgets)
        config = email_lane(
            lane=lane, timing=timing, scrub=INVOICE_SCRUB, poll_interval=POLL_INTERVAL
        )
        email_worker = Worker(store, handler, config, holder="invoice-example")
        async with HttpxWebhookSender(GUARD) as sender:
            webhook_workers = WebhookWorkers(
                pool,
                sender,
                drain_config=drain_lane(poll_interval=POLL_INTERVAL),
                delivery_config=delivery_lane(poll_interval=POLL_INTERVAL),
                leader=False,
            )
            tasks = [
                asyncio.create_task(email_worker.run()),
                asyncio.create_task(webhook_workers.run()),
            ]
            try:
                return await _until_delivered(dsn, issued, endpoint_id)
            finally:
                email_worker.request_stop()
                webhook_workers.request_stop()
                await asyncio.gather(*tasks)
    finally:
        await mailer.aclose()
        await store.close()


async def _until_delivered(dsn: str, issued: IssuedInvoice, endpoint_id: int) -> bool:
    """True once the e-mail row is no longer pending and the event's delivery is recorded."""
    deadline = time.monotonic() + GIVE_UP_AFTER
    while time.monotonic() < deadline:
        row = await stored_row(dsn, issued.email_row_id)
        delivery = await delivery_of(dsn, issued.webhook_row_id, endpoint_id)
        if row.status != Status.PENDING and delivery and delivery.status != Status.PENDING:
            return True
        await asyncio.sleep(POLL_INTERVAL)
    return False
