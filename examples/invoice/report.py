"""What the run found, the checks the example promises, and how it prints them."""

from __future__ import annotations

from typing import TextIO

import attrs

from examples.invoice.evidence import DeliverySeen, MailSeen, StoredRow, payload_lines, read_mail
from examples.invoice.host import EVENT_TYPE, INVOICE_SCRUB, PAY_URL_FIELD, IssuedInvoice
from examples.invoice.pdf import PDF_MAGIC
from outbox_adapters.demo.receiver import Received
from outbox_adapters.demo.sink import ReceivedMail
from outbox_core.mail import ATTACHMENTS_KEY

__all__ = ["InvoiceReport", "show_before"]


def show_before(row: StoredRow, out: TextIO) -> None:
    """The stored e-mail row before any worker ran: the link and the PDF are in it."""
    out.write(
        f"\nBEFORE sending: outbox_message row {row.row_id}, status {row.status},"
        f" attempts {row.attempts}; its payload:\n"
    )
    out.writelines(f"  {line}\n" for line in payload_lines(row.payload, INVOICE_SCRUB.keys))
    out.flush()


@attrs.frozen
class InvoiceReport:
    """Everything the example saw; :meth:`broken` lists the promises that did not hold."""

    invoice: IssuedInvoice
    before: StoredRow
    after: StoredRow
    #: What the SMTP sink received, as received.
    mails: tuple[ReceivedMail, ...]
    #: The requests the verifying receiver answered.
    webhooks: tuple[Received, ...]
    #: The delivery of the example's event to its endpoint (``None``: never fanned out).
    delivery: DeliverySeen | None
    #: Both lanes finished (the e-mail row left pending, the delivery was recorded) in time.
    settled: bool
    elapsed: float

    @property
    def mail(self) -> MailSeen | None:
        """The one mail the sink received, parsed (``None`` unless there is exactly one)."""
        return read_mail(self.mails[0].data) if len(self.mails) == 1 else None

    @property
    def ours(self) -> tuple[Received, ...]:
        """The requests that carried the example's event (its ``webhook-id``). Others can come
        from older ``invoice.issued`` events left in a database's webhook outbox."""
        msg_id = None if self.delivery is None else self.delivery.msg_id
        return tuple(request for request in self.webhooks if request.msg_id == msg_id)

    def broken(self) -> list[str]:
        """The checks that failed, in words (empty: the example showed what it promises)."""
        before, after, mail, ours = self.before, self.after, self.mail, self.ours
        verified = sum(1 for request in ours if request.verified)
        pdf = [f for f in mail.files if f.content_type == "application/pdf"] if mail else []
        checks = [
            (self.settled, "the e-mail and the webhook were not both delivered in time"),
            (
                PAY_URL_FIELD in before.payload and ATTACHMENTS_KEY in before.payload,
                "the row did not hold the link and the PDF before sending",
            ),
            (after.status == "dispatched", f"the e-mail row is {after.status}, not dispatched"),
            (PAY_URL_FIELD not in after.payload, "the sent row still holds pay_url"),
            (ATTACHMENTS_KEY not in after.payload, "the sent row still holds its attachments"),
            (not after.holds(self.invoice.pay_url), "the sent row still holds the payment link"),
            (len(self.mails) == 1, f"the sink received {len(self.mails)} mails, not 1"),
            (mail is not None and self.invoice.pay_url in mail.text, "the mail lacks the link"),
            (
                len(pdf) == 1
                and pdf[0].filename == self.invoice.pdf_filename
                and pdf[0].content.startswith(PDF_MAGIC)
                and pdf[0].content == self.invoice.pdf,
                "the mail does not carry the invoice PDF, intact",
            ),
            (
                self.delivery is not None and self.delivery.status == "dispatched",
                "the webhook delivery is not dispatched",
            ),
            (verified == 1, f"the receiver verified the invoice's webhook {verified} times, not 1"),
            (len(ours) == verified, "the receiver refused the webhook's signature"),
        ]
        return [reason for holds, reason in checks if not holds]

    def write(self, out: TextIO) -> None:
        """The AFTER part: the stored row, the mail at the sink, the webhook at the receiver."""
        out.writelines(f"{line}\n" for line in self.after_lines())
        out.flush()

    def after_lines(self) -> list[str]:
        after, mail, link = self.after, self.mail, self.invoice.pay_url
        lines = [
            (
                f"\nAFTER sending ({self.elapsed:.2f} s): row {after.row_id},"
                f" status {after.status}, attempts {after.attempts}"
            ),
            f"  payload keys now: {', '.join(after.payload)}",
        ]
        lines += [
            f"  {key}: "
            + ("STILL THERE" if key in after.payload else "gone (scrubbed by the send's mark)")
            for key in (PAY_URL_FIELD, ATTACHMENTS_KEY)
        ]
        lines.append(f"  the payment link anywhere in the stored row: {_yes(after.holds(link))}")
        lines.append(f"\nthe SMTP sink received {len(self.mails)} mail(s)")
        if mail is not None:
            lines += [
                f"  To: {mail.to}",
                f"  Subject: {mail.subject}",
                f"  body carries the payment link: {_yes(link in mail.text)}",
            ]
            lines += [
                f"  attachment: {seen.filename}, {seen.content_type}, {len(seen.content)} bytes,"
                f" starts with {seen.content[:5].decode('latin-1')!r}, identical to the PDF"
                f" enqueued: {_yes(seen.content == self.invoice.pdf)}"
                for seen in mail.files
            ]
        lines.append(f"\nthe webhook receiver got {len(self.webhooks)} request(s)")
        delivery = self.delivery
        if delivery is not None:
            lines.append(
                f"  the invoice's {EVENT_TYPE} event, webhook-id {delivery.msg_id}: delivery"
                f" {delivery.status} after {delivery.attempts} attempt(s)"
            )
        lines += [
            f"  {request.msg_id}: answered {request.status}, signature verified:"
            f" {_yes(request.verified)}"
            for request in self.ours
        ]
        others = len(self.webhooks) - len(self.ours)
        if others:
            lines.append(
                f"  and {others} request(s) for other events (older {EVENT_TYPE} events left in"
                " this database's webhook outbox)"
            )
        return lines


def _yes(holds: bool) -> str:  # noqa: FBT001 - a plain predicate
    return "yes" if holds else "no"
