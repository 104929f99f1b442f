# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""The sealed-value envelope (ADR 0010): its format and :class:`SealedValue`.

A sealed field's value is a JSON object in place of the plaintext value::

    {"$sealed": "v1", "kid": "k2", "n": "<base64 nonce>", "ct": "<base64 ciphertext+tag>"}

:mod:`outbox_core.sealing` says which fields are sealed and why, and seals and opens them; the
cipher behind the :class:`~outbox_core.ports.Encryptor` port takes and gives back a
:class:`SealedValue`. It lives here, not in :mod:`~outbox_core.sealing`, so the port and the rules
that use it stand on it without importing each other. :mod:`~outbox_core.sealing` re-exports every
name of this module.
"""

from __future__ import annotations

import base64
import binascii
import string
from collections.abc import Mapping
from typing import Any, Final

import attrs

from outbox_core.errors import InvalidPayload

__all__ = [
    "ENVELOPE_VERSION",
    "NONCE_BYTES",
    "SEALED_MARKER",
    "TAG_BYTES",
    "SealedValue",
    "is_key_id",
]

#: The key that marks a JSON object as a sealed value.
SEALED_MARKER: Final = "$sealed"
#: The envelope version this code writes and reads: AES-256-GCM, 96-bit nonce, 128-bit tag.
ENVELOPE_VERSION: Final = "v1"
#: Nonce length of ``v1``, in bytes (96 bits, the size GCM is specified for: NIST SP 800-38D).
NONCE_BYTES: Final = 12
#: Authentication tag length of ``v1``, in bytes, appended to the ciphertext.
TAG_BYTES: Final = 16

_ENVELOPE_KEYS: Final = frozenset({SEALED_MARKER, "kid", "n", "ct"})
# Key ids travel in the envelope and in ``kid:base64key,...`` key lists, so ':' and ',' are out.
_KEY_ID_ALPHABET: Final = frozenset(string.ascii_letters + string.digits + "_.-")


def is_key_id(value: object) -> bool:
    """True for a usable key id: 1 to 64 characters of ``[A-Za-z0-9_.-]``."""
    return isinstance(value, str) and 1 <= len(value) <= 64 and set(value) <= _KEY_ID_ALPHABET


def _key_id(_inst: object, _attribute: object, value: str) -> None:
    if not is_key_id(value):
        raise InvalidPayload(
            f"a sealed value's key id is 1 to 64 characters of [A-Za-z0-9_.-], got {value!r:.80}"
        )


def _nonce(_inst: object, _attribute: object, value: bytes) -> None:
    if len(value) != NONCE_BYTES:
        raise InvalidPayload(
            f"a {ENVELOPE_VERSION} nonce is {NONCE_BYTES} bytes, got {len(value)} bytes"
        )


def _ciphertext(_inst: object, _attribute: object, value: bytes) -> None:
    if len(value) < TAG_BYTES:
        raise InvalidPayload(
            f"a {ENVELOPE_VERSION} ciphertext carries a {TAG_BYTES}-byte tag, got {len(value)} bytes"
        )


@attrs.frozen
class SealedValue:
    """One sealed field value: which key sealed it, the nonce, and the ciphertext with its tag."""

    #: The id of the key that sealed it.
    kid: str = attrs.field(validator=_key_id)
    #: The 96-bit nonce, fresh for every seal.
    nonce: bytes = attrs.field(validator=_nonce, repr=False)
    #: The ciphertext with the 128-bit authentication tag appended.
    ciphertext: bytes = attrs.field(validator=_ciphertext, repr=False)

    def to_json(self) -> dict[str, str]:
        """The envelope as it is stored in the payload."""
        return {
            SEALED_MARKER: ENVELOPE_VERSION,
            "kid": self.kid,
            "n": base64.b64encode(self.nonce).decode("ascii"),
            "ct": base64.b64encode(self.ciphertext).decode("ascii"),
        }

    @classmethod
    def from_json(cls, value: object) -> SealedValue:
        """Parse a stored envelope; raises :class:`InvalidPayload` saying what is wrong with it."""
        if not isinstance(value, Mapping):
            raise InvalidPayload(f"a sealed value is a JSON object, not {type(value).__name__}")
        if value.get(SEALED_MARKER) != ENVELOPE_VERSION:
            raise InvalidPayload(
                f"the sealed value is of version {value.get(SEALED_MARKER)!r:.40}; this version"
                f" reads {ENVELOPE_VERSION!r}"
            )
        if set(value) != _ENVELOPE_KEYS:
            raise InvalidPayload(
                f"a sealed value has exactly the keys {sorted(_ENVELOPE_KEYS)}, got"
                f" {sorted(map(str, value))}"
            )
        return cls(kid=value["kid"], nonce=_b64(value, "n"), ciphertext=_b64(value, "ct"))


def _b64(envelope: Mapping[str, Any], key: str) -> bytes:
    text = envelope[key]
    if not isinstance(text, str):
        raise InvalidPayload(f"the sealed value's {key!r} is not a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidPayload(f"the sealed value's {key!r} is not valid base64") from None
