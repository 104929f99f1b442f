"""``outbox consume --channel email|inapp``: one consumer channel of the event stream (ADR 0021).

The lane ``notification-email`` or ``notification-inapp`` of the one runner (``outbox worker
--lane notification-email`` is the same). The e-mail channel writes one e-mail row per recipient
kind through the e-mail lane ``notification-email`` and runs that lane's worker beside the
consumer, so every e-mail guarantee (strict TLS, scrub, suppression, fenced marks) applies; it is
not started without SMTP settings. The in-app channel writes the feed's rows and needs no SMTP.
Both acknowledge an event only once every recipient is terminal, and park what cannot be
delivered on ``<topic>.dlq``. With ``--app`` the application's channel (its recipes, audiences
and hooks) runs; an app that describes none runs the built-in one with the app's settings.
"""

from __future__ import annotations

import click

from outbox_adapters.cli.lane_flags import chosen
from outbox_adapters.cli.lane_options import (
    broker_option,
    platform_owner_option,
    public_url_option,
    topic_option,
)
from outbox_adapters.cli.lane_run import start_lane
from outbox_adapters.cli.options import database_url, option
from outbox_adapters.cli.telemetry import metrics_options
from outbox_adapters.cli.wakeup import listen_option
from outbox_adapters.cli.worker_settings import smtp_options
from outbox_adapters.lanes.email_channel import EMAIL_CHANNEL_LANE
from outbox_adapters.lanes.inapp import INAPP_CHANNEL_GROUP

__all__ = ["consume_command"]

#: ``--channel``: the lane each one is.
CHANNEL_LANES = {"email": EMAIL_CHANNEL_LANE, "inapp": INAPP_CHANNEL_GROUP}


@click.command("consume")
@metrics_options
@option(
    "--channel",
    env="OUTBOX_CHANNEL",
    type=click.Choice(sorted(CHANNEL_LANES)),
    required=True,
    help="email: one e-mail per recipient kind; inapp: the dashboards' feed rows.",
)
@database_url(required=False)
@broker_option(required=False)
@topic_option
@smtp_options
@public_url_option
@platform_owner_option
@option("--drain", env="OUTBOX_DRAIN", is_flag=True, help="Exit once every event is settled.")
@listen_option
def consume_command(**_options: object) -> None:
    """Consume TOPIC into one channel until SIGTERM (or, with --drain, until nothing arrives)."""
    ctx = click.get_current_context()
    app, lane = chosen(ctx, CHANNEL_LANES[ctx.params["channel"]], builtin_fallback=True)
    start_lane(app, lane, drain=ctx.params["drain"])
