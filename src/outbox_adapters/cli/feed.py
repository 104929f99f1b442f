"""``outbox feed prune``: the in-app feed's retention (B2, ADR 0022).

Deletes READ notifications created longer ago than ``--older-than``, in batches (each a short
transaction), and prints how many went. Unread notifications are never deleted, however old: the
feed is how the platform tells a tenant something, and an unread row has not been told yet.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

import click

from outbox_adapters.cli.options import database_errors, database_url, option, setting_error
from outbox_adapters.postgres.channels import prune

__all__ = ["feed_group", "parse_duration"]

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION: Final = re.compile(r"(\d{1,9})([smhdw])")


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``45s``, ``2w``: one whole number and one unit; ``ValueError``
    otherwise."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None or int(found[1]) == 0:
        raise ValueError(f"{text!r} is not a positive duration such as 90d, 12h, 30m, 45s or 2w")
    return timedelta(seconds=int(found[1]) * _UNITS[found[2]])


@click.group("feed")
def feed_group() -> None:
    """The in-app feed's maintenance."""


@feed_group.command("prune")
@database_url()
@option(
    "--older-than",
    env="OUTBOX_FEED_PRUNE_OLDER_THAN",
    required=True,
    metavar="DURATION",
    help="Delete read notifications created longer ago than this (90d, 12h, 30m, 45s, 2w).",
)
@option(
    "--batch-size",
    env="OUTBOX_FEED_PRUNE_BATCH_SIZE",
    type=click.IntRange(min=1, max=100_000),
    default=1000,
    show_default=True,
    help="Rows deleted per transaction.",
)
def prune_command(database_url: str, older_than: str, batch_size: int) -> None:
    """Delete READ notifications older than --older-than, in batches; unread ones stay."""
    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise setting_error("--older-than", "OUTBOX_FEED_PRUNE_OLDER_THAN", str(exc)) from None
    with database_errors():
        removed = prune(database_url, age, batch=batch_size)
    click.echo(f"feed prune: {removed} read notification(s) older than {older_than} removed")
