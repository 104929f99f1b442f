"""Webhook signing keys for the repositories, the sender and the CLI: which scheme a key text
names, the Ed25519 primitive, and the signer an attempt signs with (ADR 0017).

- :func:`parse_signing_secret` reads what a host or the CLI registers: ``whsec_...`` (or bare
  base64) is a ``v1`` HMAC secret, ``whsk_...`` a ``v1a`` Ed25519 private key. The prefix is the
  choice of scheme (Standard Webhooks: "a unique and consistent secret format allows
  implementations to use the correct scheme without additional configuration"). A ``whsk_`` key
  needs the ``crypto`` extra: without it, registration fails here with
  :class:`~outbox_adapters.extras.MissingExtra` naming ``pip install 'leased-outbox[crypto]'``.
- :class:`CryptographyEd25519` is the :class:`~outbox_core.ports.Ed25519` port on the
  ``cryptography`` package (OpenSSL), imported when one is built, never at import time.
- :func:`signer_of` turns a stored key into what signs an attempt; :func:`public_key_of` derives
  the ``whpk_`` a receiver verifies with.

Key generation needs no library: an Ed25519 private key is 32 random bytes (RFC 8032, 5.1.5).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, Final

from outbox_adapters.extras import missing_extra, require
from outbox_adapters.webhook_model import WebhookRefused
from outbox_core.errors import ConfigurationError, SecretUnavailable
from outbox_core.signing_keys import (
    SIGNING_KEY_PREFIX,
    V1,
    V1A,
    Ed25519Signer,
    PublicKey,
    Signer,
    SigningKey,
    WebhookSecret,
)
from outbox_core.webhook_secrets import StoredKey, check_scheme

if TYPE_CHECKING:
    from outbox_core.ports import Ed25519

__all__ = [
    "CryptographyEd25519",
    "check_rotation",
    "ed25519",
    "new_signing_secret",
    "parse_signing_secret",
    "public_key_of",
    "scheme_of",
    "signer_of",
    "verify_with",
]

_WHAT: Final = "a v1a (Ed25519) webhook signing key"


class CryptographyEd25519:
    """:class:`~outbox_core.ports.Ed25519` on ``cryptography``; raises
    :class:`~outbox_adapters.extras.MissingExtra` at construction without the ``crypto`` extra."""

    __slots__ = ("_invalid", "_private", "_public")

    def __init__(self) -> None:
        try:
            from cryptography.exceptions import InvalidSignature  # noqa: PLC0415 - the extra
            from cryptography.hazmat.primitives.asymmetric import ed25519 as curve  # noqa: PLC0415
        except ImportError as exc:
            raise missing_extra(exc, _WHAT) from None
        self._private: Any = curve.Ed25519PrivateKey
        self._public: Any = curve.Ed25519PublicKey
        self._invalid: type[Exception] = InvalidSignature

    def public_key(self, private_key: bytes) -> bytes:
        key = self._private.from_private_bytes(private_key)
        return bytes(key.public_key().public_bytes_raw())

    def sign(self, private_key: bytes, message: bytes) -> bytes:
        return bytes(self._private.from_private_bytes(private_key).sign(message))

    def verify(self, public_key: bytes, signature: bytes, message: bytes) -> bool:
        try:
            self._public.from_public_bytes(public_key).verify(signature, message)
        except (self._invalid, ValueError):
            return False
        return True

    def __repr__(self) -> str:
        return "CryptographyEd25519()"


_shared: list[CryptographyEd25519] = []


def ed25519() -> Ed25519:
    """The process's :class:`CryptographyEd25519` (built once); :class:`MissingExtra` without the
    ``crypto`` extra."""
    if not _shared:
        _shared.append(CryptographyEd25519())
    return _shared[0]


def parse_signing_secret(text: str) -> StoredKey:
    """What a registration or rotation passes: ``whsk_...`` is a ``v1a`` key (the ``crypto``
    extra is checked now), anything else a ``v1`` secret (``whsec_...`` or bare base64)."""
    if isinstance(text, str) and text.strip().startswith(SIGNING_KEY_PREFIX):
        key = SigningKey.parse(text)
        require("crypto", _WHAT)
        Ed25519Signer(key, ed25519())  # a 64-byte key's halves must agree: refused now
        return key
    return WebhookSecret.parse(text)


def scheme_of(key: StoredKey) -> str:
    """``v1`` for a :class:`WebhookSecret`, ``v1a`` for a :class:`SigningKey`."""
    return V1A if isinstance(key, SigningKey) else V1


def check_rotation(endpoint_id: int, scheme: str, key: StoredKey) -> None:
    """Refuse a rotation to a key of another scheme than the endpoint's (its receiver holds a
    ``whsec_`` secret or a ``whpk_`` public key, not both)."""
    if scheme_of(key) != scheme:
        needs = "a whsk_ Ed25519 key" if scheme == V1A else "a whsec_ secret"
        raise WebhookRefused(
            f"webhook endpoint {endpoint_id} signs with scheme {scheme}: rotate it with {needs}"
            f" (got a {scheme_of(key)} one); nothing was changed"
        )


def new_signing_secret(scheme: str) -> str:
    """A fresh key's text for ``scheme``: ``whsec_`` of 32 random bytes, or ``whsk_`` of a new
    Ed25519 private key (32 random bytes)."""
    entropy = secrets.token_bytes(32)
    if check_scheme(scheme) == V1A:
        return SigningKey.generate_from(entropy).to_text()
    return WebhookSecret.generate_from(entropy).to_text()


def signer_of(key: StoredKey, *, endpoint_id: int) -> Signer:
    """What signs an attempt with ``key``. A ``v1a`` key on a host without the ``crypto`` extra
    raises :class:`SecretUnavailable` (the attempt posts nothing and is retried, ADR 0030)."""
    if isinstance(key, WebhookSecret):
        return key
    try:
        return Ed25519Signer(key, ed25519())
    except ConfigurationError as exc:
        raise SecretUnavailable(
            f"webhook endpoint {endpoint_id} signs v1a (Ed25519) and its key can't sign: {exc}"
        ) from None


def verify_with(key_text: str) -> str:
    """What the receiver of an endpoint signing with ``key_text`` verifies with: a ``v1``
    ``whsec_`` secret itself, or the ``whpk_`` PUBLIC key of a ``v1a`` ``whsk_`` key (the private
    key is never handed out)."""
    key = parse_signing_secret(key_text)
    return public_key_of(key).to_text() if isinstance(key, SigningKey) else key.to_text()


def public_key_of(key: SigningKey) -> PublicKey:
    """The ``whpk_`` public key of ``key``: what the endpoint's receiver verifies with."""
    return Ed25519Signer(key, ed25519()).public_key
