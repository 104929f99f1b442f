"""Frozen value types that cross the ports: claim tokens, claimed rows and marks.

A claim hands the worker :class:`ClaimedRow` values; the worker hands the store :class:`Mark`
values (a retry carries its delay; the store stamps the due time in its own clock). A mark carries the claim token it was issued under, and the store applies it only while the
row is still ``pending`` under that same token (the fence, ADR 0004).
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, TypeAlias

import attrs

from outbox_core._validators import aware, optional_aware
from outbox_core.delivery import SCRUBBED_ON_MARK, Status

__all__ = [
    "MAX_TRACE_CONTEXT",
    "ClaimToken",
    "ClaimedRow",
    "JSONObject",
    "Mark",
    "NewMessage",
    "RowId",
    "check_lane_name",
    "usable_trace_context",
]

#: A decoded JSON object, as stored in a row's payload.
JSONObject: TypeAlias = Mapping[str, Any]
#: Row identifiers are whatever the store uses (a bigint in PostgreSQL).
RowId: TypeAlias = int | str

#: The longest trace context a row carries: a traceparent (55) and a tracestate (at most 32
#: list members of 256 characters, W3C Trace Context), with room to spare.
MAX_TRACE_CONTEXT = 8192

_TOKEN_ALPHABET = frozenset(string.ascii_letters + string.digits + "-_")


def _token_value(_inst: object, _attribute: object, value: str) -> None:
    if not isinstance(value, str) or not 8 <= len(value) <= 64 or not set(value) <= _TOKEN_ALPHABET:
        raise ValueError(f"a claim token is 8 to 64 characters of [A-Za-z0-9_-], got {value!r}")


@attrs.frozen
class ClaimToken:
    """The fencing token a claim issues; every mark of that claim must present it.

    The core never makes randomness: the adapter supplies entropy (``secrets.token_bytes(16)``)
    or the database does (``gen_random_uuid()``).
    """

    value: str = attrs.field(validator=_token_value)

    @classmethod
    def from_entropy(cls, entropy: bytes) -> ClaimToken:
        if len(entropy) < 8:
            raise ValueError(f"a claim token needs at least 8 bytes of entropy, got {len(entropy)}")
        return cls(entropy.hex())

    def __str__(self) -> str:
        return self.value


_LANE_ALPHABET = frozenset(string.ascii_lowercase + string.digits + "_.-")


def check_lane_name(value: object) -> str:
    """Return ``value`` if it can name a lane (1 to 64 characters of ``[a-z0-9_.-]``), else raise
    ``ValueError``. One rule for producers (:class:`NewMessage`) and workers, so a worker can't be
    started on a lane no row can ever be written to."""
    if not isinstance(value, str) or not 1 <= len(value) <= 64 or not set(value) <= _LANE_ALPHABET:
        raise ValueError(f"a lane name is 1 to 64 characters of [a-z0-9_.-], got {value!r:.80}")
    return value


def _lane(_inst: object, _attribute: object, value: str) -> None:
    check_lane_name(value)


def usable_trace_context(value: object) -> str | None:
    """``value`` if a row may carry it as its trace context, else ``None``: what a store hands out
    for a stored trace context, so that a column written around the producer never fails a claim
    (the row is delivered, only its link to the enqueue is lost)."""
    if (
        isinstance(value, str)
        and 1 <= len(value) <= MAX_TRACE_CONTEXT
        and value.isprintable()
        and value.isascii()
    ):
        return value
    return None


def _trace_context(_inst: object, _attribute: object, value: str | None) -> None:
    if value is not None and usable_trace_context(value) is None:
        raise ValueError(
            f"a trace context is 1 to {MAX_TRACE_CONTEXT} printable ASCII characters (a W3C"
            f" traceparent, then a space and the tracestate), got {value!r:.80}"
        )


def _idempotency_key(_inst: object, _attribute: object, value: str | None) -> None:
    if value is not None and (
        not isinstance(value, str) or not 1 <= len(value) <= 200 or not value.isprintable()
    ):
        raise ValueError(f"an idempotency key is 1 to 200 printable characters, got {value!r:.80}")


def _mapping(_inst: object, _attribute: object, value: object) -> None:
    if not isinstance(value, Mapping):
        raise TypeError(f"a payload is a mapping (a JSON object), got {type(value).__name__}")


@attrs.frozen
class NewMessage:
    """A message to enqueue, before it has a row."""

    #: The lane (queue) it goes to, e.g. ``"email"``.
    lane: str = attrs.field(validator=_lane)
    #: A JSON object; validated (size, JSON types) by the store's enqueue before it is written.
    payload: JSONObject = attrs.field(validator=_mapping)
    #: The producer's key: a second enqueue with the same lane and key writes nothing.
    idempotency_key: str | None = attrs.field(default=None, validator=_idempotency_key)
    #: Not due before this time (``None``: due at once).
    not_before: datetime | None = attrs.field(default=None, validator=optional_aware)
    #: The W3C trace context to store with the row (see :attr:`ClaimedRow.trace_context`);
    #: ``None``: the enqueue's own span supplies it, when there is one.
    trace_context: str | None = attrs.field(default=None, validator=_trace_context)


@attrs.frozen
class ClaimedRow:
    """One row a claim handed to this worker, leased until :attr:`lease_expires_at`."""

    #: The store's id for the row.
    id: RowId
    #: The lane (queue) the row belongs to, e.g. ``"email"``.
    lane: str
    #: The decoded payload, exactly as enqueued; or, as a ``str``, the stored JSON text of a
    #: payload the store could not decode (written around enqueue: not an object, nested too
    #: deep, a number Python won't read). The store still hands such a row out, so that one bad
    #: row never fails a whole claim; the worker fails it permanently without calling a handler.
    payload: JSONObject | str
    #: Claims so far, this one included (always >= 1 on a claimed row).
    attempts: int = attrs.field(validator=attrs.validators.ge(1))
    #: The fencing token of this claim.
    token: ClaimToken
    #: When the lease ends and a sibling may claim the row again.
    lease_expires_at: datetime = attrs.field(validator=aware)
    #: When the row was enqueued.
    created_at: datetime = attrs.field(validator=aware)
    #: The W3C trace context of the enqueue (``traceparent``, then a space and the ``tracestate``
    #: when there is one), as the producer's span left it in the row; ``None`` when the producer
    #: traced nothing. The worker links its delivery span to it (outbox_adapters.telemetry).
    trace_context: str | None = attrs.field(default=None, validator=_trace_context)


def _key_set(keys: Iterable[str]) -> frozenset[str]:
    return frozenset(keys)


def _patch(value: Mapping[str, Any] | None) -> JSONObject | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise TypeError(f"a payload patch is a mapping of payload keys, got {value!r:.80}")
    return MappingProxyType(dict(value)) if value else None


def _check_mark(inst: Mark, _attribute: object, _value: object) -> None:
    status = inst.status
    if (status is Status.PENDING) != (inst.retry_delay is not None):
        raise ValueError("a retry mark (status pending) needs retry_delay, and only it has one")
    if inst.retry_delay is not None and inst.retry_delay < timedelta(0):
        raise ValueError(f"retry_delay must not be negative, got {inst.retry_delay!r}")
    if inst.scrub_keys and status not in SCRUBBED_ON_MARK:
        raise ValueError(
            f"only a dispatched or skipped mark scrubs the payload; a {status} row keeps it whole"
        )
    if status in (Status.FAILED, Status.PENDING, Status.SKIPPED) and not inst.reason:
        raise ValueError(f"a {status} mark needs a reason")
    if inst.disable_endpoint and status is not Status.FAILED:
        raise ValueError("only a failed mark disables an endpoint (HTTP 410 Gone)")
    if inst.recorded and status is not Status.DISPATCHED:
        raise ValueError("only a dispatched mark can have been recorded by its handler")
    if inst.refund and status is not Status.PENDING:
        raise ValueError("only a retry mark (status pending) refunds its attempt")


@attrs.frozen
class Mark:
    """The result to record for one claimed row. Build it with the named constructors."""

    #: The row to mark.
    row_id: RowId
    #: The claim token the mark was issued under: the fence.
    token: ClaimToken
    #: The status to set.
    status: Status
    #: Why (failed, retry, skipped); stored as the row's last error. Never a secret.
    reason: str | None = None
    #: How long after the mark is written a retried row is due again (retry marks only). A delay,
    #: not a time: the store stamps ``its now + retry_delay`` (the database clock on PostgreSQL),
    #: like the claim's lease, so a worker whose clock is off can't move a row's due time.
    retry_delay: timedelta | None = None
    #: Payload keys removed in the same UPDATE (dispatched and skipped marks only).
    scrub_keys: frozenset[str] = attrs.field(
        default=frozenset(), converter=_key_set, validator=_check_mark
    )
    #: Payload keys written in the same UPDATE, after the scrub (``payload - scrub || patch``):
    #: what the attempt achieved, e.g. the recipients who already have the message
    #: (:mod:`outbox_core.recipients`). Only an object payload takes it; ``None``: none.
    payload_patch: JSONObject | None = attrs.field(default=None, converter=_patch, hash=False)
    #: Disable the row's webhook endpoint in the mark's own transaction (the receiver answered
    #: 410 Gone). Failed marks only; a store whose table has no endpoint refuses it.
    disable_endpoint: bool = False
    #: The handler wrote this mark itself, in its own transaction, fenced by the same claim token
    #: (handler-owns-mark: the webhook drainer's fan-out). The runtime writes nothing more: a
    #: second, no-op write would cost a round trip and read as a stale-mark alarm.
    recorded: bool = attrs.field(default=False)
    #: The attempt was never made (a cap of ours deferred it, :meth:`Outcome.deferred`): the store
    #: takes the claim's attempt back (``attempts - 1``, never below 0) and leaves the row's
    #: ``last_error`` and ``updated_at`` as the last real attempt left them, so a deferral counts
    #: toward neither the retry schedule nor endpoint health. Retry marks only.
    refund: bool = attrs.field(default=False)

    @classmethod
    def dispatched(cls, row: ClaimedRow, *, scrub_keys: frozenset[str]) -> Mark:
        return cls(row.id, row.token, Status.DISPATCHED, scrub_keys=scrub_keys)

    @classmethod
    def skipped(cls, row: ClaimedRow, reason: str, *, scrub_keys: frozenset[str]) -> Mark:
        return cls(row.id, row.token, Status.SKIPPED, reason, scrub_keys=scrub_keys)

    @classmethod
    def failed(cls, row: ClaimedRow, reason: str) -> Mark:
        return cls(row.id, row.token, Status.FAILED, reason)

    @classmethod
    def retry(cls, row: ClaimedRow, reason: str, *, delay: timedelta) -> Mark:
        return cls(row.id, row.token, Status.PENDING, reason, retry_delay=delay)
