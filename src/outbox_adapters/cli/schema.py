"""``outbox schema sql|apply|verify``: print, apply or check the outbox tables' DDL."""

from __future__ import annotations

import click

from outbox_adapters.cli.keys import seal_secrets_now
from outbox_adapters.cli.options import (
    Failure,
    database_errors,
    database_url,
    encryption_keys,
    encryptor_from,
)
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
@encryption_keys()
def schema_apply(
    database_url: str, encryption_keys: str | None, encryption_keys_file: str | None
) -> None:
    """Create whatever is missing (IF NOT EXISTS; never alters what exists). With encryption
    keys, also seal the webhook signing secrets stored in plaintext (``outbox keys
    seal-secrets``)."""
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    with database_errors():
        schema.apply(database_url)
    click.echo(f"schema applied ({len(schema.ddl_statements())} statements, IF NOT EXISTS)")
    if encryptor is not None:
        seal_secrets_now(database_url, encryptor)


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
