"""``outbox consume --channel email|inapp``: one consumer channel of the event stream (ADR 0021).

The e-mail channel writes one e-mail row per recipient kind through the e-mail lane
``notification-email`` and runs that lane's worker beside the consumer, so every e-mail guarantee
(strict TLS, scrub, suppression, fenced marks) applies; it is not started without SMTP settings.
The in-app channel writes the feed's rows and needs no SMTP. Both acknowledge an event only once
every recipient is terminal, and park what cannot be delivered on ``<topic>.dlq``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import click

from outbox_adapters.brokers import BrokerUrl, connect_broker
from outbox_adapters.cli.events import DEFAULT_TOPIC, broker_option, stream_specs
from outbox_adapters.cli.options import (
    Failure,
    SettingError,
    connection_pool,
    database_errors,
    database_url,
    option,
    run,
    setting_error,
    stop_on_signals,
)
from outbox_adapters.cli.telemetry import metrics_options
from outbox_adapters.cli.wakeup import lane_wakeups, listen_option
from outbox_adapters.cli.worker_settings import smtp_options, smtp_settings
from outbox_adapters.lanes.channel_workers import (
    ChannelTiming,
    EmailChannelWorkers,
    inapp_consumer,
)
from outbox_adapters.lanes.email_channel import (
    EMAIL_CHANNEL_GROUP,
    check_public_url,
    email_channel_disabled_warning,
    email_channel_lane,
    platform_recipes,
)
from outbox_adapters.lanes.inapp import INAPP_CHANNEL_GROUP
from outbox_adapters.postgres import PostgresHeartbeat, schema
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.mail import validate_address

__all__ = ["consume_command"]


def drain_timing(broker_url: str) -> ChannelTiming:
    """With --drain a consumer stops once everything it got is settled and nothing arrived for a
    while: 1 s on NATS; 8 s on Kafka, whose consumer group needs a few seconds to join and get
    its partitions before the first message can arrive."""
    idle = 8.0 if BrokerUrl.parse(broker_url).broker == "kafka" else 1.0
    return ChannelTiming(drain_idle=timedelta(seconds=idle))


@click.command("consume")
@metrics_options
@option(
    "--channel",
    env="OUTBOX_CHANNEL",
    type=click.Choice(["email", "inapp"]),
    required=True,
    help="email: one e-mail per recipient kind; inapp: the dashboards' feed rows.",
)
@database_url()
@broker_option(required=True)
@option("--topic", env="OUTBOX_TOPIC", default=DEFAULT_TOPIC, show_default=True, help="Topic.")
@smtp_options
@option(
    "--public-url",
    env="OUTBOX_PUBLIC_URL",
    metavar="URL",
    help="The application's public URL, for the links in e-mails (email channel: required).",
)
@option(
    "--platform-owner",
    env="OUTBOX_PLATFORM_OWNER",
    metavar="ADDR",
    help="Who is told of every new tenant (owner_notify); none: that e-mail is left out.",
)
@option("--drain", env="OUTBOX_DRAIN", is_flag=True, help="Exit once every event is settled.")
@listen_option
def consume_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    channel: str,
    database_url: str,
    broker: str,
    topic: str,
    smtp_url: str | None,
    smtp_tls: str,
    sender: str | None,
    sender_name: str | None,
    allow_plaintext: bool,  # noqa: FBT001
    environment: str,
    smtp_ca_file: str | None,
    smtp_sessions: int,
    public_url: str | None,
    platform_owner: str | None,
    drain: bool,  # noqa: FBT001
    listen: bool,  # noqa: FBT001
) -> None:
    """Consume TOPIC into one channel until SIGTERM (or, with --drain, until nothing arrives)."""
    del sender_name
    specs = stream_specs([topic], 7.0)
    with database_errors():
        problems = schema.verify(database_url)
    if problems:
        raise Failure(f"the outbox schema is incomplete ({problems[0]}): run `outbox schema apply`")
    if channel == "inapp":
        stats: Any = run(_inapp(database_url, broker, topic, specs, drain=drain))
    else:
        if smtp_url is None or sender is None:
            click.echo(email_channel_disabled_warning(), err=True)
            raise SettingError("--smtp-url and --sender are required for --channel email")
        if public_url is None:
            raise setting_error("--public-url", "OUTBOX_PUBLIC_URL", "required for --channel email")
        try:
            recipes = platform_recipes(
                check_public_url(public_url),
                validate_address(platform_owner) if platform_owner else None,
            )
        except (ConfigurationError, InvalidMessage) as exc:
            raise SettingError(f"--public-url / --platform-owner: {exc}") from None
        if platform_owner is None:
            click.echo("no --platform-owner: owner_notify e-mails are left out", err=True)
        smtp = smtp_settings(
            smtp_url,
            tls=smtp_tls,
            sender=sender,
            environment=environment,
            allow_plaintext=allow_plaintext,
            ca_file=smtp_ca_file,
            sessions=smtp_sessions,
        )
        click.echo(smtp.describe())
        stats = run(
            _email(
                database_url,
                broker,
                topic,
                specs,
                smtp=smtp,
                sender=sender,
                recipes=recipes,
                drain=drain,
                listen=listen,
            )
        )
    click.echo("consumer stopped: " + _figures(stats))


def _figures(stats: Any) -> str:  # noqa: ANN401 - the channel's stats
    figures = attrs.asdict(stats) if attrs.has(type(stats)) else {}
    flat: dict[str, Any] = {}
    for key, value in figures.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items() if v})
        elif value:
            flat[key] = value
    return ", ".join(f"{k} {v}" for k, v in flat.items()) or "nothing done"


async def _inapp(url: str, broker_url: str, topic: str, specs: Any, *, drain: bool) -> Any:  # noqa: ANN401
    broker = await connect_broker(broker_url, streams=specs)
    try:
        async with connection_pool(url, max_size=3) as pool:
            consumer = inapp_consumer(
                pool,
                broker.consumer(INAPP_CHANNEL_GROUP, [topic]),
                broker.publisher(),
                timing=drain_timing(broker_url),
            )
            click.echo(f"channel inapp: {topic} at {broker_url.rsplit('@', maxsplit=1)[-1]}")
            with stop_on_signals(consumer.request_stop):
                return await consumer.run(drain=drain)
    finally:
        await broker.aclose()


async def _email(  # noqa: PLR0913 - the validated settings
    url: str,
    broker_url: str,
    topic: str,
    specs: Any,  # noqa: ANN401
    *,
    smtp: Any,  # noqa: ANN401
    sender: str,
    recipes: Any,  # noqa: ANN401
    drain: bool,
    listen: bool,
) -> Any:  # noqa: ANN401
    from outbox_adapters.smtp import SmtpMailer  # noqa: PLC0415 - the smtp extra

    broker = await connect_broker(broker_url, streams=specs)
    try:
        config = email_channel_lane()
        async with (
            connection_pool(url, max_size=5) as pool,
            SmtpMailer(smtp) as mailer,
            # The channel's e-mail rows are written by this very process: the wake-up makes the
            # lane's worker send them at once instead of at its next poll.
            lane_wakeups(url, [config.lane], listen=listen, poll_interval=config.poll_interval) as (
                wakeup,
            ),
        ):
            workers = EmailChannelWorkers(
                pool,
                broker.consumer(EMAIL_CHANNEL_GROUP, [topic]),
                broker.publisher(),
                mailer,
                sender=sender,
                recipes=recipes,
                lane_config=config,
                timing=drain_timing(broker_url),
                wakeup=wakeup,
                heartbeat=PostgresHeartbeat(pool),
            )
            click.echo(f"channel email: {topic} at {broker_url.rsplit('@', maxsplit=1)[-1]}")
            with stop_on_signals(workers.request_stop):
                return await workers.run(drain=drain)
    finally:
        await broker.aclose()
