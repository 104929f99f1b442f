# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Webhook signing and verification, Standard Webhooks v1.

Theory of operation
-------------------
A sender signs ``{msg_id}.{timestamp}.{body}`` with HMAC-SHA256 under a shared secret and sends
three headers (Standard Webhooks 1.0, "Signature scheme" and "Webhook headers")::

    webhook-id:        msg_2KWPBgLlAfxdpx2AI54pPJ85f4W   (the same on every retry: idempotency key)
    webhook-timestamp: 1674087231                       (the time of THIS attempt, Unix seconds)
    webhook-signature: v1,<base64 HMAC> [v1,<base64 HMAC> ...]

The timestamp belongs to the attempt, not to the event, so a retry is signed afresh with a new one;
a receiver refuses timestamps outside its tolerance window, which is what stops a captured request
from being replayed later. This module never reads the clock: the sender passes ``timestamp`` and
the receiver passes ``now``.

The signature header is a space-separated list so a secret can rotate without downtime: while it
rotates the sender signs with the old and the new secret, and a receiver that knows either one
accepts the message.

The id may not contain ``.`` (the spec requires it): with ids ``a`` and ``a.123`` the signed strings
``a.123.456.x`` of (``a``, 123, ``456.x``) and (``a.123``, 456, ``x``) are the same bytes, so one
signature would verify a different message.

Verification is strict about form and lenient about the future: an entry of an unknown version
(``v1a,...`` Ed25519, or anything later) is skipped, but an entry that is not ``version,payload``,
or a ``v1`` payload that is not the base64 of a 32-byte HMAC, refuses the whole header. Whatever the
request holds, :func:`verify` raises :class:`WebhookVerificationError` and nothing else; only the
receiver's own arguments (no secret, a naive ``now``, a negative tolerance) raise
:class:`ConfigurationError`. No message ever contains a secret or an expected signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import attrs

from outbox_core.errors import ConfigurationError, InvalidMessage, WebhookVerificationError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "DEFAULT_TOLERANCE",
    "HEADER_ID",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "MAX_SECRET_BYTES",
    "MIN_SECRET_BYTES",
    "SECRET_PREFIX",
    "WebhookSecret",
    "sign",
    "signature_header",
    "verify",
    "webhook_headers",
]

#: How secrets are written for people and config files (Standard Webhooks "secret serialization").
SECRET_PREFIX: Final = "whsec_"  # noqa: S105 (a format marker, not a secret)
#: Standard Webhooks: a symmetric secret is random, "at least 24 bytes (192 bits, 512 maximum)".
MIN_SECRET_BYTES: Final = 24
#: 512 bits. HMAC-SHA256 hashes longer keys down to 32 bytes, so more adds nothing.
MAX_SECRET_BYTES: Final = 64
#: The receiver's replay window either side of its clock; the spec's libraries use 5 minutes.
DEFAULT_TOLERANCE: Final = timedelta(minutes=5)

HEADER_ID: Final = "webhook-id"
HEADER_TIMESTAMP: Final = "webhook-timestamp"
HEADER_SIGNATURE: Final = "webhook-signature"
_HEADERS: Final = (HEADER_ID, HEADER_TIMESTAMP, HEADER_SIGNATURE)

_VERSION: Final = "v1"
#: Unix seconds, ASCII digits only (``str.isdigit`` would let "²" and Arabic-Indic digits through).
#: Twelve digits reach the year 33658 and keep ``int()`` cheap on hostile input.
_TIMESTAMP_DIGITS: Final = re.compile(r"[0-9]{1,12}")
_MAX_TIMESTAMP: Final = 10**12
#: Printable ASCII without space: no whitespace, control or non-ASCII character can reach a header.
_MSG_ID_CHARS: Final = re.compile(r"[!-~]+")
_SECRET_BASE64: Final = re.compile(r"[A-Za-z0-9+/]+={0,2}")
#: The standard base64 of exactly 32 bytes (an HMAC-SHA256 digest) is 43 characters and one "=".
_V1_SIGNATURE: Final = re.compile(r"[A-Za-z0-9+/]{43}=")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROS: Final = 1_000_000


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
    """An HMAC-SHA256 signing key. Its repr and str never show the key."""

    #: The raw key bytes (24 to 64 of them); never logged.
    key: bytes = attrs.field(validator=_key_validator)

    @classmethod
    def parse(cls, text: str) -> WebhookSecret:
        """Read ``whsec_<base64>`` or bare base64 (padding optional, outer whitespace ignored).

        Errors say what is wrong with the text and never repeat it.
        """
        if not isinstance(text, str):
            raise ConfigurationError(f"a webhook secret must be text, got {type(text).__name__}")
        encoded = text.strip().removeprefix(SECRET_PREFIX)
        if not encoded:
            raise ConfigurationError("the webhook secret is empty")
        if _SECRET_BASE64.fullmatch(encoded) is None:
            raise ConfigurationError(
                "the webhook secret is not standard base64 (after the optional 'whsec_' prefix)"
            )
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except binascii.Error:
            raise ConfigurationError(
                "the webhook secret's base64 has a length or padding that cannot decode"
            ) from None
        return cls(key)

    @classmethod
    def generate_from(cls, entropy: bytes) -> WebhookSecret:
        """A new secret from random bytes the caller drew (e.g. ``secrets.token_bytes(32)``).

        The core never draws randomness itself; the provisioning code passes it in.
        """
        return cls(entropy)

    def to_text(self) -> str:
        """The ``whsec_<base64>`` form to hand to the endpoint's owner. Treat it as a secret."""
        return SECRET_PREFIX + base64.b64encode(self.key).decode("ascii")

    def __repr__(self) -> str:
        return f"WebhookSecret(<redacted, {len(self.key)} bytes>)"

    __str__ = __repr__


def _msg_id_problem(msg_id: str) -> str | None:
    """What is wrong with a message id, or None. Shared by the sender and the receiver."""
    if not msg_id:
        return "is empty"
    if "." in msg_id:
        return "contains '.', which would make the signed string ambiguous"
    if _MSG_ID_CHARS.fullmatch(msg_id) is None:
        return "contains whitespace, a control character or a non-ASCII character"
    return None


def _mac(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    # msg_id and timestamp are checked to be printable ASCII before they get here.
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode("ascii"), hashlib.sha256)
    mac.update(body)
    return mac.digest()


def sign(secret: WebhookSecret, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64 HMAC-SHA256>`` signature over ``{msg_id}.{timestamp}.{body}``."""
    problem = _msg_id_problem(msg_id)
    if problem is not None:
        raise InvalidMessage(f"the webhook message id {msg_id!r:.80} {problem}")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise InvalidMessage(f"the webhook timestamp must be an int, got {timestamp!r:.80}")
    if not 0 <= timestamp < _MAX_TIMESTAMP:
        raise InvalidMessage(
            f"the webhook timestamp {timestamp} is not Unix seconds between 0 and 10**12"
        )
    digest = _mac(secret.key, msg_id, str(timestamp), body)
    return f"{_VERSION},{base64.b64encode(digest).decode('ascii')}"


def signature_header(
    secrets: Sequence[WebhookSecret], *, msg_id: str, timestamp: int, body: bytes
) -> str:
    """The ``webhook-signature`` value: one signature per secret, space-separated.

    Pass every live secret: while a secret rotates, the old and the new one both sign, so a receiver
    that knows either verifies. A secret listed twice signs once.
    """
    if not secrets:
        raise ConfigurationError("at least one webhook secret is needed to sign a webhook")
    signatures = (sign(s, msg_id=msg_id, timestamp=timestamp, body=body) for s in secrets)
    return " ".join(dict.fromkeys(signatures))


def webhook_headers(
    secrets: Sequence[WebhookSecret], *, msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt.

    ``timestamp`` is the time of THIS attempt (Unix seconds from the caller's clock): the caller
    must pass a fresh one on every attempt, retries included, or receivers will refuse retries as
    replays once the first attempt is older than their tolerance. ``msg_id`` stays the same on
    every attempt (receivers use it to drop duplicates).
    """
    return {
        HEADER_ID: msg_id,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_SIGNATURE: signature_header(secrets, msg_id=msg_id, timestamp=timestamp, body=body),
    }


# --- verification (receivers) ------------------------------------------------------------------


def _micros(delta: timedelta) -> int:
    # Integer microseconds: exact, and no overflow whatever the timestamp.
    return (delta.days * 86_400 + delta.seconds) * _MICROS + delta.microseconds


def _now_micros(now: int | datetime) -> int:
    if isinstance(now, datetime):
        if now.utcoffset() is None:
            raise ConfigurationError(f"now must be a timezone-aware datetime, got {now!r}")
        return _micros(now - _EPOCH)
    if isinstance(now, bool) or not isinstance(now, int):
        raise ConfigurationError(
            f"now must be Unix seconds (int) or an aware datetime: {now!r:.60}"
        )
    return now * _MICROS


def _fail(message: str) -> WebhookVerificationError:
    return WebhookVerificationError(message)


def _read_headers(headers: Mapping[str, str]) -> tuple[str, str, str]:
    """The three headers, matched case-insensitively; refuses missing, empty or repeated ones."""
    found: dict[str, str] = {}
    for name, value in headers.items():
        # ASCII only: "\u212a".lower() is "k", and a header name is ASCII on the wire.
        if not isinstance(name, str) or not name.isascii():
            continue
        lowered = name.lower()
        if lowered not in _HEADERS:
            continue
        if lowered in found:
            raise _fail(f"the {lowered} header is given more than once")
        if not isinstance(value, str):
            raise _fail(f"the {lowered} header is not text")
        found[lowered] = value
    missing = [name for name in _HEADERS if not found.get(name)]
    if missing:
        raise _fail(f"the webhook is missing (or has empty) headers: {', '.join(missing)}")
    return found[HEADER_ID], found[HEADER_TIMESTAMP], found[HEADER_SIGNATURE]


def _check_timestamp(text: str, now_us: int, tolerance_us: int) -> None:
    if _TIMESTAMP_DIGITS.fullmatch(text) is None:
        raise _fail("the webhook-timestamp header is not Unix seconds (1 to 12 ASCII digits)")
    age_us = now_us - int(text) * _MICROS
    if age_us > tolerance_us:
        raise _fail(
            f"the webhook timestamp {text} is {age_us / _MICROS:.0f} s before now, "
            f"beyond the {tolerance_us / _MICROS:g} s tolerance (too old: a replay?)"
        )
    if -age_us > tolerance_us:
        raise _fail(
            f"the webhook timestamp {text} is {-age_us / _MICROS:.0f} s after now, "
            f"beyond the {tolerance_us / _MICROS:g} s tolerance (too new)"
        )


def _v1_signatures(header: str) -> list[bytes]:
    """The decoded v1 signatures; unknown versions are skipped, malformed entries refused."""
    found: list[bytes] = []
    skipped = 0
    for entry in header.split(" "):
        version, comma, payload = entry.partition(",")
        if not entry:
            raise _fail("the webhook-signature header has an empty entry (a doubled or edge space)")
        if not comma:
            raise _fail("a webhook-signature entry has no ',' between version and signature")
        if not version:
            raise _fail("a webhook-signature entry has no version before its ','")
        if version != _VERSION:
            skipped += 1
            continue
        if _V1_SIGNATURE.fullmatch(payload) is None:
            raise _fail("a v1 signature is not the base64 of a 32-byte HMAC-SHA256")
        found.append(base64.b64decode(payload, validate=True))
    if not found:
        raise _fail(f"the webhook has no v1 signature ({skipped} of other versions were skipped)")
    return found


def verify(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[WebhookSecret],
    *,
    now: int | datetime,
    tolerance: timedelta = DEFAULT_TOLERANCE,
) -> None:
    """Check a received webhook; return None if it is authentic and fresh, else raise.

    ``body`` is the raw request body, byte for byte (parsing and re-serialising JSON changes it).
    ``now`` is the receiver's clock (Unix seconds or an aware datetime); the timestamp must lie
    within ``tolerance`` of it on either side, edges included. The webhook passes if ANY v1
    signature matches ANY of ``secrets`` (list both while a secret rotates). Also use
    ``webhook-id`` to drop duplicates: a sender may deliver the same message more than once.

    Raises :class:`WebhookVerificationError` for anything wrong with the request, and nothing else;
    :class:`ConfigurationError` for unusable ``secrets``, ``now`` or ``tolerance`` (checked first).
    """
    if not secrets:
        raise ConfigurationError("at least one webhook secret is needed to verify a webhook")
    now_us = _now_micros(now)
    if not isinstance(tolerance, timedelta) or tolerance < timedelta(0):
        raise ConfigurationError(f"tolerance must be a non-negative timedelta, got {tolerance!r}")
    msg_id, timestamp, signature = _read_headers(headers)
    if not isinstance(body, bytes | bytearray | memoryview):
        raise _fail("the webhook body must be the raw request bytes, not decoded text")
    problem = _msg_id_problem(msg_id)
    if problem is not None:
        raise _fail(f"the webhook-id header {problem}")
    _check_timestamp(timestamp, now_us, _micros(tolerance))
    received = _v1_signatures(signature)
    expected = [_mac(s.key, msg_id, timestamp, bytes(body)) for s in secrets]
    if any(hmac.compare_digest(e, r) for e in expected for r in received):
        return
    raise _fail(
        f"no v1 signature in the webhook matches any of the {len(expected)} secrets "
        "(wrong secret, or the id, timestamp or body changed on the way)"
    )
