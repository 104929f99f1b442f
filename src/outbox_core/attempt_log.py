# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""The attempt log of a webhook delivery: its last :data:`ATTEMPT_LOG_SIZE` attempts, oldest first.

Theory of operation
-------------------
A delivery row keeps its attempt count and its last attempt's outcome; the attempt log keeps, in
the same payload (key ``attempt_log``), one small entry per attempt that made a request: when it
started, the receiver's HTTP status code (``None``: no answer), the error it was classified as
(``None``: delivered) and the stored response snippet (already cleaned of secrets by the
handler). The log is bounded, so a delivery retried for days costs a few kilobytes at most: the
oldest entries are dropped first.

The log costs no table and no round trip. The attempt reads the delivery's current log with its
target, :func:`appended` makes the new one, and the outcome's progress carries it to the fenced
mark, which writes it with the rest of the patch (``payload || patch``) or, when stale, writes
nothing: an attempt whose mark was refused is not in the log, as it is not in the row.

Everything here is pure: the attempt's time is an argument (the adapter reads its clock), and
neither function changes what it is given. A stored log that is not a list of objects (missing,
written by hand, from a row older than the log) counts as empty: it is history, never a reason to
refuse an attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

__all__ = [
    "ATTEMPT_LOG_KEY",
    "ATTEMPT_LOG_SIZE",
    "ERROR_CHARS",
    "RESPONSE_CHARS",
    "appended",
    "attempt_entry",
    "logged",
]

#: The payload key the log is stored under.
ATTEMPT_LOG_KEY: Final = "attempt_log"
#: How many attempts a delivery's log keeps: the latest ones.
ATTEMPT_LOG_SIZE: Final = 10
#: The longest error text an entry keeps (the classification's reason, cut).
ERROR_CHARS: Final = 200
#: The longest response snippet an entry keeps (the senders store 512 characters at most).
RESPONSE_CHARS: Final = 512


def attempt_entry(
    *, at: datetime, status: int | None, error: str | None, response: str | None
) -> dict[str, Any]:
    """One attempt's entry: ``at`` (timezone-aware) as ISO 8601 text, the HTTP ``status`` code
    (``None``: no answer), the ``error`` (``None``: delivered) cut to :data:`ERROR_CHARS` and the
    cleaned ``response`` snippet cut to :data:`RESPONSE_CHARS`."""
    if not isinstance(at, datetime) or at.utcoffset() is None:
        raise ValueError(f"an attempt's time is a timezone-aware datetime, got {at!r:.60}")
    if status is not None and (isinstance(status, bool) or not isinstance(status, int)):
        raise TypeError(f"an attempt's status is an HTTP status code or None, got {status!r:.40}")
    return {
        "at": at.isoformat(),
        "status": status,
        "error": _cut(error, ERROR_CHARS),
        "response": _cut(response, RESPONSE_CHARS),
    }


def logged(stored: object) -> list[dict[str, Any]]:
    """The entries of a stored log (copies, oldest first): ``stored`` when it is a list of
    objects, else empty."""
    if not isinstance(stored, list) or not all(isinstance(e, Mapping) for e in stored):
        return []
    return [dict(entry) for entry in stored]


def appended(previous: object, entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The log after one more attempt: ``previous`` (:func:`logged`'s reading of it) with
    ``entry`` last, holding the latest :data:`ATTEMPT_LOG_SIZE` entries."""
    return [*logged(previous), dict(entry)][-ATTEMPT_LOG_SIZE:]


def _cut(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise TypeError(f"an attempt's error and response are text or None, got {text!r:.40}")
    return text[:limit]
