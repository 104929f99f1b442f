"""``outbox feed prune``: the in-app feed's retention (ADR 0022, ADR 0025).

Deletes READ notifications created longer ago than ``--older-than``, in batches (each a short
transaction), and prints how many went. Unread notifications are never deleted, however old: the
feed is how the platform tells a tenant something, and an unread row has not been told yet. A read
notification is also the in-app channel's dedup record, so ``--older-than`` may not be under the
broker's retention (``--broker-retention``, 7 days).
"""

from __future__ import annotations

import click

from outbox_adapters.cli.options import database_errors, database_url
from outbox_adapters.cli.prune import (
    age_setting,
    broker_retention_option,
    checked_ages,
    retention_options,
)
from outbox_adapters.postgres.channels import prune

__all__ = ["feed_group"]


@click.group("feed")
def feed_group() -> None:
    """The in-app feed's maintenance."""


@feed_group.command("prune")
@database_url()
@retention_options("FEED_PRUNE", "read notifications created")
@broker_retention_option("FEED_PRUNE")
def prune_command(
    database_url: str, older_than: str, batch_size: int, broker_retention: str
) -> None:
    """Delete READ notifications older than --older-than, in batches; unread ones stay. Never
    under the broker's retention (a read notification is the in-app channel's dedup record)."""
    age = age_setting(older_than, "FEED_PRUNE")
    checked_ages(["notifications"], age, broker_retention, "FEED_PRUNE")
    with database_errors():
        removed = prune(database_url, age, batch=batch_size)
    click.echo(f"feed prune: {removed} read notification(s) older than {older_than} removed")
