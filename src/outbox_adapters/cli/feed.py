"""``outbox feed prune``: the in-app feed's retention (ADR 0022, ADR 0025).

Deletes READ notifications created longer ago than ``--older-than``, in batches (each a short
transaction), and prints how many went. Unread notifications are never deleted, however old: the
feed is how the platform tells a tenant something, and an unread row has not been told yet.
"""

from __future__ import annotations

import click

from outbox_adapters.cli.options import database_errors, database_url
from outbox_adapters.cli.prune import age_setting, retention_options
from outbox_adapters.postgres.channels import prune

__all__ = ["feed_group"]


@click.group("feed")
def feed_group() -> None:
    """The in-app feed's maintenance."""


@feed_group.command("prune")
@database_url()
@retention_options("FEED_PRUNE", "read notifications created")
def prune_command(database_url: str, older_than: str, batch_size: int) -> None:
    """Delete READ notifications older than --older-than, in batches; unread ones stay."""
    age = age_setting(older_than, "FEED_PRUNE")
    with database_errors():
        removed = prune(database_url, age, batch=batch_size)
    click.echo(f"feed prune: {removed} read notification(s) older than {older_than} removed")
