# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Webhook signing and verification, Standard Webhooks v1 (HMAC) and v1a (Ed25519).

Theory of operation
-------------------
A sender signs ``{msg_id}.{timestamp}.{body}`` and sends three headers (Standard Webhooks 1.0,
"Signature scheme" and "Webhook headers")::

    webhook-id:        msg_2KWPBgLlAfxdpx2AI54pPJ85f4W   (the same on every retry: idempotency key)
    webhook-timestamp: 1674087231                       (the time of THIS attempt, Unix seconds)
    webhook-signature: v1,<base64 HMAC> [v1,<base64 HMAC> ...]

An endpoint signs with one of two schemes (ADR 0017): ``v1``, HMAC-SHA256 under a shared secret
(:class:`WebhookSecret`, ``whsec_...``), or ``v1a``, Ed25519 under a private key whose public key
the receiver holds (:mod:`outbox_core.signing_keys`, ``whsk_...`` / ``whpk_...``). This module
composes the signed content and the headers for any :class:`Signer` and checks them against any
:class:`Verifier`; the HMAC is the standard library's, the Ed25519 curve is behind the
:class:`~outbox_core.ports.Ed25519` port.

The timestamp belongs to the attempt, not to the event, so a retry is signed afresh with a new one;
a receiver refuses timestamps outside its tolerance window, which is what stops a captured request
from being replayed later. This module never reads the clock: the sender passes ``timestamp`` and
the receiver passes ``now``.

The signature header is a space-separated list so a secret can rotate without downtime: while it
rotates the sender signs with the old and the new secret (or key), and a receiver that knows
either one accepts the message.

The id may not contain ``.`` (the spec requires it): with ids ``a`` and ``a.123`` the signed strings
``a.123.456.x`` of (``a``, 123, ``456.x``) and (``a.123``, 456, ``x``) are the same bytes, so one
signature would verify a different message.

Verification is strict about form and lenient about the future: an entry of an unknown version
(``v2,...``, or anything later) is skipped, but an entry that is not ``version,payload``, a ``v1``
payload that is not the base64 of a 32-byte HMAC, or a ``v1a`` payload that is not the base64 of
a 64-byte Ed25519 signature, refuses the whole header. Whatever the
request holds, :func:`verify` raises :class:`WebhookVerificationError` and nothing else; only the
receiver's own arguments (no secret, a naive ``now``, a negative tolerance) raise
:class:`ConfigurationError`. No message ever contains a secret or an expected signature.
"""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from outbox_core.errors import ConfigurationError, InvalidMessage, WebhookVerificationError
from outbox_core.signing_keys import (
    MAX_SECRET_BYTES,
    MIN_SECRET_BYTES,
    SECRET_PREFIX,
    V1,
    V1A,
    Signer,
    Verifier,
    WebhookSecret,
    as_verifiers,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from outbox_core.ports import Ed25519

__all__ = [
    "DEFAULT_TOLERANCE",
    "HEADER_ID",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "MAX_SECRET_BYTES",
    "MIN_SECRET_BYTES",
    "SECRET_PREFIX",
    "V1",
    "V1A",
    "Signer",
    "Verifier",
    "WebhookSecret",
    "sign",
    "signature_header",
    "signed_content",
    "verify",
    "webhook_headers",
]

#: The receiver's replay window either side of its clock; the spec's libraries use 5 minutes.
DEFAULT_TOLERANCE: Final = timedelta(minutes=5)

HEADER_ID: Final = "webhook-id"
HEADER_TIMESTAMP: Final = "webhook-timestamp"
HEADER_SIGNATURE: Final = "webhook-signature"
_HEADERS: Final = (HEADER_ID, HEADER_TIMESTAMP, HEADER_SIGNATURE)

#: Unix seconds, ASCII digits only (``str.isdigit`` would let "²" and Arabic-Indic digits through).
#: Twelve digits reach the year 33658 and keep ``int()`` cheap on hostile input.
_TIMESTAMP_DIGITS: Final = re.compile(r"[0-9]{1,12}")
_MAX_TIMESTAMP: Final = 10**12
#: Printable ASCII without space: no whitespace, control or non-ASCII character can reach a header.
_MSG_ID_CHARS: Final = re.compile(r"[!-~]+")
#: The standard base64 of exactly 32 bytes (an HMAC-SHA256 digest) is 43 characters and one "=";
#: of exactly 64 bytes (an Ed25519 signature), 86 characters and "==".
_FORMS: Final = {
    V1: (re.compile(r"[A-Za-z0-9+/]{43}="), "the base64 of a 32-byte HMAC-SHA256"),
    V1A: (re.compile(r"[A-Za-z0-9+/]{86}=="), "the base64 of a 64-byte Ed25519 signature"),
}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROS: Final = 1_000_000


def _msg_id_problem(msg_id: str) -> str | None:
    """What is wrong with a message id, or None. Shared by the sender and the receiver."""
    if not msg_id:
        return "is empty"
    if "." in msg_id:
        return "contains '.', which would make the signed string ambiguous"
    if _MSG_ID_CHARS.fullmatch(msg_id) is None:
        return "contains whitespace, a control character or a non-ASCII character"
    return None


def signed_content(msg_id: str, timestamp: str, body: bytes) -> bytes:
    """What every scheme signs: ``{msg_id}.{timestamp}.{body}`` (Standard Webhooks, "Signature
    scheme"). ``msg_id`` and ``timestamp`` are checked to be printable ASCII before they get here."""
    return f"{msg_id}.{timestamp}.".encode("ascii") + bytes(body)


def sign(signer: Signer, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``<version>,<base64 signature>`` entry over ``{msg_id}.{timestamp}.{body}``: ``v1,`` for
    a :class:`WebhookSecret`, ``v1a,`` for an Ed25519 signer."""
    problem = _msg_id_problem(msg_id)
    if problem is not None:
        raise InvalidMessage(f"the webhook message id {msg_id!r:.80} {problem}")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise InvalidMessage(f"the webhook timestamp must be an int, got {timestamp!r:.80}")
    if not 0 <= timestamp < _MAX_TIMESTAMP:
        raise InvalidMessage(
            f"the webhook timestamp {timestamp} is not Unix seconds between 0 and 10**12"
        )
    raw = signer.signature(signed_content(msg_id, str(timestamp), body))
    return f"{signer.version},{base64.b64encode(raw).decode('ascii')}"


def signature_header(secrets: Sequence[Signer], *, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one signature per secret or key, space-separated.

    Pass every live one: while a secret (or an Ed25519 key) rotates, the old and the new one both
    sign, so a receiver that knows either verifies. A secret listed twice signs once.
    """
    if not secrets:
        raise ConfigurationError("at least one webhook secret is needed to sign a webhook")
    signatures = (sign(s, msg_id=msg_id, timestamp=timestamp, body=body) for s in secrets)
    return " ".join(dict.fromkeys(signatures))


def webhook_headers(
    secrets: Sequence[Signer], *, msg_id: str, timestamp: int, body: bytes
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


def _signatures(header: str, wanted: frozenset[str]) -> list[tuple[str, bytes]]:
    """The decoded signatures of the ``wanted`` versions; v1 and v1a entries are checked for form
    whatever is wanted, unknown versions are skipped, malformed entries refused."""
    found: list[tuple[str, bytes]] = []
    skipped = 0
    for entry in header.split(" "):
        version, comma, payload = entry.partition(",")
        if not entry:
            raise _fail("the webhook-signature header has an empty entry (a doubled or edge space)")
        if not comma:
            raise _fail("a webhook-signature entry has no ',' between version and signature")
        if not version:
            raise _fail("a webhook-signature entry has no version before its ','")
        form = _FORMS.get(version)
        if form is not None and form[0].fullmatch(payload) is None:
            raise _fail(f"a {version} signature is not {form[1]}")
        if version not in wanted:
            skipped += 1
            continue
        found.append((version, base64.b64decode(payload, validate=True)))
    if not found:
        versions = " or ".join(sorted(wanted))
        raise _fail(
            f"the webhook has no {versions} signature ({skipped} of other versions were skipped)"
        )
    return found


def verify(  # noqa: PLR0913 - the request's three parts, then the receiver's keyword settings
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[object],
    *,
    now: int | datetime,
    tolerance: timedelta = DEFAULT_TOLERANCE,
    ed25519: Ed25519 | None = None,
) -> None:
    """Check a received webhook; return None if it is authentic and fresh, else raise.

    ``body`` is the raw request body, byte for byte (parsing and re-serialising JSON changes it).
    ``now`` is the receiver's clock (Unix seconds or an aware datetime); the timestamp must lie
    within ``tolerance`` of it on either side, edges included. ``secrets`` are
    :class:`WebhookSecret` values (``whsec_``: checks ``v1`` entries), or
    :class:`~outbox_core.signing_keys.PublicKey` values (``whpk_``: checks ``v1a`` entries through
    ``ed25519``, the :class:`~outbox_core.ports.Ed25519` port), or any :class:`Verifier`. The
    webhook passes if ANY signature matches ANY key of its version (list both while a key
    rotates). Also use ``webhook-id`` to drop duplicates: a sender may deliver the same message
    more than once.

    Raises :class:`WebhookVerificationError` for anything wrong with the request, and nothing else;
    :class:`ConfigurationError` for unusable ``secrets``, ``now`` or ``tolerance`` (checked first).
    """
    verifiers = as_verifiers(secrets, ed25519)
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
    wanted = frozenset(v.version for v in verifiers)
    received = _signatures(signature, wanted)
    content = signed_content(msg_id, timestamp, bytes(body))
    for verifier in verifiers:
        mine = (raw for version, raw in received if version == verifier.version)
        if any(verifier.matches(content, raw) for raw in mine):
            return
    versions = " or ".join(sorted(wanted))
    raise _fail(
        f"no {versions} signature in the webhook matches any of the {len(verifiers)} secrets "
        "(wrong secret, or the id, timestamp or body changed on the way)"
    )
