"""The host application's side: its own ``invoice`` table, and issuing an invoice.

Issuing is ONE transaction of the host's: the invoice row, the e-mail to the customer (with the
payment link in a field of its own and the PDF attached) and the ``invoice.issued`` webhook event.
Either all three commit or none does; the outbox workers send the e-mail and the event afterwards.

The payment link is a bearer secret (whoever has it can pay, or see the invoice): the e-mail's text
names it as ``$pay_url`` and the link itself is a template field, substituted at send time, so the
mark that records the send can scrub it from the stored row. ``pay_url`` is not one of the library's
default secret keys (``outbox_core.scrub.DEFAULT_SECRET_KEYS``: ``setup_url``, ``update_url``,
``password_reset_url``, ...), so this application names it: :data:`INVOICE_SCRUB` is the e-mail
lane's :class:`~outbox_core.scrub.ScrubRules`, the defaults plus ``pay_url``. The PDF travels under
``attachments``, a default secret key. The host table keeps a SHA-256 of the token, never the token.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Final

import attrs
import psycopg

from examples.invoice.pdf import invoice_pdf
from outbox_adapters.app import EmailLane, Outbox, WebhookLane
from outbox_adapters.lanes.email import email_message
from outbox_adapters.postgres import enqueue_async
from outbox_adapters.postgres.webhooks import enqueue_webhook_async
from outbox_adapters.smtp import SmtpSettings
from outbox_core.scrub import DEFAULT_SECRET_KEYS, ScrubRules

__all__ = [
    "CREATE_INVOICE_TABLE",
    "EVENT_TYPE",
    "INVOICE_SCRUB",
    "PAY_URL_FIELD",
    "IssuedInvoice",
    "invoice_outbox",
    "issue_invoice",
]

#: The webhook event an issued invoice sends.
EVENT_TYPE: Final = "invoice.issued"
#: The e-mail field that holds the payment link (a secret: scrubbed once the e-mail is sent).
PAY_URL_FIELD: Final = "pay_url"
#: The e-mail lane's scrub rules: the library's defaults, plus this application's secret field.
INVOICE_SCRUB: Final = ScrubRules(DEFAULT_SECRET_KEYS | {PAY_URL_FIELD})


def invoice_outbox(  # noqa: PLR0913 - keyword-only, one per setting the example chooses
    *,
    database_url: str,
    smtp: SmtpSettings,
    lane: str,
    allow: tuple[str, ...] = (),
    allow_http: bool = False,
    poll_interval: float = 1.0,
) -> Outbox:
    """The application's outbox: its e-mail lane ``lane`` (scrubbing :data:`INVOICE_SCRUB`) and
    the webhook lane (deliveries only where ``allow`` and ``allow_http`` let them go)."""
    return Outbox(
        database_url=database_url,
        smtp=smtp,
        poll_interval=poll_interval,
        leader=False,
        lanes=[
            EmailLane(lane, scrub=INVOICE_SCRUB),
            WebhookLane(allow=allow, allow_http=allow_http),
        ],
    )


#: The host's own table (the outbox tables are the library's; this one is the application's).
CREATE_INVOICE_TABLE: Final = """
CREATE TABLE IF NOT EXISTS invoice (
    id bigserial PRIMARY KEY,
    number text NOT NULL UNIQUE,
    customer_email text NOT NULL,
    amount_cents integer NOT NULL CHECK (amount_cents > 0),
    currency text NOT NULL,
    pay_token_sha256 text NOT NULL,
    issued_at timestamptz NOT NULL DEFAULT now()
)
"""
_INSERT_INVOICE: Final = """
INSERT INTO invoice (number, customer_email, amount_cents, currency, pay_token_sha256)
VALUES (%(number)s, %(customer)s, %(amount_cents)s, %(currency)s, %(token_hash)s)
RETURNING id
"""

_SUBJECT: Final = "Invoice $invoice_number from $shop"
_TEXT: Final = """\
Hello $customer_name,

please find invoice $invoice_number over $amount attached.

Pay it online here (the link is yours alone; don't forward it):
$pay_url

Thank you,
$shop
"""


@attrs.frozen
class IssuedInvoice:
    """What issuing wrote: the invoice, and the ids of its two outbox rows."""

    invoice_id: int
    number: str
    customer: str
    amount: str
    #: The e-mail's row in ``outbox_message``.
    email_row_id: int
    #: The event's row in the webhook outbox.
    webhook_row_id: int
    #: The secret payment link (what the e-mail must carry, and the stored row must lose).
    pay_url: str = attrs.field(repr=False)
    #: The attached file, as generated.
    pdf: bytes = attrs.field(repr=False)

    @property
    def pdf_filename(self) -> str:
        return f"{self.number}.pdf"


def _amount(cents: int, currency: str) -> str:
    whole, rest = divmod(cents, 100)
    return f"{currency} {whole:,}.{rest:02d}"


async def issue_invoice(  # noqa: PLR0913 - keyword-only, one argument per invoice detail
    dsn: str,
    *,
    lane: str,
    customer: str,
    customer_name: str,
    amount_cents: int,
    currency: str = "EUR",
    shop: str = "Example Shop",
    pay_base_url: str = "https://pay.shop.example/i/",
) -> IssuedInvoice:
    """Write the invoice, its e-mail (on ``lane``) and its webhook event in ONE transaction."""
    number = f"INV-{secrets.token_hex(4).upper()}"
    token = secrets.token_urlsafe(24)
    pay_url = f"{pay_base_url}{token}"
    amount = _amount(amount_cents, currency)
    pdf = invoice_pdf(number, customer, amount)
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        cur = await conn.execute(
            _INSERT_INVOICE,
            {
                "number": number,
                "customer": customer,
                "amount_cents": amount_cents,
                "currency": currency,
                "token_hash": hashlib.sha256(token.encode()).hexdigest(),
            },
        )
        record = await cur.fetchone()
        assert record is not None  # noqa: S101 - INSERT ... RETURNING returns its row
        invoice_id = int(record[0])
        email = await enqueue_async(
            conn,
            email_message(
                to=customer,
                subject=_SUBJECT,
                text=_TEXT,
                fields={
                    "customer_name": customer_name,
                    "invoice_number": number,
                    "amount": amount,
                    "shop": shop,
                    PAY_URL_FIELD: pay_url,
                },
                attachments=[(f"{number}.pdf", "application/pdf", pdf)],
                idempotency_key=f"invoice/{number}/issued",
                lane=lane,
            ),
        )
        event = await enqueue_webhook_async(
            conn,
            EVENT_TYPE,
            {"invoice": number, "amount_cents": amount_cents, "currency": currency},
            idempotency_key=f"invoice/{number}/issued",
            tenant="acme",
        )
    return IssuedInvoice(
        invoice_id=invoice_id,
        number=number,
        customer=customer,
        amount=amount,
        email_row_id=int(email.row_id),
        webhook_row_id=int(event.row_id),
        pay_url=pay_url,
        pdf=pdf,
    )
