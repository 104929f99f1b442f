"""The invoice example (examples/invoice, `nox -s invoice`) on the test database: the sent e-mail
row is dispatched with its payment link and PDF scrubbed, the SMTP sink got the one mail with the
link and a real PDF, the local receiver verified the one webhook; and the command exits 1 when a
check fails."""

from __future__ import annotations

import io
import json
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy

import pytest
from tests.support.postgres import query, stored

from examples.invoice import InvoiceReport, IssuedInvoice, run_invoice_example
from examples.invoice import __main__ as invoice_main
from examples.invoice.evidence import StoredRow

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]


async def test_the_sent_row_is_scrubbed_and_the_mail_and_the_webhook_arrive(dsn, log_canary):
    out = io.StringIO()

    report = await run_invoice_example(dsn, out=out)

    invoice = report.invoice
    token = invoice.pay_url.rpartition("/")[2]
    log_canary.register(token)  # security promise 2: the link is never logged
    shown = out.getvalue()
    assert report.broken() == [], shown
    # Before sending, the row held the link and the file (what the example printed).
    assert report.before.status == "pending"
    assert report.before.payload["pay_url"] == invoice.pay_url
    assert report.before.payload["attachments"][0]["filename"] == f"{invoice.number}.pdf"
    # After: read around the example, as PostgreSQL holds the row.
    row = stored(dsn, invoice.email_row_id)
    assert row["status"] == "dispatched"
    assert "pay_url" not in row["payload"]
    assert "attachments" not in row["payload"]
    assert token not in json.dumps(row["payload"])
    assert row["payload"]["invoice_number"] == invoice.number  # the rest of the record stays
    # The host's row: one invoice, its token kept only as a hash.
    assert query(dsn, "SELECT number FROM invoice WHERE id = %s", invoice.invoice_id) == [
        (invoice.number,)
    ]
    assert token not in str(query(dsn, "SELECT * FROM invoice WHERE id = %s", invoice.invoice_id))
    # The sink: exactly one mail, with the link in its text and the PDF attached.
    assert len(report.mails) == 1
    message = message_from_bytes(report.mails[0].data, policy=default_policy)
    assert isinstance(message, EmailMessage)
    body = message.get_body(preferencelist=("plain",))
    assert body is not None
    assert invoice.pay_url in body.get_content()
    files = list(message.iter_attachments())
    assert [(f.get_filename(), f.get_content_type()) for f in files] == [
        (f"{invoice.number}.pdf", "application/pdf")
    ]
    content = files[0].get_content()
    assert content.startswith(b"%PDF-")
    assert content == invoice.pdf
    # The receiver: one request, its signature verified; the delivery recorded as dispatched.
    assert report.delivery is not None
    assert report.delivery.status == "dispatched"
    assert [(r.msg_id, r.status, r.verified) for r in report.webhooks] == [
        (report.delivery.msg_id, 204, True)
    ]
    # The example's endpoint is disabled once its receiver is gone.
    assert query(dsn, "SELECT enabled FROM outbox_webhook_endpoint") == [(False,)]
    for heading in ("BEFORE sending", "AFTER sending", "signature verified: yes"):
        assert heading in shown
    assert token not in shown  # the link is shown abbreviated only


def test_the_command_exits_1_when_a_check_fails(dsn, monkeypatch, capsys):
    invoice = IssuedInvoice(
        invoice_id=1,
        number="INV-1",
        customer="ann@customer.example",
        amount="EUR 1.00",
        email_row_id=1,
        webhook_row_id=1,
        pay_url="https://pay.shop.example/i/not-scrubbed",
        pdf=b"%PDF-1.4\n",
    )
    # A sent row that still holds its link, no mail, no webhook.
    row = StoredRow(1, "dispatched", 1, {"pay_url": invoice.pay_url})
    broken = InvoiceReport(
        invoice=invoice,
        before=row,
        after=row,
        mails=(),
        webhooks=(),
        delivery=None,
        settled=True,
        elapsed=0.0,
    )

    async def run(_dsn, *, out):
        return broken

    monkeypatch.setattr(invoice_main, "run_invoice_example", run)

    assert invoice_main.main(["--database-url", dsn]) == 1
    printed = capsys.readouterr().out
    assert "the sent row still holds pay_url" in printed
    assert "the sink received 0 mails, not 1" in printed
    assert "the webhook delivery is not dispatched" in printed
    assert "the receiver verified the invoice's webhook 0 times, not 1" in printed
