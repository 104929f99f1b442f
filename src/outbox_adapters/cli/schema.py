"""``outbox schema sql|apply|verify``: print, apply or check the outbox tables' DDL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

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
from outbox_adapters.postgres.upgrades import DEFAULT_EXISTING_TENANT
from outbox_adapters.webhook_scope import check_tenant
from outbox_core.errors import InvalidMessage

__all__ = ["schema_group"]

F = TypeVar("F", bound=Callable[..., Any])


@click.group("schema")
def schema_group() -> None:
    """Print, apply or verify the outbox tables' DDL."""


def _tenant(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return check_tenant(value)
    except InvalidMessage as exc:
        raise click.BadParameter(str(exc)) from None


def _existing_tenant() -> Callable[[F], F]:
    return click.option(
        "--existing-tenant",
        default=DEFAULT_EXISTING_TENANT,
        show_default=True,
        envvar="OUTBOX_EXISTING_TENANT",
        show_envvar=True,
        callback=_tenant,
        help="The tenant given to webhook endpoints and events written by a release without"
        " tenants (docs/guides/webhooks.md, 'Tenants').",
    )


@schema_group.command("sql")
@_existing_tenant()
def schema_sql(existing_tenant: str) -> None:
    """Print the DDL and the upgrade of an earlier release's rows (for review, or for your own
    migration tool)."""
    click.echo(schema.ddl_sql(existing_tenant), nl=False)


@schema_group.command("apply")
@database_url()
@encryption_keys()
@_existing_tenant()
def schema_apply(
    database_url: str,
    encryption_keys: str | None,
    encryption_keys_file: str | None,
    existing_tenant: str,
) -> None:
    """Create whatever is missing (IF NOT EXISTS; never alters what exists), then give the webhook
    endpoints and events of a release without tenants one tenant, in one transaction. With
    encryption keys, also seal the webhook signing secrets stored in plaintext (``outbox keys
    seal-secrets``)."""
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    with database_errors():
        changed = schema.apply(database_url, existing_tenant=existing_tenant)
    click.echo(f"schema applied ({len(schema.ddl_statements())} statements, IF NOT EXISTS)")
    for what, rows in changed.items():
        click.echo(f"upgraded: {rows} {what} given the tenant {existing_tenant!r}")
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
