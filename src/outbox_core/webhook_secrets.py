# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Webhook signing secrets at rest: how a stored secret is written, read and re-sealed (ADR 0030).

Theory of operation
-------------------
Whoever reads an endpoint's signing secret can sign as the library, so with encryption keys
configured the secret is stored sealed, like a secret payload field (ADR 0010), and opened only in
the process that signs a request. ``outbox_webhook_secret.secret`` holds one of two forms:

- **plaintext** ``whsec_<base64>`` (or ``whsk_<base64>``, an Ed25519 private key of a ``v1a``
  endpoint): no keys configured, or written before sealing was turned on;
- **sealed**: the compact JSON of the envelope of :mod:`outbox_core.sealing`
  (``{"$sealed":"v1","kid":...,"n":...,"ct":...}``), whose plaintext is the raw key bytes and
  whose associated data is :func:`~outbox_core.sealing.webhook_secret_aad` of the endpoint id (and
  of the scheme, for ``v1a``). A sealed secret copied to another endpoint's row does not open, nor
  does one read as the other scheme's key.

Which scheme a stored secret belongs to is its endpoint's (``scheme``, ADR 0017): every function
here that reads one takes it.

A sealed secret that can't be opened raises :class:`~outbox_core.errors.SecretUnavailable` naming
the endpoint and the key id; a request is never signed with less than every live secret. Which
stored secrets a sealing pass rewrites is :func:`reseal_secret`'s call; which key ids a worker
needs before it starts is :func:`check_secret_keys`'. Messages never hold key material.

Pure: the cipher is behind the :class:`~outbox_core.ports.Encryptor` port.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from outbox_core.errors import ConfigurationError, InvalidPayload, SecretUnavailable
from outbox_core.sealing import SealedValue, webhook_secret_aad
from outbox_core.signing_keys import V1, V1A, SigningKey, WebhookSecret

if TYPE_CHECKING:
    from outbox_core.ports import Encryptor

__all__ = [
    "SCHEMES",
    "SECRET_UNAVAILABLE",
    "StoredKey",
    "check_scheme",
    "check_secret_keys",
    "is_sealed_secret",
    "read_secret",
    "reseal_secret",
    "store_secret",
    "stored_key_id",
]


#: The error class of a delivery attempt whose secret can't be opened (the reason follows a colon).
#: Our key configuration's fault, not the receiver's: endpoint health does not count it.
SECRET_UNAVAILABLE: Final = "signing secret unavailable, nothing sent"  # noqa: S105 - a label


#: The signature schemes an endpoint can sign with: HMAC-SHA256 (the default) and Ed25519.
SCHEMES: Final = (V1, V1A)

#: What an endpoint's stored secret holds: a v1 secret, or a v1a private key.
StoredKey = WebhookSecret | SigningKey


def check_scheme(scheme: object) -> str:
    """``scheme`` if it is one of :data:`SCHEMES`, else :class:`ConfigurationError` naming them."""
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"a webhook signature scheme is 'v1' (HMAC-SHA256) or 'v1a' (Ed25519), got {scheme!r:.40}"
        )
    return str(scheme)


def is_sealed_secret(stored: str) -> bool:
    """True for a stored secret in the sealed form (plaintext ones start with ``whsec_``)."""
    return stored.lstrip().startswith("{")


def _envelope(stored: str, endpoint_id: int) -> SealedValue:
    try:
        return SealedValue.from_json(json.loads(stored))
    except (ValueError, InvalidPayload) as exc:  # JSONDecodeError is a ValueError
        reason = exc if isinstance(exc, InvalidPayload) else "it is not JSON"
        raise SecretUnavailable(
            f"the stored signing secret of webhook endpoint {endpoint_id} is not a sealed value"
            f" ({reason})"
        ) from None


def stored_key_id(stored: str, *, endpoint_id: int) -> str | None:
    """The key id a stored secret is sealed under; ``None`` for a plaintext one."""
    return _envelope(stored, endpoint_id).kid if is_sealed_secret(stored) else None


def _raw(key: StoredKey) -> bytes:
    return key.key if isinstance(key, WebhookSecret) else key.private


def _scheme_of(key: StoredKey) -> str:
    return V1 if isinstance(key, WebhookSecret) else V1A


def store_secret(secret: StoredKey, *, endpoint_id: int, encryptor: Encryptor | None) -> str:
    """The text to store for ``secret``: sealed under the active key (ADR 0030), or the plaintext
    ``whsec_...`` (``whsk_...``) without keys."""
    if encryptor is None:
        return secret.to_text()
    aad = webhook_secret_aad(endpoint_id, _scheme_of(secret))
    sealed = encryptor.seal(_raw(secret), aad=aad)
    return json.dumps(sealed.to_json(), separators=(",", ":"))


def _key(raw: bytes, scheme: str) -> StoredKey:
    return SigningKey(raw) if scheme == V1A else WebhookSecret(raw)


def _parsed(stored: str, endpoint_id: int, scheme: str) -> StoredKey:
    try:
        return SigningKey.parse(stored) if scheme == V1A else WebhookSecret.parse(stored)
    except ConfigurationError as exc:
        raise SecretUnavailable(
            f"the stored signing secret of webhook endpoint {endpoint_id} (scheme {scheme}) does"
            f" not read: {exc}"
        ) from None


def read_secret(
    stored: str, *, endpoint_id: int, encryptor: Encryptor | None, scheme: str = V1
) -> StoredKey:
    """The signing secret (``v1``) or private key (``v1a``) a stored text holds, opened when it
    is sealed; ``scheme`` is the endpoint's.

    Raises :class:`SecretUnavailable` naming the endpoint and the key id when it can't be opened.
    """
    if not is_sealed_secret(stored):
        return _parsed(stored, endpoint_id, scheme)
    sealed = _envelope(stored, endpoint_id)
    whose = f"the signing secret of webhook endpoint {endpoint_id} is sealed under key id"
    if encryptor is None:
        raise SecretUnavailable(f"{whose} {sealed.kid!r} and no encryption keys are configured")
    if sealed.kid not in encryptor.key_ids:
        raise SecretUnavailable(
            f"{whose} {sealed.kid!r}, which is not among the configured key ids"
            f" {sorted(encryptor.key_ids)}"
        )
    try:
        return _key(encryptor.open(sealed, aad=webhook_secret_aad(endpoint_id, scheme)), scheme)
    except (InvalidPayload, ConfigurationError):
        raise SecretUnavailable(
            f"the signing secret of webhook endpoint {endpoint_id} does not open under key id"
            f" {sealed.kid!r}: it was altered, copied from another endpoint or scheme, or sealed under"
            " another key of that id"
        ) from None


def reseal_secret(
    stored: str, *, endpoint_id: int, encryptor: Encryptor, rotate: bool, scheme: str = V1
) -> str | None:
    """What a sealing pass writes for ``stored``, or ``None`` to leave it.

    A plaintext secret is sealed under the active key. With ``rotate`` (``outbox keys rotate``) a
    secret sealed under another key is opened and sealed again under the active one. Raises
    :class:`SecretUnavailable` when a secret to re-seal can't be opened.
    """
    kid = stored_key_id(stored, endpoint_id=endpoint_id)
    if kid is not None and (not rotate or kid == encryptor.active_key_id):
        return None
    secret = read_secret(stored, endpoint_id=endpoint_id, encryptor=encryptor, scheme=scheme)
    return store_secret(secret, endpoint_id=endpoint_id, encryptor=encryptor)


def check_secret_keys(
    sealed_under: Mapping[str, Sequence[int]], encryptor: Encryptor | None
) -> None:
    """Refuse to start a sender that lacks a key its live secrets need.

    ``sealed_under`` maps each key id that seals a live (unexpired) secret to the endpoints whose
    secrets it seals. Raises :class:`ConfigurationError` naming the first missing key id.
    """
    have = frozenset() if encryptor is None else encryptor.key_ids
    for kid in sorted(sealed_under):
        if kid in have:
            continue
        endpoints = ", ".join(map(str, sorted(set(sealed_under[kid]))))
        configured = (
            "no encryption keys are configured"
            if encryptor is None
            else f"the configured key ids are {sorted(have)}"
        )
        raise ConfigurationError(
            f"the signing secrets of webhook endpoint(s) {endpoints} are sealed under key id"
            f" {kid!r}, and {configured}: add key {kid!r} to the encryption keys"
            " (--encryption-keys / OUTBOX_ENCRYPTION_KEYS) before starting the webhook worker"
        )
