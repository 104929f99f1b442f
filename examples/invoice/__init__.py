"""The invoice example: an e-mail carrying a secret payment link and a PDF, and a webhook.

``python3 -m nox -s invoice`` (or ``python -m examples.invoice [--database-url URL]``) issues one
invoice in one host transaction (the invoice row, its e-mail, its ``invoice.issued`` webhook
event), shows the stored e-mail row with the link and the PDF in it, sends both through the real
workers to a local SMTP sink and a local signature-verifying receiver, and shows the row again:
dispatched, with ``pay_url`` and ``attachments`` scrubbed in the UPDATE that recorded the send.
It exits non-zero if the scrub, the mail (link and PDF) or the verified webhook is missing.

:func:`run_invoice_example` is the whole run against a given database (the tests call it).
"""

from examples.invoice.host import INVOICE_SCRUB, IssuedInvoice, issue_invoice
from examples.invoice.report import InvoiceReport
from examples.invoice.run import run_invoice_example

__all__ = [
    "INVOICE_SCRUB",
    "InvoiceReport",
    "IssuedInvoice",
    "issue_invoice",
    "run_invoice_example",
]
