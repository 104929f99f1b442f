"""``outbox prune``: retention for every outbox table (ADR 0025;
:mod:`outbox_adapters.postgres.retention`).

::

    outbox prune --older-than 30d [--only messages --only events ...] [--broker-retention 7d]
                 [--batch-size 1000] [--pause 0.05] [--json]

Without ``--only`` it deletes dispatched webhook-outbox rows and delivered webhook deliveries (each
endpoint's newest success stays: the health sweep reads it) older than ``--older-than``. Sent
e-mails, published events and read notifications are dedup records, pruned only when named and
never under the broker's retention (``--broker-retention``): such a run exits 2 naming both
figures. Each table goes in short batches that lock only the rows they delete; pending and failed
rows stay. Prints the rows removed per table (one JSON document with ``--json``). Run it from cron
or a scheduler; a second run at the same time skips what the first holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

import click

from outbox_adapters.cli.options import (
    database_errors,
    database_url,
    json_option,
    option,
    setting_error,
)
from outbox_adapters.postgres.retention import (
    DEFAULT_KINDS,
    PRUNABLE,
    PruneRefused,
    check_ages,
    prune,
)

__all__ = [
    "age_setting",
    "broker_retention_option",
    "checked_ages",
    "parse_duration",
    "prune_command",
    "retention_options",
]

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION: Final = re.compile(r"(\d{1,9})([smhdw])")


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``45s``, ``2w``: one whole number and one unit; ``ValueError``
    otherwise."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None or int(found[1]) == 0:
        raise ValueError(f"{text!r} is not a positive duration such as 90d, 12h, 30m, 45s or 2w")
    return timedelta(seconds=int(found[1]) * _UNITS[found[2]])


def retention_options(env: str, what: str) -> Callable[[Any], Any]:
    """``--older-than`` (required) and ``--batch-size``, their variables ``OUTBOX_<env>_...``."""

    def decorate(command: Any) -> Any:  # noqa: ANN401 - a click command
        command = option(
            "--batch-size",
            env=f"OUTBOX_{env}_BATCH_SIZE",
            type=click.IntRange(min=1, max=100_000),
            default=1000,
            show_default=True,
            help="Rows looked at (and at most deleted) per statement.",
        )(command)
        return option(
            "--older-than",
            env=f"OUTBOX_{env}_OLDER_THAN",
            required=True,
            metavar="DURATION",
            help=f"Delete {what} longer ago than this: 90d, 12h, 30m, 45s, 2w.",
        )(command)

    return decorate


def age_setting(older_than: str, env: str) -> timedelta:
    """``--older-than`` parsed, or the one-line setting error naming it."""
    try:
        return parse_duration(older_than)
    except ValueError as exc:
        raise setting_error("--older-than", f"OUTBOX_{env}_OLDER_THAN", str(exc)) from None


def broker_retention_option(env: str) -> Callable[[Any], Any]:
    """``--broker-retention`` (``OUTBOX_<env>_BROKER_RETENTION``, 7 days): the floor of the
    kinds that are dedup records (:func:`~outbox_adapters.postgres.retention.check_ages`)."""
    return option(
        "--broker-retention",
        env=f"OUTBOX_{env}_BROKER_RETENTION",
        default="7d",
        show_default=True,
        metavar="DURATION",
        help="How long the broker keeps an event (the streams' max age): sent e-mails, events"
        " and read notifications are not pruned younger than this.",
    )


def checked_ages(kinds: list[str], age: timedelta, broker_retention: str, env: str) -> timedelta:
    """The broker's retention parsed, once ``kinds`` may be pruned at ``age``; else the one-line
    setting error naming the option and both figures."""
    try:
        retention = parse_duration(broker_retention)
    except ValueError as exc:
        raise setting_error(
            "--broker-retention", f"OUTBOX_{env}_BROKER_RETENTION", str(exc)
        ) from None
    try:
        check_ages(kinds, age, broker_retention=retention)
    except PruneRefused as exc:
        raise setting_error("--older-than", f"OUTBOX_{env}_OLDER_THAN", str(exc)) from None
    return retention


@click.command("prune")
@database_url()
@retention_options("PRUNE", "what was sent (or read)")
@option(
    "--only",
    env="OUTBOX_PRUNE_ONLY",
    multiple=True,
    type=click.Choice(list(PRUNABLE)),
    help=(
        "Prune these (repeat the option). Default: "
        + " and ".join(DEFAULT_KINDS)
        + "; messages, events and notifications only when named."
    ),
)
@broker_retention_option("PRUNE")
@option(
    "--pause",
    env="OUTBOX_PRUNE_PAUSE",
    type=click.FloatRange(min=0, max=60),
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Sleep between batches, to leave the disk and CPU to busy workers.",
)
@json_option
def prune_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    older_than: str,
    only: tuple[str, ...],
    broker_retention: str,
    batch_size: int,
    pause: float,
    as_json: bool,  # noqa: FBT001
) -> None:
    """Delete delivered rows older than --older-than, in short batches; pending and failed stay.
    Dedup records (sent e-mails, events, read notifications) only when named, never under the
    broker's retention."""
    age = age_setting(older_than, "PRUNE")
    retention = checked_ages(list(only) or list(DEFAULT_KINDS), age, broker_retention, "PRUNE")
    with database_errors():
        removed = prune(
            database_url,
            age,
            batch=batch_size,
            only=only or None,
            pause=pause,
            broker_retention=retention,
        )
    if as_json:
        click.echo(json.dumps({"older_than": older_than, "removed": removed}))
        return
    width = max(len(kind) for kind in removed)
    click.echo(f"prune: older than {older_than}")
    for kind, count in removed.items():
        click.echo(f"  {kind:<{width}}  {count} removed")
