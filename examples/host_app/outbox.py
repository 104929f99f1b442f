"""The host's outbox: an e-mail lane of its own (``host-mail``) with its suppression list, and its
domain events: the relay, and an e-mail channel with the host's own recipe (``order.shipped`` →
a shipping notice to the customer) sent by its lane ``host-orders`` under the same suppression.

``from_environment`` is what the CLI loads::

    HOST_DATABASE_URL=... HOST_SMTP_URL=smtp://relay:587 HOST_SENDER=noreply@host.example \\
    HOST_BROKER_URL=nats://127.0.0.1:4222 \\
        outbox --app examples.host_app.outbox:from_environment worker --lane host-mail

(``--lane events`` runs the relay, ``--lane host-orders`` the channel), and ``make_outbox`` is
what the host's own process builds (tests/integration/test_host_app.py runs both and compares
what they sent).
"""

from __future__ import annotations

import os
from collections.abc import Collection

from outbox_adapters.app import EmailChannelLane, EmailDraft, EmailLane, Outbox, RelayLane
from outbox_adapters.smtp import SmtpSettings
from outbox_core.backoff import CONSUMER_BACKOFF
from outbox_core.errors import InvalidMessage
from outbox_core.events import EventEnvelope

__all__ = [
    "HOST_LANE",
    "ORDERS_LANE",
    "ORDERS_TOPIC",
    "SUPPRESSED",
    "from_environment",
    "make_outbox",
    "shipping_notice",
    "suppressed",
]

HOST_LANE = "host-mail"
#: The e-mail lane of the host's order events, and the consumer group that feeds it.
ORDERS_LANE = "host-orders"
#: The topic the host publishes its order events on (``HOST_TOPIC`` overrides it).
ORDERS_TOPIC = "host.orders"
#: The host's own suppression list (a real host reads its unsubscribe table here).
SUPPRESSED = frozenset({"unsubscribed@host.example"})


def suppressed(recipients: tuple[str, ...]) -> Collection[str]:
    """The host's suppression hook: which of ``recipients`` must not be mailed."""
    return [r for r in recipients if r.casefold() in SUPPRESSED]


def shipping_notice(event: EventEnvelope) -> EmailDraft:
    """The host's recipe: ``order.shipped`` → one e-mail to the order's customer."""
    email, order = event.data.get("email"), event.data.get("order")
    if not isinstance(email, str) or not isinstance(order, str):
        raise InvalidMessage("an order.shipped event needs an email and an order")
    return EmailDraft(
        to=email,
        subject="Order $order shipped",
        text="Hello,\n\nyour order $order is on its way.\n",
        fields={"order": order},
    )


def make_outbox(
    *, database_url: str, smtp: SmtpSettings, broker: str | None = None, topic: str = ORDERS_TOPIC
) -> Outbox:
    return Outbox(
        database_url=database_url,
        smtp=smtp,
        broker=broker,
        lanes=[
            EmailLane(HOST_LANE, suppressed=suppressed, sender_name="Host Example"),
            RelayLane(topics=(topic,)),
            EmailChannelLane(
                recipes={"order.shipped": [("customer", shipping_notice)]},
                topic=topic,
                group=ORDERS_LANE,
                mail=EmailLane(ORDERS_LANE, suppressed=suppressed, backoff=CONSUMER_BACKOFF),
            ),
        ],
    )


def from_environment() -> Outbox:
    """The same outbox from ``HOST_*`` variables (the CLI's ``--app`` target)."""
    smtp = SmtpSettings.from_url(
        os.environ["HOST_SMTP_URL"],
        tls=os.environ.get("HOST_SMTP_TLS", "starttls"),
        sender=os.environ["HOST_SENDER"],
        ca_file=os.environ.get("HOST_SMTP_CA_FILE"),
    )
    return make_outbox(
        database_url=os.environ["HOST_DATABASE_URL"],
        smtp=smtp,
        broker=os.environ.get("HOST_BROKER_URL"),
        topic=os.environ.get("HOST_TOPIC", ORDERS_TOPIC),
    )
