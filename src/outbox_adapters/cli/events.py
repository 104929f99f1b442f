"""``outbox publish|relay|consume|dlq``: domain events from the command line (ADR 0019-0021).

- ``publish`` writes one event into the event outbox in a transaction of its own (a host does it in
  its business transaction with ``outbox_adapters.postgres.events.publish``).
- ``relay`` runs the relay lane (leader-gated): unpublished events to the broker, in key order,
  ``published_at`` only after the broker's acknowledgement. Without a broker it says so and exits.
- ``consume --channel email|inapp`` runs one consumer channel; the e-mail channel also runs the
  worker of its e-mail lane (every e-mail guarantee applies) and needs SMTP settings.
- ``dlq list|redrive`` shows the parked events of a topic without consuming them, or puts them back.
"""

from __future__ import annotations

import json
from typing import Any

import click

from outbox_adapters.brokers import connect_broker
from outbox_adapters.cli.lane_flags import chosen
from outbox_adapters.cli.lane_options import (
    broker_option,
    max_age_option,
    topic_option,
    topics_option,
)
from outbox_adapters.cli.lane_run import start_lane
from outbox_adapters.cli.operator import default_actor
from outbox_adapters.cli.options import (
    SettingError,
    database_errors,
    database_url,
    json_option,
    option,
    run,
    setting_error,
)
from outbox_adapters.cli.telemetry import metrics_options
from outbox_adapters.cli.wakeup import listen_option
from outbox_adapters.lanes.relay import relay_disabled_warning
from outbox_adapters.postgres.channels import PostgresParkLedger
from outbox_adapters.postgres.events import RELAY_LANE, publish
from outbox_adapters.postgres.pools import open_pool
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.untrusted import printable

__all__ = ["dlq_group", "publish_command", "relay_command"]

#: Longest ``--reason`` (as ``outbox requeue``'s).
MAX_REASON = 500
#: Dead letters read to find the ids a redrive of "all of them" puts back.
_ALL = 100_000


@click.command("publish")
@database_url()
@topic_option
@option("--key", env="OUTBOX_EVENT_KEY", required=True, help="Partition key (per-key order).")
@option("--type", "event_type", env="OUTBOX_EVENT_TYPE", required=True, help="Event type.")
@option("--data", env="OUTBOX_EVENT_DATA", required=True, metavar="JSON", help="A JSON object.")
@option("--source", env="OUTBOX_EVENT_SOURCE", default="app", show_default=True, help="Source.")
@option("--event-id", env="OUTBOX_EVENT_ID", help="The event's id (default: a new uuid4).")
@json_option
def publish_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    topic: str,
    key: str,
    event_type: str,
    data: str,
    source: str,
    event_id: str | None,
    as_json: bool,  # noqa: FBT001
) -> None:
    """Write one event into the event outbox (the relay publishes it)."""
    try:
        fields = json.loads(data)
    except ValueError:
        raise setting_error("--data", "OUTBOX_EVENT_DATA", "not JSON") from None
    with database_errors():
        import psycopg  # noqa: PLC0415 - the postgres extra, present when this runs

        with psycopg.connect(database_url) as conn, conn.transaction():
            try:
                made = publish(
                    conn, topic=topic, key=key, type=event_type, data=fields, source=source,
                    event_id=event_id,
                )  # fmt: skip
            except InvalidMessage as exc:
                raise SettingError(f"the event was refused, nothing was written: {exc}") from None
    if as_json:
        click.echo(json.dumps({"event_id": made.event.id, "created": made.created}))
        return
    verb = "published to the outbox" if made.created else "already in the outbox (nothing written)"
    click.echo(f"event {made.event.id} {verb}: {event_type} on {topic}, key {key}")


@click.command("relay")
@metrics_options
@database_url()
@broker_option(required=False)
@topics_option
@max_age_option
@option("--drain", env="OUTBOX_DRAIN", is_flag=True, help="Exit once nothing is left to publish.")
@option(
    "--leader/--no-leader",
    env="OUTBOX_LEADER",
    default=True,
    show_default=True,
    help="Hold the relay's leader lease (one relay across replicas).",
)
@option(
    "--poll-interval",
    env="OUTBOX_POLL_INTERVAL",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Sleep after a claim that found less than a batch.",
)
@listen_option
def relay_command(**_options: object) -> None:
    """Publish the event outbox to the broker, in key order, until SIGTERM (or --drain).

    The lane ``events`` of the one runner (``outbox worker --lane events`` is the same)."""
    ctx = click.get_current_context()
    app, lane = chosen(ctx, RELAY_LANE, builtin_fallback=True)
    if app.broker is None:
        click.echo(relay_disabled_warning(), err=True)
        return
    start_lane(app, lane, drain=ctx.params["drain"])


@click.group("dlq")
def dlq_group() -> None:
    """Dead letters: the events a consumer channel parked (list without consuming; redrive)."""


@dlq_group.command("list")
@broker_option(required=True)
@topic_option
@option(
    "--limit", env="OUTBOX_DLQ_LIMIT", type=click.IntRange(min=1), default=100, show_default=True
)
@json_option
def dlq_list_command(broker: str, topic: str, limit: int, as_json: bool) -> None:  # noqa: FBT001
    """The parked events of TOPIC, newest last: id, group, kind, reason, attempts."""
    letters = run(_dead_letters(broker, topic, limit))
    if as_json:
        click.echo(json.dumps({"dead_letters": [_letter_json(d) for d in letters]}))
        return
    if not letters:
        click.echo(f"no dead letters on {topic}")
    for d in letters:
        # Every field came from the broker: escaped, so no escape sequence reaches the terminal
        # and no CR/LF forges a line (JSON escapes them by itself).
        group, kind, reason = (printable(v) for v in (d.group or "-", d.kind or "-", d.reason))
        click.echo(f"{printable(d.message_id)}  {group}  {kind}  attempts {d.attempts}  {reason}")


@dlq_group.command("redrive")
@broker_option(required=True)
@topic_option
@database_url(
    required=False,
    help_text="The channels' database: the parks of the redriven events are lifted there, so a"
    " recipient whose e-mail row failed is sent again (without it, only the broker is touched).",
)
@option(
    "--actor",
    env="OUTBOX_ACTOR",
    default=default_actor,
    show_default="$USER@host",
    help="Who redrives (kept in the requeue audit of each row sent again).",
)
@option(
    "--reason",
    env="OUTBOX_REDRIVE_REASON",
    metavar="TEXT",
    help="Why (a ticket, one line): kept in the requeue audit beside who and when.",
)
@click.argument("ids", nargs=-1)
def dlq_redrive_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    broker: str,
    topic: str,
    database_url: str | None,
    actor: str,
    reason: str | None,
    ids: tuple[str, ...],
) -> None:
    """Put parked events (IDS, or all of them) back on their source topic. With --database-url
    (OUTBOX_DATABASE_URL) their parks are lifted first: each channel tries them again, and the
    e-mail channel puts a failed recipient's row back to pending, audited like `outbox requeue`."""
    if reason is not None and (len(reason) > MAX_REASON or not reason.isprintable()):
        raise setting_error(
            "--reason", "OUTBOX_REDRIVE_REASON", f"one printable line of at most {MAX_REASON}"
        )
    lifted, moved = run(_redrive(broker, topic, list(ids) or None, database_url, actor, reason))
    click.echo(f"{moved} event(s) put back on {topic}")
    if lifted is None:
        click.echo(
            "the channels' parks were not lifted (no --database-url): a recipient whose e-mail"
            " row failed stays failed",
            err=True,
        )
    else:
        click.echo(f"{lifted} park(s) lifted: their channels try those recipients again")


def _letter_json(letter: Any) -> dict[str, Any]:  # noqa: ANN401 - a DeadLetter
    return {
        "message_id": letter.message_id,
        "group": letter.group,
        "kind": letter.kind,
        "reason": letter.reason,
        "attempts": letter.attempts,
        "subject": letter.subject,
    }


async def _dead_letters(url: str, topic: str, limit: int) -> list[Any]:
    broker = await _broker(url)
    try:
        return list(await broker.dead_letters(topic, limit=limit))
    finally:
        await broker.aclose()


async def _redrive(  # noqa: PLR0913, PLR0917 - the command's settings
    url: str,
    topic: str,
    ids: list[str] | None,
    database_url: str | None,
    actor: str,
    reason: str | None,
) -> tuple[int | None, int]:
    """(parks lifted, None without a database; events put back). The parks are lifted BEFORE
    the events go back, so a channel that gets one finds its park lifted."""
    broker = await _broker(url)
    try:
        lifted = None
        if database_url is not None:
            chosen = ids or [d.message_id for d in await broker.dead_letters(topic, limit=_ALL)]
            with database_errors():
                lifted = await _lift(database_url, chosen, actor, reason)
        return lifted, int(await broker.redrive(topic, ids))
    finally:
        await broker.aclose()


async def _lift(database_url: str, ids: list[str], actor: str, reason: str | None) -> int:
    pool = await open_pool(database_url, name="outbox-dlq-redrive")
    try:
        return await PostgresParkLedger(pool).redriven(ids, actor=actor, reason=reason)
    finally:
        await pool.close()


async def _broker(url: str) -> Any:  # noqa: ANN401 - a Broker
    try:
        return await connect_broker(url)
    except ConfigurationError as exc:
        raise setting_error("--broker", "OUTBOX_BROKER", str(exc)) from None
