"""``outbox keys generate|rotate|seal-secrets``: keys of sealed payload fields (ADR 0010) and of the
webhook signing secrets at rest (ADR 0030)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from outbox_adapters.cli.operator import operator_store
from outbox_adapters.cli.options import (
    KEYS_OPTION,
    Failure,
    SettingError,
    connection_pool,
    database_url,
    encryption_keys,
    encryptor_from,
    lane_option,
    option,
    run,
)
from outbox_adapters.postgres.webhooks import SecretSealing, seal_stored_secrets
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.messages import JSONObject
from outbox_core.sealing import reseal

if TYPE_CHECKING:
    from outbox_core.operator import PayloadRewrites
    from outbox_core.ports import Encryptor

__all__ = ["keys_group", "seal_secrets_now"]


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
    read (a row a worker marks meanwhile is left alone). The webhook signing secrets are re-sealed
    too (plaintext ones sealed), whatever --lane says. Afterwards no unsent row and no secret
    needs the other keys: drop them from every worker's key list. Exit 1 if one could not be
    opened.
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

    async def rotate() -> tuple[PayloadRewrites, SecretSealing]:
        async with operator_store(database_url) as store:
            rows = await store.rewrite_payloads(rewrite, lane=lane, batch_size=batch_size)
        async with connection_pool(database_url) as pool:
            return rows, await seal_stored_secrets(pool, encryptor, rotate=True)

    report, sealing = run(rotate())
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
    _report_secrets(sealing, encryptor.active_key_id)
    failed = [f"{len(unreadable)} row(s)"] if unreadable else []
    failed += [f"{len(sealing.unreadable)} webhook secret(s)"] if sealing.unreadable else []
    if failed:
        raise Failure(f"{' and '.join(failed)} could not be re-sealed (see above)")


def _report_secrets(sealing: SecretSealing, active: str) -> None:
    click.echo(
        f"webhook secrets: re-sealed {len(sealing.resealed)}, sealed {len(sealing.sealed)} from"
        f" plaintext, under key {active!r}"
    )
    if sealing.changed:
        click.echo(
            f"{len(sealing.changed)} webhook secret(s) changed while being sealed (another pass"
            " wrote them), left as they were; run again"
        )
    for secret_id, reason in sorted(sealing.unreadable.items()):
        click.echo(f"cannot re-seal webhook secret {secret_id}: {reason}")


def seal_secrets_now(database_url: str, encryptor: Encryptor) -> SecretSealing:
    """Seal the plaintext webhook secrets under the active key and report it (also ``outbox
    schema apply`` with keys); :class:`Failure` when a sealed one can't be read."""

    async def seal() -> SecretSealing:
        async with connection_pool(database_url) as pool:
            return await seal_stored_secrets(pool, encryptor)

    sealing = run(seal())
    _report_secrets(sealing, encryptor.active_key_id)
    if sealing.unreadable:
        raise Failure(f"{len(sealing.unreadable)} webhook secret(s) could not be read (see above)")
    return sealing


@keys_group.command("seal-secrets")
@database_url()
@encryption_keys(required=True)
def keys_seal_secrets(
    database_url: str, encryption_keys: str | None, encryption_keys_file: str | None
) -> None:
    """Seal every webhook signing secret still stored in plaintext under the active (first) key.

    Run it once after turning encryption keys on (``outbox schema apply`` with the keys does the
    same). Secrets already sealed are left as they are; ``outbox keys rotate`` re-seals those.
    """
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    if encryptor is None:
        raise SettingError(f"{KEYS_OPTION}: give the key list (the first key seals)")
    seal_secrets_now(database_url, encryptor)
