"""``outbox prune``: retention for every outbox table (catalogue B2; :mod:`outbox_adapters.postgres.retention`).

::

    outbox prune --older-than 30d [--only messages --only events ...] [--batch-size 1000] [--json]

Deletes sent e-mails, dispatched webhook-outbox rows, delivered webhook deliveries, published
events and read notifications older than ``--older-than``, each table in short batches that lock
only the rows they delete; pending and failed rows stay. Prints the rows removed per table (one
JSON document with ``--json``). Run it from cron or a scheduler; a second run at the same time
skips what the first holds.
"""

from __future__ import annotations

import json

import click

from outbox_adapters.cli.endpoints import json_option
from outbox_adapters.cli.feed import parse_duration
from outbox_adapters.cli.options import database_errors, database_url, option, setting_error
from outbox_adapters.postgres.retention import PRUNABLE, prune

__all__ = ["prune_command"]


@click.command("prune")
@database_url()
@option(
    "--older-than",
    env="OUTBOX_PRUNE_OLDER_THAN",
    required=True,
    metavar="DURATION",
    help="Delete what was sent (or read) longer ago than this: 90d, 12h, 30m, 45s, 2w.",
)
@option(
    "--only",
    env="OUTBOX_PRUNE_ONLY",
    multiple=True,
    type=click.Choice(list(PRUNABLE)),
    help="Prune only these (repeat the option); every table by default.",
)
@option(
    "--batch-size",
    env="OUTBOX_PRUNE_BATCH_SIZE",
    type=click.IntRange(min=1, max=100_000),
    default=1000,
    show_default=True,
    help="Rows looked at (and at most deleted) per statement.",
)
@json_option
def prune_command(
    database_url: str,
    older_than: str,
    only: tuple[str, ...],
    batch_size: int,
    as_json: bool,  # noqa: FBT001
) -> None:
    """Delete delivered rows older than --older-than, in short batches; pending and failed stay."""
    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise setting_error("--older-than", "OUTBOX_PRUNE_OLDER_THAN", str(exc)) from None
    with database_errors():
        removed = prune(database_url, age, batch=batch_size, only=only or None)
    if as_json:
        click.echo(json.dumps({"older_than": older_than, "removed": removed}))
        return
    width = max(len(kind) for kind in removed)
    click.echo(f"prune: older than {older_than}")
    for kind, count in removed.items():
        click.echo(f"  {kind:<{width}}  {count} removed")
