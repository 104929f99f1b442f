"""``outbox keys generate|rotate``: keys of sealed payload fields (B1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from outbox_adapters.cli.operator import operator_store
from outbox_adapters.cli.options import (
    KEYS_OPTION,
    Failure,
    SettingError,
    database_url,
    encryption_keys,
    encryptor_from,
    lane_option,
    option,
    run,
)
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.messages import JSONObject
from outbox_core.sealing import reseal

if TYPE_CHECKING:
    from outbox_core.operator import PayloadRewrites

__all__ = ["keys_group"]


@click.group("keys")
def keys_group() -> None:
    """Keys of sealed payload fields: generate one, re-seal unsent rows under the active key."""


@keys_group.command("generate")
@click.argument("kid")
def keys_generate(kid: str) -> None:
    """Print a new kid:base64key entry (256 random bits) to put FIRST in the key list."""
    try:
        from outbox_adapters.crypto import format_key_entry, generate_key  # noqa: PLC0415
    except ImportError:
        raise Failure("keys need the crypto extra: pip install 'leased-outbox[crypto]'") from None
    try:
        click.echo(format_key_entry(kid, generate_key()))
    except ConfigurationError as exc:
        raise SettingError(f"KID: {exc}") from None


@keys_group.command("rotate")
@database_url()
@encryption_keys(required=True)
@lane_option(None, "Only rows of this lane.")
@option(
    "--batch-size",
    env="OUTBOX_ROTATE_BATCH_SIZE",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Rows per transaction.",
)
def keys_rotate(
    database_url: str,
    encryption_keys: str | None,
    encryption_keys_file: str | None,
    lane: str | None,
    batch_size: int,
) -> None:
    """Re-seal the sealed fields of pending and failed rows under the active (first) key.

    Each batch is one transaction, and each row is written only if its payload is still the one
    read (a row a worker marks meanwhile is left alone). Afterwards no unsent row needs the other
    keys: drop them from every worker's key list. Exit 1 if a row could not be opened.
    """
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    if encryptor is None:
        raise SettingError(f"{KEYS_OPTION}: give the key list (the first key is the new one)")
    unreadable: dict[int, str] = {}

    def rewrite(row_id: int, row_lane: str, payload: JSONObject) -> dict[str, Any] | None:
        try:
            return reseal(payload, lane=row_lane, encryptor=encryptor)
        except InvalidMessage as exc:
            unreadable[row_id] = str(exc)  # names the field and the key id, never a value
            return None

    async def rotate() -> PayloadRewrites:
        async with operator_store(database_url) as store:
            return await store.rewrite_payloads(rewrite, lane=lane, batch_size=batch_size)

    report = run(rotate())
    click.echo(
        f"re-sealed {len(report.rewritten)} row(s) under key {encryptor.active_key_id!r}"
        f" ({report.examined} unsent row(s) read in {report.batches} batch(es) of at most"
        f" {batch_size})"
    )
    if report.changed:
        click.echo(
            f"{len(report.changed)} row(s) changed while being re-sealed (a worker marked them),"
            " left as they were; run again to pick up any still unsent"
        )
    for row_id, reason in sorted(unreadable.items()):
        click.echo(f"cannot re-seal row {row_id}: {reason}")
    if unreadable:
        raise Failure(f"{len(unreadable)} row(s) could not be re-sealed (see above)")
