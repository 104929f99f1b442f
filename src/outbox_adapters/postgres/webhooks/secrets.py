"""Webhook signing secrets at rest in PostgreSQL: the census a worker takes before it starts, and
the sealing pass behind ``outbox keys seal-secrets``, ``outbox keys rotate`` and ``outbox schema
apply --encryption-keys`` (ADR 0030).

What to seal or re-seal, and which key ids a worker needs, is decided in the core
(:mod:`outbox_core.webhook_secrets`); this module reads the rows and writes them back. The pass is
one transaction, and each row is written only if it still holds the text that was read (a
compare-and-set): a pass with an older key list that read a secret before another pass re-sealed
it must not write it back under a key the operator is about to drop.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres.errors import mapped_outages
from outbox_core.errors import SecretUnavailable
from outbox_core.ports import Encryptor
from outbox_core.webhook_secrets import (
    check_secret_keys,
    is_sealed_secret,
    reseal_secret,
    stored_key_id,
)

__all__ = [
    "RESEAL_SECRET",
    "SEAL_COMMAND",
    "SecretCensus",
    "SecretRewrite",
    "SecretSealing",
    "StoredSecret",
    "plan_sealing",
    "read_stored_secrets",
    "seal_stored_secrets",
    "secret_census",
    "write_sealing",
]

#: The command an operator runs to seal plaintext secrets (named in every warning about them).
SEAL_COMMAND: Final = "outbox keys seal-secrets"

#: Every stored secret; ``live``: unexpired now (only those sign, so only they need a key).
STORED_SECRETS: Final = """
SELECT s.id, s.endpoint_id, s.secret,
       (s.expires_at IS NULL OR s.expires_at > now()) AS live,
       coalesce(e.scheme, 'v1') AS scheme
FROM outbox_webhook_secret AS s
JOIN outbox_webhook_endpoint AS e ON e.id = s.endpoint_id
ORDER BY s.id
"""

#: One secret's new text, compare-and-set on the text the pass read.
RESEAL_SECRET: Final = """
UPDATE outbox_webhook_secret
SET secret = %(new)s
WHERE id = %(id)s AND secret = %(old)s
RETURNING id
"""  # noqa: S105 - SQL that writes a secret, not a secret


@attrs.frozen
class StoredSecret:
    """One row of ``outbox_webhook_secret`` as stored (``secret`` sealed or ``whsec_...``)."""

    id: int
    endpoint_id: int
    secret: str = attrs.field(repr=False)
    live: bool
    #: The endpoint's signature scheme (``v1`` or ``v1a``): which key the secret holds.
    scheme: str = "v1"


@attrs.frozen
class SecretCensus:
    """How the live secrets are stored: plaintext ones, and the endpoints under each key id."""

    plaintext: tuple[int, ...]
    sealed_under: Mapping[str, tuple[int, ...]]

    def check(self, encryptor: Encryptor | None) -> None:
        """:class:`ConfigurationError` naming a key id the live secrets need and ``encryptor``
        lacks."""
        check_secret_keys(self.sealed_under, encryptor)

    def warning(self, encryptor: Encryptor | None) -> str | None:
        """The line to log when keys are configured but some live secrets are plaintext."""
        if encryptor is None or not self.plaintext:
            return None
        endpoints = ", ".join(map(str, sorted(set(self.plaintext))))
        return (
            f"{len(self.plaintext)} webhook signing secret(s) (endpoint(s) {endpoints}) are"
            " stored in PLAINTEXT although encryption keys are configured; they still sign, but"
            f" anyone who reads the database can sign as you: run `{SEAL_COMMAND}` (or `outbox"
            " schema apply` with the keys) to seal them"
        )


@attrs.frozen
class SecretSealing:
    """What one sealing pass did (secret row ids; never a secret)."""

    #: Plaintext secrets now sealed under the active key.
    sealed: tuple[int, ...] = ()
    #: Secrets sealed under another key, now re-sealed under the active one (rotation only).
    resealed: tuple[int, ...] = ()
    #: Secrets changed by someone else between the read and the write: left as they are.
    changed: tuple[int, ...] = ()
    #: Secrets that could not be opened: row id -> the reason (names the key id).
    unreadable: Mapping[int, str] = attrs.field(factory=dict)


async def read_stored_secrets(conn: AsyncConnection[Any]) -> list[StoredSecret]:
    cur = conn.cursor(row_factory=dict_row)
    await cur.execute(STORED_SECRETS)
    return [StoredSecret(**record) for record in await cur.fetchall()]


@mapped_outages
async def secret_census(pool: AsyncConnectionPool[Any]) -> SecretCensus:
    """How the live secrets are stored now (a worker takes it before it starts, and again at each
    endpoint-health sweep)."""
    async with pool.connection() as conn:
        stored = await read_stored_secrets(conn)
    sealed_under: defaultdict[str, list[int]] = defaultdict(list)
    plaintext: list[int] = []
    for row in (r for r in stored if r.live):
        try:
            kid = stored_key_id(row.secret, endpoint_id=row.endpoint_id)
        except SecretUnavailable:
            kid = "(malformed envelope)"  # no key opens it: named so the worker refuses
        if kid is None:
            plaintext.append(row.endpoint_id)
        else:
            sealed_under[kid].append(row.endpoint_id)
    return SecretCensus(
        plaintext=tuple(plaintext), sealed_under={k: tuple(v) for k, v in sealed_under.items()}
    )


@attrs.frozen
class SecretRewrite:
    """One row a sealing pass rewrites: as it was read, and its new text."""

    row: StoredSecret
    new: str = attrs.field(repr=False)


def plan_sealing(
    stored: Sequence[StoredSecret], encryptor: Encryptor, *, rotate: bool
) -> tuple[list[SecretRewrite], dict[int, str]]:
    """The rows to rewrite (sealed from plaintext, or re-sealed with ``rotate``) and those that
    can't be opened."""
    rewrites: list[SecretRewrite] = []
    unreadable: dict[int, str] = {}
    for row in stored:
        try:
            new = reseal_secret(
                row.secret,
                endpoint_id=row.endpoint_id,
                encryptor=encryptor,
                rotate=rotate,
                scheme=row.scheme,
            )
        except SecretUnavailable as exc:
            unreadable[row.id] = str(exc)
            continue
        if new is not None:
            rewrites.append(SecretRewrite(row, new))
    return rewrites, unreadable


async def write_sealing(
    conn: AsyncConnection[Any], rewrites: Sequence[SecretRewrite], unreadable: Mapping[int, str]
) -> SecretSealing:
    """Write each rewrite only where the row still holds what was read (in the caller's
    transaction)."""
    sealed: list[int] = []
    resealed: list[int] = []
    changed: list[int] = []
    for rewrite in rewrites:
        cur = await conn.execute(
            RESEAL_SECRET, {"id": rewrite.row.id, "old": rewrite.row.secret, "new": rewrite.new}
        )
        if not await cur.fetchall():
            changed.append(rewrite.row.id)
        elif is_sealed_secret(rewrite.row.secret):
            resealed.append(rewrite.row.id)
        else:
            sealed.append(rewrite.row.id)
    return SecretSealing(
        sealed=tuple(sealed),
        resealed=tuple(resealed),
        changed=tuple(changed),
        unreadable=dict(unreadable),
    )


@mapped_outages
async def seal_stored_secrets(
    pool: AsyncConnectionPool[Any], encryptor: Encryptor, *, rotate: bool = False
) -> SecretSealing:
    """Seal every plaintext secret under the active key (``outbox keys seal-secrets``, ``outbox
    schema apply`` with keys); with ``rotate`` also re-seal those sealed under another key
    (``outbox keys rotate``). Expired secrets too: none is left for a dropped key. One
    transaction."""
    async with pool.connection() as conn, conn.transaction():
        rewrites, unreadable = plan_sealing(
            await read_stored_secrets(conn), encryptor, rotate=rotate
        )
        return await write_sealing(conn, rewrites, unreadable)
