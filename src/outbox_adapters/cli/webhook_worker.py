"""``outbox worker --lane webhooks``: the webhook drainer, the deliveries' first attempts and the
retry worker of this process, until SIGTERM/SIGINT (or, with ``--drain``, until nothing is due)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

import attrs
import click

from outbox_adapters.cli.endpoints import destination_guard
from outbox_adapters.cli.options import (
    KEYS_OPTION,
    Failure,
    SettingError,
    connection_pool,
    database_errors,
    describe_secrets,
    run,
    setting_error,
    stop_on_signals,
)
from outbox_adapters.cli.wakeup import lane_wakeups
from outbox_adapters.http import DestinationGuard, HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookStats, WebhookWorkers
from outbox_adapters.lanes.webhooks import WEBHOOK_LANE, delivery_lane, drain_lane
from outbox_adapters.postgres import PostgresHeartbeat, schema
from outbox_adapters.runtime import LaneConfig
from outbox_core.errors import ConfigurationError
from outbox_core.ports import Encryptor

__all__ = ["run_webhook_workers"]


def _guard(allow: Sequence[str], *, allow_http: bool, environment: str) -> DestinationGuard:
    if allow_http and environment.strip().casefold() == "production":
        raise setting_error(
            "--allow-http", "OUTBOX_ALLOW_HTTP", "webhooks go to https:// URLs only in production"
        )
    return destination_guard(allow, allow_http=allow_http)


def run_webhook_workers(  # noqa: PLR0913 - the worker command's options for this lane
    database_url: str,
    *,
    allow: Sequence[str],
    allow_http: bool,
    environment: str,
    drain: bool,
    leader: bool,
    listen: bool,
    poll_interval: float,
    encryptor: Encryptor | None = None,
) -> None:
    guard = _guard(allow, allow_http=allow_http, environment=environment)
    try:
        drain_config = drain_lane(poll_interval=poll_interval)
        delivery_config = delivery_lane(poll_interval=poll_interval)
    except ConfigurationError as exc:
        raise SettingError(f"webhook lanes: {exc}") from None
    click.echo(f"drainer timing: {drain_config.timing.describe()}")
    click.echo(f"deliveries timing: {delivery_config.timing.describe()}")
    click.echo(guard.describe())
    click.echo(describe_secrets(encryptor))
    with database_errors():
        problems = schema.verify(database_url)
    if problems:
        raise Failure(f"the outbox schema is incomplete ({problems[0]}): run `outbox schema apply`")
    try:
        stats = run(
            _work(
                database_url,
                guard,
                drain_config,
                delivery_config,
                encryptor,
                drain=drain,
                leader=leader,
                listen=listen,
            )
        )
    except ConfigurationError as exc:  # a key the stored secrets need is missing: nothing ran
        raise SettingError(f"{KEYS_OPTION}: {exc}") from None
    for part in ("drainer", "first_attempts", "retries"):
        figures = attrs.asdict(getattr(stats, part))
        click.echo(f"{part}: " + ", ".join(f"{k} {v}" for k, v in figures.items() if v))
    click.echo(f"endpoints disabled: {stats.endpoints_disabled}")


async def _work(  # noqa: PLR0913 - the validated settings
    database_url: str,
    guard: DestinationGuard,
    drain_config: LaneConfig,
    delivery_config: LaneConfig,
    encryptor: Encryptor | None,
    *,
    drain: bool,
    leader: bool,
    listen: bool,
) -> WebhookStats:
    holder = f"{socket.gethostname()}:{os.getpid()}"
    # Claims and marks of two lanes, the leader lease, and up to 32 first attempts' marks.
    async with (
        connection_pool(database_url, max_size=12) as pool,
        lane_wakeups(
            database_url,
            [WEBHOOK_LANE],
            listen=listen,
            poll_interval=drain_config.poll_interval,
        ) as (wakeup,),
        HttpxWebhookSender(guard) as sender,
    ):
        workers = WebhookWorkers(
            pool,
            sender,
            heartbeat=PostgresHeartbeat(pool),
            drain_config=drain_config,
            delivery_config=delivery_config,
            leader=leader,
            holder=holder,
            wakeup=wakeup,
            encryptor=encryptor,
        )
        click.echo(
            f"lanes webhooks + webhook_deliveries: holder {holder}, leader lease"
            f" {'on' if leader else 'off'}, {'drain' if drain else 'until SIGTERM/SIGINT'}"
        )
        with stop_on_signals(workers.request_stop):
            return await workers.run(drain=drain)
