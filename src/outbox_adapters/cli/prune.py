"""``outbox prune``: retention for every outbox table (ADR 0025;
:mod:`outbox_adapters.postgres.retention`).

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
from outbox_adapters.postgres.retention import PRUNABLE, prune

__all__ = ["age_setting", "parse_duration", "prune_command", "retention_options"]

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


@click.command("prune")
@database_url()
@retention_options("PRUNE", "what was sent (or read)")
@option(
    "--only",
    env="OUTBOX_PRUNE_ONLY",
    multiple=True,
    type=click.Choice(list(PRUNABLE)),
    help="Prune only these (repeat the option); every table by default.",
)
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
    batch_size: int,
    pause: float,
    as_json: bool,  # noqa: FBT001
) -> None:
    """Delete delivered rows older than --older-than, in short batches; pending and failed stay."""
    age = age_setting(older_than, "PRUNE")
    with database_errors():
        removed = prune(database_url, age, batch=batch_size, only=only or None, pause=pause)
    if as_json:
        click.echo(json.dumps({"older_than": older_than, "removed": removed}))
        return
    width = max(len(kind) for kind in removed)
    click.echo(f"prune: older than {older_than}")
    for kind, count in removed.items():
        click.echo(f"  {kind:<{width}}  {count} removed")
