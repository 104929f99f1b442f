"""``outbox schema sql|apply|verify``: print, apply or check the outbox tables' DDL."""

from __future__ import annotations

import click

from outbox_adapters.cli.options import Failure, database_errors, database_url
from outbox_adapters.postgres import schema

__all__ = ["schema_group"]


@click.group("schema")
def schema_group() -> None:
    """Print, apply or verify the outbox tables' DDL."""


@schema_group.command("sql")
def schema_sql() -> None:
    """Print the DDL (for review, or for your own migration tool)."""
    click.echo(schema.ddl_sql(), nl=False)


@schema_group.command("apply")
@database_url()
def schema_apply(database_url: str) -> None:
    """Create whatever is missing (IF NOT EXISTS; never alters what exists)."""
    with database_errors():
        schema.apply(database_url)
    click.echo(f"schema applied ({len(schema.ddl_statements())} statements, IF NOT EXISTS)")


@schema_group.command("verify")
@database_url()
def schema_verify(database_url: str) -> None:
    """Check every table, column, index, check constraint and trigger; exit 1 listing what is missing."""
    with database_errors():
        problems = schema.verify(database_url)
    if problems:
        for problem in problems:
            click.echo(f"schema problem: {problem}")
        raise Failure(f"the schema has {len(problems)} problem(s); `outbox schema apply` adds them")
    click.echo("schema OK: every table, column, index, check constraint and trigger is present")
