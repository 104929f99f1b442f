"""The example's run: issue one invoice, show its e-mail row, send everything, show what happened.

1. Apply the outbox schema and create the host's ``invoice`` table.
2. Start a local SMTP sink (STARTTLS, a throwaway CA) and a local webhook receiver that verifies
   every signature; register the receiver as an endpoint for ``invoice.issued`` (its URL passes
   the destination guard first, loopback allowed explicitly, as ``outbox endpoints add
   --allow-destination 127.0.0.0/8 --allow-http`` would).
3. Issue the invoice: the invoice row, its e-mail and its webhook event in ONE host transaction.
4. Print the stored e-mail row: the payment link and the PDF are in it.
5. Run the application's outbox (:func:`~examples.invoice.host.invoice_outbox`: its e-mail lane,
   SMTP in strict STARTTLS with scrub rules naming ``pay_url``, and the webhook lane: drainer,
   first attempts, retries) in this process until the e-mail row is terminal and the delivery
   recorded.
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
from typing import Final, TextIO

import attrs
import psycopg

from examples.invoice.evidence import delivery_of, stored_row
from examples.invoice.host import (
    CREATE_INVOICE_TABLE,
    EVENT_TYPE,
    INVOICE_SCRUB,
    IssuedInvoice,
    invoice_outbox,
    issue_invoice,
)
from examples.invoice.report import InvoiceReport, show_before
from outbox_adapters.demo.receiver import Behaviour, Receiver
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.http import DestinationGuard
from outbox_adapters.postgres import schema
from outbox_adapters.postgres.pools import connection_pool
from outbox_adapters.postgres.webhooks import WebhookRepository
from outbox_adapters.smtp import SmtpSettings
from outbox_core.delivery import Status
from outbox_core.signing import WebhookSecret

__all__ = ["SENDER", "run_invoice_example"]

SENDER: Final = "billing@shop.example"
CUSTOMER: Final = "ann@customer.example"
#: Longest the example waits for both deliveries (they take well under a second).
GIVE_UP_AFTER: Final = 30.0
POLL_INTERVAL: Final = 0.05
#: The receiver is on loopback over plain HTTP: allowed for this example only (never production).
ALLOW: Final = ("127.0.0.0/8",)
GUARD: Final = DestinationGuard(allow=ALLOW, require_https=False)
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
            connection_pool(dsn, max_size=2) as pool,
        ):
            repository = WebhookRepository(pool)
            await GUARD.check_registration(receiver.url)
            secret = WebhookSecret.generate_from(secrets.token_bytes(32))
            receiver.secrets = (secret,)
            endpoint = await repository.add_endpoint(
                receiver.url, [EVENT_TYPE], secret=secret.to_text(), tenant="acme"
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


async def _deliver(
    dsn: str, *, sink: SmtpSink, lane: str, issued: IssuedInvoice, endpoint_id: int
) -> bool:
    """Run the application's e-mail lane and webhook lane until both are delivered (or time is
    up), as its own process would: ``async with outbox.running()``."""
    settings = SmtpSettings.from_url(
        f"smtp://{sink.host}:{sink.port}", tls="starttls", sender=SENDER
    )
    # Trust the sink's throwaway CA, and nothing else.
    settings = attrs.evolve(settings, tls_context=sink.client_context())
    outbox = invoice_outbox(
        database_url=dsn,
        smtp=settings,
        lane=lane,
        allow=ALLOW,
        allow_http=True,
        poll_interval=POLL_INTERVAL,
    )
    async with outbox.running():
        return await _until_delivered(dsn, issued, endpoint_id)


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
