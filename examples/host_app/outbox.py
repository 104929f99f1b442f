"""The host's outbox: one e-mail lane of its own (``host-mail``) with its suppression list.

``from_environment`` is what the CLI loads::

    HOST_DATABASE_URL=... HOST_SMTP_URL=smtp://relay:587 HOST_SENDER=noreply@host.example \\
        outbox --app examples.host_app.outbox:from_environment worker --lane host-mail

and ``make_outbox`` is what the host's own process builds (tests/integration/test_host_app.py
runs both and compares what they sent).
"""

from __future__ import annotations

import os
from collections.abc import Collection

from outbox_adapters.app import EmailLane, Outbox
from outbox_adapters.smtp import SmtpSettings

__all__ = ["HOST_LANE", "SUPPRESSED", "from_environment", "make_outbox", "suppressed"]

HOST_LANE = "host-mail"
#: The host's own suppression list (a real host reads its unsubscribe table here).
SUPPRESSED = frozenset({"unsubscribed@host.example"})


def suppressed(recipients: tuple[str, ...]) -> Collection[str]:
    """The host's suppression hook: which of ``recipients`` must not be mailed."""
    return [r for r in recipients if r.casefold() in SUPPRESSED]


def make_outbox(*, database_url: str, smtp: SmtpSettings) -> Outbox:
    return Outbox(
        database_url=database_url,
        smtp=smtp,
        lanes=[EmailLane(HOST_LANE, suppressed=suppressed, sender_name="Host Example")],
    )


def from_environment() -> Outbox:
    """The same outbox from ``HOST_*`` variables (the CLI's ``--app`` target)."""
    smtp = SmtpSettings.from_url(
        os.environ["HOST_SMTP_URL"],
        tls=os.environ.get("HOST_SMTP_TLS", "starttls"),
        sender=os.environ["HOST_SENDER"],
        ca_file=os.environ.get("HOST_SMTP_CA_FILE"),
    )
    return make_outbox(database_url=os.environ["HOST_DATABASE_URL"], smtp=smtp)
