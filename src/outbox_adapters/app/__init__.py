"""The host's outbox, described once in its own code and run by its process and by the CLI.

:class:`Outbox` names the database, the SMTP relay, the broker, the keys and the lanes the host
runs: e-mail lanes with their hooks (a suppression check, branding, a bounce report, a mailer of
the host's own), the webhook lane (:class:`WebhookLane`: where deliveries may go, the per-origin
cap), the event relay (:class:`RelayLane`) and the consumer channels (:class:`EmailChannelLane`
with the host's recipes, :class:`InAppChannelLane` with its audiences).
``async with outbox.running("email"):`` runs lanes inside the host's process (a FastAPI
lifespan), and ``outbox --app package.module:attribute worker --lane email`` (or ``OUTBOX_APP``)
runs the same object's lane from the command line. Both go through the one runner
(:func:`run_lane`), which builds the pool, wake-up, leader lease, heartbeat and broker every lane
needs; each description builds only its own workers. docs/tutorials/application.md shows it.
"""

from outbox_adapters.app.application import Outbox, load_app
from outbox_adapters.app.context import Lane, LaneContext, Runnable
from outbox_adapters.app.event_lanes import EmailChannelLane, InAppChannelLane, RelayLane
from outbox_adapters.app.lanes import EmailLane, MailerFactory
from outbox_adapters.app.runner import check_lane, run_lane
from outbox_adapters.app.webhook_lane import SenderFactory, WebhookLane
from outbox_adapters.lanes.email_channel import EmailDraft, EmailRecipes
from outbox_adapters.lanes.inapp import InAppRecipes

__all__ = [
    "EmailChannelLane",
    "EmailDraft",
    "EmailLane",
    "EmailRecipes",
    "InAppChannelLane",
    "InAppRecipes",
    "Lane",
    "LaneContext",
    "MailerFactory",
    "Outbox",
    "RelayLane",
    "Runnable",
    "SenderFactory",
    "WebhookLane",
    "check_lane",
    "load_app",
    "run_lane",
]
