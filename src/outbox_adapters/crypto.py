"""``AesGcmEncryptor``: sealed payload fields with AES-256-GCM (ADR 0010).

Needs the ``crypto`` extra (the ``cryptography`` package). The envelope format, the associated
data and which fields are sealed belong to the core (:mod:`outbox_core.sealing`); this module holds
the keys and runs the cipher.

- Keys are 256-bit, each under a key id. One is *active*: new values are sealed under it. Every
  key opens the values sealed under it, so a key can be retired only once nothing is sealed under
  it any more (``outbox keys rotate`` re-seals pending and failed rows under the active key).
- Every seal draws a fresh 96-bit nonce from the operating system's CSPRNG. With random nonces one
  key should seal fewer than 2**32 values (NIST SP 800-38D, 8.3); rotating keys long before that is
  part of the operator's routine.
- Key material comes from a key list, ``kid:base64key,kid2:base64key`` (commas or new lines
  between entries), in an environment variable or a file. The FIRST entry is the active key.
- Nothing here logs, and neither ``repr`` nor an error message ever shows key material or a
  plaintext: errors name the key id or the entry's position.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from outbox_core.errors import ConfigurationError, InvalidPayload
from outbox_core.sealing import NONCE_BYTES, SealedValue, is_key_id

__all__ = ["KEY_BYTES", "AesGcmEncryptor", "format_key_entry", "generate_key"]

#: AES-256: 32 bytes of key material per key id.
KEY_BYTES: Final = 32


def generate_key() -> bytes:
    """32 bytes from the operating system's CSPRNG: a new key for :class:`AesGcmEncryptor`."""
    return os.urandom(KEY_BYTES)


def format_key_entry(kid: str, key: bytes) -> str:
    """One ``kid:base64key`` entry of a key list."""
    _check_key(kid, key)
    return f"{kid}:{base64.b64encode(key).decode('ascii')}"


def _check_key(kid: object, key: object) -> None:
    if not is_key_id(kid):
        raise ConfigurationError(
            f"an encryption key id is 1 to 64 characters of [A-Za-z0-9_.-], got {kid!r:.80}"
        )
    if not isinstance(key, bytes):
        raise ConfigurationError(
            f"encryption key {kid!r} must be bytes (32 of them), not {type(key).__name__}"
        )
    if len(key) != KEY_BYTES:
        raise ConfigurationError(
            f"encryption key {kid!r} is {len(key) * 8} bits ({len(key)} bytes); AES-256-GCM needs"
            f" a 256-bit key ({KEY_BYTES} bytes)"
        )


class AesGcmEncryptor:
    """:class:`outbox_core.ports.Encryptor` with AES-256-GCM, several keys, one of them active.

    ``AesGcmEncryptor({"k2": new_key, "k1": old_key}, active="k2")`` seals under ``k2`` and opens
    values sealed under either. Refuses, with a :class:`ConfigurationError` naming the key id, a
    key that is not 256 bits, a malformed key id, and an active key id that has no key.
    """

    __slots__ = ("_active", "_ciphers")

    def __init__(self, keys: Mapping[str, bytes], *, active: str) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigurationError("an encryptor needs at least one key (a mapping kid -> key)")
        for kid, key in keys.items():
            _check_key(kid, key)
        if active not in keys:
            raise ConfigurationError(
                f"the active encryption key id {active!r:.80} is not among the configured key ids"
                f" {sorted(keys)}"
            )
        self._ciphers: Final = {kid: AESGCM(key) for kid, key in keys.items()}
        self._active: Final = active

    @classmethod
    def from_key_list(cls, text: str, *, source: str = "the key list") -> AesGcmEncryptor:
        """Parse ``kid:base64key,kid2:base64key`` (commas or new lines between entries; blank
        lines and ``#`` comment lines are ignored). The first entry is the active key.

        ``source`` names where the text came from in error messages (never the text itself).
        """
        keys: dict[str, bytes] = {}
        entries = [
            entry.strip()
            for line in text.splitlines()
            if not line.lstrip().startswith("#")
            for entry in line.split(",")
        ]
        for position, entry in enumerate((e for e in entries if e), start=1):
            kid, colon, encoded = entry.partition(":")
            kid = kid.strip()
            if not colon:
                raise ConfigurationError(
                    f"{source}: entry {position} is not kid:base64key (no ':' in it)"
                )
            if kid in keys:
                raise ConfigurationError(f"{source}: key id {kid!r:.80} is given twice")
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise ConfigurationError(
                    f"{source}: the key of key id {kid!r:.80} (entry {position}) is not valid base64"
                ) from None
            try:
                _check_key(kid, key)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{source}: {exc}") from None
            keys[kid] = key
        if not keys:
            raise ConfigurationError(f"{source}: no key in it (expected kid:base64key,...)")
        return cls(keys, active=next(iter(keys)))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> AesGcmEncryptor:
        """Read a key list from a file (see :meth:`from_key_list`)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigurationError(f"cannot read the key file {str(path)!r}: {reason}") from None
        return cls.from_key_list(text, source=f"the key file {str(path)!r}")

    @property
    def active_key_id(self) -> str:
        return self._active

    @property
    def key_ids(self) -> frozenset[str]:
        return frozenset(self._ciphers)

    def seal(self, plaintext: bytes, *, aad: bytes) -> SealedValue:
        nonce = os.urandom(NONCE_BYTES)
        ciphertext = self._ciphers[self._active].encrypt(nonce, plaintext, aad)
        return SealedValue(kid=self._active, nonce=nonce, ciphertext=ciphertext)

    def open(self, sealed: SealedValue, *, aad: bytes) -> bytes:
        cipher = self._ciphers.get(sealed.kid)
        if cipher is None:
            raise InvalidPayload(f"key id {sealed.kid!r} is not configured")
        try:
            return cipher.decrypt(sealed.nonce, sealed.ciphertext, aad)
        except InvalidTag:
            raise InvalidPayload(
                f"the value does not authenticate under key id {sealed.kid!r}: it was altered,"
                " moved from another field or lane, or sealed under another key of that id"
            ) from None

    def __repr__(self) -> str:
        # Key ids only: a repr ends up in logs and tracebacks.
        return f"AesGcmEncryptor(key_ids={sorted(self._ciphers)}, active={self._active!r})"

    __str__ = __repr__

    def __reduce__(self) -> str | tuple[object, ...]:
        # Pickling would copy the keys into wherever the pickle goes (a cache, a task queue).
        raise TypeError("an AesGcmEncryptor holds keys and cannot be pickled")
