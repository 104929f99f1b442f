# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Sealed payload fields: which fields are sealed, sealing and opening them (ADR 0010).

Theory of operation
-------------------
The scrub (ADR 0006) leaves one residual open: the secret-bearing keys of a payload (one-time
links, a public token, a PDF) sit in plaintext in every pending and failed row, and a failed row
keeps them without a time limit. Sealing closes it. The producer seals those fields when it builds the message, the
row stores only ciphertext, and the handler opens them at send time, in memory, just before the
message is rendered. The scrub (:mod:`.scrub`) still removes the fields by *name* once the row is
sent, sealed or not.

A sealed field's value is a JSON object in place of the plaintext value::

    {"$sealed": "v1", "kid": "k2", "n": "<base64 nonce>", "ct": "<base64 ciphertext+tag>"}

- ``v1`` is AES-256-GCM with a 96-bit nonce and a 128-bit tag appended to the ciphertext. The
  plaintext is the field's value as compact JSON, so strings, numbers, lists and objects all round
  trip, and opening gives back exactly what was sealed.
- ``kid`` names the key that sealed it, so rotation can keep old keys for opening while new values
  are sealed under the active one (``outbox keys rotate`` re-seals the backlog; then the old key
  can go).
- The associated data (:func:`field_aad`) binds the value to its lane and field name: a ciphertext
  copied into another field or another lane's row does not open. It does not bind the row id,
  because a message is sealed before it has one.

This module is pure: it decides which values to seal or open and builds and checks their
envelopes (:mod:`outbox_core.envelope` holds the format and :class:`SealedValue`, re-exported here). The cipher is behind the :class:`~outbox_core.ports.Encryptor` port
(``outbox_adapters.crypto.AesGcmEncryptor``). Only *top-level* payload values are sealed or opened,
as only top-level keys are scrubbed. Error messages name fields and key ids, never values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from outbox_core._validators import key_names
from outbox_core.envelope import (
    ENVELOPE_VERSION,
    NONCE_BYTES,
    SEALED_MARKER,
    TAG_BYTES,
    SealedValue,
    is_key_id,
)
from outbox_core.errors import InvalidPayload
from outbox_core.scrub import DEFAULT_SECRET_KEYS

if TYPE_CHECKING:
    from outbox_core.messages import JSONObject
    from outbox_core.ports import Encryptor

__all__ = [
    "ENVELOPE_VERSION",
    "NONCE_BYTES",
    "SEALED_MARKER",
    "TAG_BYTES",
    "SealedValue",
    "SealingRules",
    "field_aad",
    "is_key_id",
    "is_sealed",
    "open_sealed",
    "reseal",
]

_AAD_CONTEXT: Final = "leased-outbox/sealed-field/v1"


def is_sealed(value: object) -> bool:
    """True when ``value`` claims to be a sealed value (a JSON object with the marker key)."""
    return isinstance(value, Mapping) and SEALED_MARKER in value


def field_aad(lane: str, field: str) -> bytes:
    """The associated data that binds a sealed value to its lane and field name.

    JSON-encoded, so no lane/field pair can be spelt like another (``("a", "b:c")`` is not
    ``("a:b", "c")``).
    """
    return json.dumps(
        [_AAD_CONTEXT, lane, field], ensure_ascii=False, separators=(",", ":")
    ).encode("utf-8")


def _plaintext(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _open_one(field: str, value: object, *, lane: str, encryptor: Encryptor | None) -> object:
    try:
        sealed = SealedValue.from_json(value)
    except InvalidPayload as exc:
        raise InvalidPayload(f"cannot decrypt field {field!r}: {exc}") from None
    if encryptor is None:
        raise InvalidPayload(
            f"cannot decrypt field {field!r}: it is sealed under key id {sealed.kid!r} and no"
            " encryption keys are configured"
        )
    if sealed.kid not in encryptor.key_ids:
        raise InvalidPayload(
            f"cannot decrypt field {field!r}: key id {sealed.kid!r} is not configured"
        )
    try:
        plaintext = encryptor.open(sealed, aad=field_aad(lane, field))
    except InvalidPayload as exc:
        raise InvalidPayload(f"cannot decrypt field {field!r}: {exc}") from None
    try:
        return json.loads(plaintext.decode("utf-8"), parse_constant=_no_constant)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are both ValueErrors
        raise InvalidPayload(
            f"cannot decrypt field {field!r}: the opened value is not UTF-8 JSON"
        ) from None


def open_sealed(payload: JSONObject, *, lane: str, encryptor: Encryptor | None) -> dict[str, Any]:
    """A copy of ``payload`` with every sealed top-level value opened; other values untouched.

    Every sealed value is opened, whether or not its field is in today's :class:`SealingRules`, so
    a change of configuration never strands a row. Raises :class:`InvalidPayload` naming the field
    and the key id (``cannot decrypt field 'x': key id 'k1' is not configured``): the row cannot be
    sent as it stands, so it fails at once.
    """
    return {
        key: _open_one(key, value, lane=lane, encryptor=encryptor) if is_sealed(value) else value
        for key, value in payload.items()
    }


@attrs.frozen
class SealingRules:
    """Which top-level payload fields a producer seals. By default the scrubbed ones."""

    #: The fields to seal when present. Keep them within the lane's scrub keys, so what is sealed
    #: while unsent is also removed once sent.
    fields: frozenset[str] = attrs.field(
        default=DEFAULT_SECRET_KEYS, validator=key_names("SealingRules.")
    )

    def seal(self, payload: JSONObject, *, lane: str, encryptor: Encryptor) -> dict[str, Any]:
        """A copy of ``payload`` with each configured field that is present sealed under the
        active key. A value that is already sealed is kept as it is (never sealed twice)."""
        return {
            key: (
                encryptor.seal(_plaintext(value), aad=field_aad(lane, key)).to_json()
                if key in self.fields and not is_sealed(value)
                else value
            )
            for key, value in payload.items()
        }


def reseal(payload: JSONObject, *, lane: str, encryptor: Encryptor) -> dict[str, Any] | None:
    """Key rotation: a copy of ``payload`` with every value sealed under another key than the
    active one opened and sealed again under the active key; ``None`` when there is none.

    Raises :class:`InvalidPayload` (as :func:`open_sealed`) when a value can't be opened.
    """
    active = encryptor.active_key_id
    stale = [
        key for key, value in payload.items() if is_sealed(value) and value.get("kid") != active
    ]
    if not stale:
        return None
    resealed = dict(payload)
    for key in stale:
        value = _open_one(key, payload[key], lane=lane, encryptor=encryptor)
        resealed[key] = encryptor.seal(_plaintext(value), aad=field_aad(lane, key)).to_json()
    return resealed


# --- webhook signing secrets at rest (ADR 0030) ---------------------------------------------------

__all__ += ["webhook_secret_aad"]

_SECRET_AAD_CONTEXT: Final = "leased-outbox/webhook-secret/v1"  # noqa: S105 - a label, not a secret


def webhook_secret_aad(endpoint_id: int, scheme: str = "v1") -> bytes:
    """The associated data that binds a sealed webhook signing secret to its endpoint and purpose.

    A sealed secret copied into another endpoint's row, or into a payload field (whose associated
    data is :func:`field_aad`'s), does not authenticate. An Ed25519 private key (scheme ``v1a``)
    is bound to its scheme too: read as another scheme's key, it does not open. JSON-encoded like
    :func:`field_aad`.
    """
    parts: list[object] = [_SECRET_AAD_CONTEXT, "signing", endpoint_id]
    if scheme != "v1":
        parts.append(scheme)
    return json.dumps(parts, separators=(",", ":")).encode("ascii")
