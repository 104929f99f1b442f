"""The keys that sign and verify webhooks (ADR 0017): Standard Webhooks' two schemes.

==========  =====================  =============================================================
scheme      signs with             text forms (Standard Webhooks "secret serialization")
==========  =====================  =============================================================
``v1``      HMAC-SHA256            :class:`WebhookSecret`, ``whsec_<base64>`` (shared secret)
``v1a``     Ed25519 (RFC 8032)     :class:`SigningKey` ``whsk_<base64>`` (private, the sender's),
                                   :class:`PublicKey` ``whpk_<base64>`` (public, the receiver's)
==========  =====================  =============================================================

``whsk_`` is the base64 of the 32-byte private key of RFC 8032 (section 5.1.5); the 64-byte form
libsodium and Go's ``crypto/ed25519`` write (private key, then public key) is read too, and its
public half must be the private key's. ``whpk_`` is the base64 of the 32-byte public key. Both
prefixes are required: the prefix is what names the scheme.

A :class:`Signer` makes one scheme's ``webhook-signature`` entries and a :class:`Verifier` checks
them. :class:`WebhookSecret` is both (the HMAC is the standard library's). The Ed25519 curve is
behind the :class:`~outbox_core.ports.Ed25519` port (the adapter runs it, the core stays free of
any cryptography package): :class:`Ed25519Signer` binds a private key to it, and
:class:`Ed25519Verifier` a public key. No repr, str or message shows a secret or private key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Sequence
from typing import Final, Protocol, cast

import attrs

from outbox_core.errors import ConfigurationError
from outbox_core.ports import Ed25519

__all__ = [
    "ED25519_KEY_BYTES",
    "MAX_SECRET_BYTES",
    "MIN_SECRET_BYTES",
    "PUBLIC_KEY_PREFIX",
    "SECRET_PREFIX",
    "SIGNING_KEY_PREFIX",
    "V1",
    "V1A",
    "Ed25519Signer",
    "Ed25519Verifier",
    "PublicKey",
    "Signer",
    "SigningKey",
    "Verifier",
    "WebhookSecret",
    "as_verifiers",
]

#: The signature identifiers: symmetric (HMAC-SHA256) and asymmetric (Ed25519).
V1: Final = "v1"
V1A: Final = "v1a"

#: How secrets are written for people and config files (Standard Webhooks "secret serialization").
SECRET_PREFIX: Final = "whsec_"  # noqa: S105 (a format marker, not a secret)
#: An Ed25519 private key (the sender's) and public key (the receiver's).
SIGNING_KEY_PREFIX: Final = "whsk_"
PUBLIC_KEY_PREFIX: Final = "whpk_"
#: Standard Webhooks: a symmetric secret is random, "at least 24 bytes (192 bits, 512 maximum)".
MIN_SECRET_BYTES: Final = 24
#: 512 bits. HMAC-SHA256 hashes longer keys down to 32 bytes, so more adds nothing.
MAX_SECRET_BYTES: Final = 64
#: RFC 8032: an Ed25519 private key and a public key are 32 bytes each; a signature 64.
ED25519_KEY_BYTES: Final = 32
_SIGNATURE_BYTES: Final = 64
_SECRET_BASE64: Final = re.compile(r"[A-Za-z0-9+/]+={0,2}")


class Signer(Protocol):
    """What signs one scheme's entries: :class:`WebhookSecret` (``v1``) or
    :class:`Ed25519Signer` (``v1a``)."""

    @property
    def version(self) -> str:
        """The signature identifier its entries carry."""
        ...

    def signature(self, content: bytes) -> bytes:
        """The raw signature of the signed content (:func:`outbox_core.signing.signed_content`)."""
        ...

    def to_text(self) -> str:
        """The key's text form (``whsec_``/``whsk_``): what a response snippet must never echo."""
        ...


class Verifier(Protocol):
    """What checks one scheme's entries: :class:`WebhookSecret` (``v1``) or
    :class:`Ed25519Verifier` (``v1a``, a ``whpk_`` public key)."""

    @property
    def version(self) -> str: ...

    def matches(self, content: bytes, signature: bytes) -> bool:
        """Whether ``signature`` signs ``content`` under this key (constant time for HMAC)."""
        ...


def _decode(text: object, *, what: str, prefix: str, required: bool) -> bytes:
    """The bytes of ``<prefix><base64>`` (padding optional, outer whitespace ignored). Errors say
    what is wrong with the text and never repeat it."""
    if not isinstance(text, str):
        raise ConfigurationError(f"a {what} must be text, got {type(text).__name__}")
    stripped = text.strip()
    if required and not stripped.startswith(prefix):
        raise ConfigurationError(f"a {what} is written {prefix}<base64>; the {prefix!r} is missing")
    encoded = stripped.removeprefix(prefix)
    if not encoded:
        raise ConfigurationError(f"the {what} is empty")
    if _SECRET_BASE64.fullmatch(encoded) is None:
        optional = "" if required else "optional "
        raise ConfigurationError(
            f"the {what} is not standard base64 (after the {optional}{prefix!r} prefix)"
        )
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        raise ConfigurationError(
            f"the {what}'s base64 has a length or padding that cannot decode"
        ) from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


# --- v1: HMAC-SHA256 -------------------------------------------------------------------------------


def _key_validator(_inst: object, _attribute: object, key: bytes) -> None:
    if not isinstance(key, bytes):
        raise ConfigurationError(f"a webhook secret's key must be bytes, got {type(key).__name__}")
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise ConfigurationError(
            f"a webhook secret of {len(key)} bytes is refused: Standard Webhooks requires "
            f"{MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes"
        )


@attrs.frozen(repr=False)
class WebhookSecret:
    """An HMAC-SHA256 signing key (scheme ``v1``). Its repr and str never show the key."""

    #: The raw key bytes (24 to 64 of them); never logged.
    key: bytes = attrs.field(validator=_key_validator)

    @property
    def version(self) -> str:
        return V1

    def signature(self, content: bytes) -> bytes:
        """The HMAC-SHA256 of ``content``."""
        return hmac.new(self.key, content, hashlib.sha256).digest()

    def matches(self, content: bytes, signature: bytes) -> bool:
        return hmac.compare_digest(self.signature(content), signature)

    @classmethod
    def parse(cls, text: str) -> WebhookSecret:
        """Read ``whsec_<base64>`` or bare base64 (padding optional, outer whitespace ignored).

        Errors say what is wrong with the text and never repeat it.
        """
        return cls(_decode(text, what="webhook secret", prefix=SECRET_PREFIX, required=False))

    @classmethod
    def generate_from(cls, entropy: bytes) -> WebhookSecret:
        """A new secret from random bytes the caller drew (e.g. ``secrets.token_bytes(32)``).

        The core never draws randomness itself; the provisioning code passes it in.
        """
        return cls(entropy)

    def to_text(self) -> str:
        """The ``whsec_<base64>`` form to hand to the endpoint's owner. Treat it as a secret."""
        return SECRET_PREFIX + _b64(self.key)

    def __repr__(self) -> str:
        return f"WebhookSecret(<redacted, {len(self.key)} bytes>)"

    __str__ = __repr__


# --- v1a: Ed25519 ----------------------------------------------------------------------------------


def _ed25519_bytes(what: str) -> attrs._ValidatorType[bytes]:
    def check(_inst: object, _attribute: object, value: bytes) -> None:
        if not isinstance(value, bytes) or len(value) != ED25519_KEY_BYTES:
            got = f"{len(value)} bytes" if isinstance(value, bytes) else type(value).__name__
            raise ConfigurationError(
                f"an Ed25519 {what} key is {ED25519_KEY_BYTES} bytes (RFC 8032), got {got}"
            )

    return check


@attrs.frozen(repr=False)
class SigningKey:
    """An Ed25519 private key (scheme ``v1a``): the sender's, sealed at rest like a secret (ADR
    0030) and never shown. Its repr and str never show the key."""

    #: The 32-byte private key of RFC 8032; never logged.
    private: bytes = attrs.field(validator=_ed25519_bytes("private"))
    #: The public half of a 64-byte ``whsk_`` text, checked by :class:`Ed25519Signer`; else None.
    stated_public: bytes | None = attrs.field(
        default=None, validator=attrs.validators.optional(_ed25519_bytes("public"))
    )

    @classmethod
    def parse(cls, text: str) -> SigningKey:
        """Read ``whsk_<base64>`` of 32 bytes (or 64: private key, then public key)."""
        raw = _decode(text, what="whsk_ signing key", prefix=SIGNING_KEY_PREFIX, required=True)
        if len(raw) == ED25519_KEY_BYTES:
            return cls(raw)
        if len(raw) == 2 * ED25519_KEY_BYTES:
            return cls(raw[:ED25519_KEY_BYTES], raw[ED25519_KEY_BYTES:])
        raise ConfigurationError(
            f"the whsk_ signing key is {len(raw)} bytes: an Ed25519 private key is 32 bytes"
            " (or 64: the private key, then its public key)"
        )

    @classmethod
    def generate_from(cls, entropy: bytes) -> SigningKey:
        """A new key from 32 random bytes the caller drew (``secrets.token_bytes(32)``): RFC 8032's
        private key is exactly that. The core never draws randomness itself."""
        return cls(entropy)

    def to_text(self) -> str:
        """``whsk_`` + base64 of the 32-byte private key. Never shown to anyone."""
        return SIGNING_KEY_PREFIX + _b64(self.private)

    def __repr__(self) -> str:
        return "SigningKey(<redacted Ed25519 private key>)"

    __str__ = __repr__


@attrs.frozen
class PublicKey:
    """An Ed25519 public key (scheme ``v1a``): what the receiver verifies with. Not a secret."""

    key: bytes = attrs.field(validator=_ed25519_bytes("public"))

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """Read ``whpk_<base64>`` of 32 bytes."""
        raw = _decode(text, what="whpk_ public key", prefix=PUBLIC_KEY_PREFIX, required=True)
        if len(raw) != ED25519_KEY_BYTES:
            raise ConfigurationError(
                f"the whpk_ public key is {len(raw)} bytes: an Ed25519 public key is 32 bytes"
            )
        return cls(raw)

    def to_text(self) -> str:
        """``whpk_`` + base64 of the 32 bytes: hand it to the receiver."""
        return PUBLIC_KEY_PREFIX + _b64(self.key)

    def __repr__(self) -> str:
        return f"PublicKey({self.to_text()})"


@attrs.frozen(repr=False)
class Ed25519Signer:
    """A :class:`SigningKey` bound to the Ed25519 primitive: a :class:`Signer` of ``v1a``
    entries. Refuses a 64-byte key whose public half is not its private key's."""

    key: SigningKey
    ed25519: Ed25519
    #: Derived once, at construction.
    public_key: PublicKey = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        public = PublicKey(self.ed25519.public_key(self.key.private))
        stated = self.key.stated_public
        if stated is not None and not hmac.compare_digest(stated, public.key):
            raise ConfigurationError(
                "the whsk_ signing key's second half is not its private key's public key: the key"
                " text is corrupt (or two keys were pasted together)"
            )
        object.__setattr__(self, "public_key", public)

    @property
    def version(self) -> str:
        return V1A

    def signature(self, content: bytes) -> bytes:
        return self.ed25519.sign(self.key.private, content)

    def to_text(self) -> str:
        return self.key.to_text()

    def __repr__(self) -> str:
        return f"Ed25519Signer({self.public_key.to_text()})"


@attrs.frozen
class Ed25519Verifier:
    """A :class:`PublicKey` bound to the Ed25519 primitive: a :class:`Verifier` of ``v1a``."""

    key: PublicKey
    ed25519: Ed25519 = attrs.field(repr=False)

    @property
    def version(self) -> str:
        return V1A

    def matches(self, content: bytes, signature: bytes) -> bool:
        return len(signature) == _SIGNATURE_BYTES and self.ed25519.verify(
            self.key.key, signature, content
        )


def as_verifiers(keys: Sequence[object], ed25519: Ed25519 | None) -> list[Verifier]:
    """``keys`` as verifiers: a :class:`PublicKey` is bound to ``ed25519`` here; a
    :class:`WebhookSecret` or any other :class:`Verifier` is taken as it is."""
    if isinstance(keys, str | bytes) or not keys:
        raise ConfigurationError("at least one webhook secret is needed to verify a webhook")
    verifiers: list[Verifier] = []
    for key in keys:
        if isinstance(key, PublicKey):
            if ed25519 is None:
                raise ConfigurationError(
                    "a whpk_ public key verifies v1a (Ed25519) signatures through an Ed25519"
                    " implementation: pass ed25519=outbox_adapters.webhook_keys.ed25519()"
                )
            verifiers.append(Ed25519Verifier(key, ed25519))
        elif isinstance(getattr(key, "version", None), str) and callable(
            getattr(key, "matches", None)
        ):
            verifiers.append(cast("Verifier", key))  # checked structurally just above
        else:
            raise ConfigurationError(
                "a webhook is verified with WebhookSecret (whsec_) or PublicKey (whpk_) values,"
                f" got {type(key).__name__}"
            )
    return verifiers
