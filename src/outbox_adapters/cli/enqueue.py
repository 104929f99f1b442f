"""``outbox enqueue email``: write one message to the outbox (an operator's smoke test)."""

from __future__ import annotations

from collections.abc import Sequence

import click
import psycopg

from outbox_adapters.cli.options import (
    SettingError,
    database_errors,
    database_url,
    encryption_keys,
    encryptor_from,
    lane_option,
    option,
    setting_error,
)
from outbox_adapters.lanes.email import EMAIL_LANE, email_message
from outbox_adapters.postgres import enqueue
from outbox_core.errors import InvalidMessage
from outbox_core.payload import RESERVED_KEYS

__all__ = ["enqueue_group"]


@click.group("enqueue")
def enqueue_group() -> None:
    """Write one message to the outbox (an operator's smoke test)."""


def _fields(pairs: Sequence[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise setting_error(
                "--field", "OUTBOX_ENQUEUE_FIELD", f"expected KEY=VALUE, got {key!r}"
            )
        if key in RESERVED_KEYS:
            raise setting_error(
                "--field",
                "OUTBOX_ENQUEUE_FIELD",
                f"{key!r} is a message part, set by its own option (--{key.replace('_', '-')})",
            )
        fields[key] = value
    return fields


@enqueue_group.command("email")
@database_url()
@option(
    "--to",
    "to",
    env="OUTBOX_ENQUEUE_TO",
    required=True,
    multiple=True,
    help="Recipient address (repeat for more).",
)
@option(
    "--subject",
    env="OUTBOX_ENQUEUE_SUBJECT",
    required=True,
    help="Subject ($name placeholders are filled from --field).",
)
@option("--text", env="OUTBOX_ENQUEUE_TEXT", required=True, help="Plain-text body template.")
@option("--html", env="OUTBOX_ENQUEUE_HTML", help="HTML body template.")
@option(
    "--field",
    "fields",
    env="OUTBOX_ENQUEUE_FIELD",
    multiple=True,
    metavar="KEY=VALUE",
    help="A payload field, e.g. password_reset_url=https://... (repeat).",
)
@option(
    "--idempotency-key",
    env="OUTBOX_ENQUEUE_IDEMPOTENCY_KEY",
    help="A second enqueue with the same key writes nothing.",
)
@lane_option(EMAIL_LANE, "Lane to write to.")
@encryption_keys()
def enqueue_email(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    to: tuple[str, ...],
    subject: str,
    text: str,
    html: str | None,
    fields: tuple[str, ...],
    idempotency_key: str | None,
    lane: str,
    encryption_keys: str | None,
    encryption_keys_file: str | None,
) -> None:
    """Enqueue one e-mail; prints its row id. With encryption keys, secret fields are sealed."""
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    try:
        message = email_message(
            to=list(to),
            subject=subject,
            text=text,
            html=html,
            fields=_fields(fields),
            idempotency_key=idempotency_key,
            lane=lane,
            encryptor=encryptor,
        )
    except InvalidMessage as exc:
        raise SettingError(f"the message was refused, nothing was written: {exc}") from None
    with (
        database_errors(),
        psycopg.connect(database_url, connect_timeout=10) as conn,
        conn.transaction(),
    ):
        result = enqueue(conn, message)
    if result.created:
        click.echo(f"enqueued as {result.row_id}")
    else:
        click.echo(f"already enqueued as {result.row_id} (idempotency key seen; nothing written)")
