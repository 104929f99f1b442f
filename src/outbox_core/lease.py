"""Lease math, the row-start gate, per-row deadlines, fencing and duplicate accounting (C10).

Theory of operation
-------------------
A claim stamps each row with a lease (``claimed_at + claim_lease``); until it expires no sibling
claims the row, and when it expires the row is claimable again, which is how a crashed worker's rows
come back. Everything here keeps a live worker inside its own lease and keeps a late one harmless:

* **The row-start gate.** A row is started only if a whole per-row budget still fits before the
  batch deadline (:func:`may_start_row`). A row that is not started keeps its lease and is
  re-claimed later; it is not sent half-way and cancelled. (ADR-072 calls the gate a
  duplicate-window shrink: the detached mark is what keeps delivered work recorded.)
* **Row and exchange deadlines.** A row's work ends at ``min(start + per_row, lease expiry)``
  (:func:`row_deadline`): a worker never keeps sending past its own lease (RELIABILITY F4),
  because after that a sibling may own the row. The SMTP exchange ends at
  ``min(start + 30 s, row deadline)`` (:func:`exchange_deadline`; ADR-072 decision 6).
* **The fence.** Every claim issues a fresh :class:`~outbox_core.messages.ClaimToken`, and a mark
  applies only while the row is ``pending`` under that same token (:func:`fence_admits`).
* **Duplicate accounting.** Delivery is at least once: a crash can duplicate a row only if the peer
  may already have the message when the worker dies, so each crash duplicates each row in flight at
  most once (:func:`max_duplicates`), and :data:`DUPLICATE_WINDOWS` says which kill points can.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, NamedTuple

import attrs

from outbox_core._validators import aware
from outbox_core.delivery import Status
from outbox_core.timing import DEFAULT_EMAIL_TIMING

if TYPE_CHECKING:
    from outbox_core.messages import ClaimToken

__all__ = [
    "DUPLICATE_WINDOWS",
    "BatchClock",
    "DuplicateWindow",
    "KillPoint",
    "duplicates_possible",
    "exchange_deadline",
    "fence_admits",
    "is_expired",
    "lease_expires_at",
    "max_duplicates",
    "may_start_row",
    "row_deadline",
]


def _aware(name: str, value: datetime) -> None:
    # Naive datetimes compare fine with each other and silently mix local time with UTC.
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")


def _positive(name: str, value: timedelta) -> None:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValueError(f"{name} must be a positive timedelta, got {value!r}")


def lease_expires_at(claimed_at: datetime, lease: timedelta) -> datetime:
    """When a lease stamped at ``claimed_at`` ends and a sibling may claim the row again."""
    _aware("claimed_at", claimed_at)
    _positive("lease", lease)
    return claimed_at + lease


def is_expired(expires_at: datetime, *, now: datetime) -> bool:
    """True from the expiry instant on: at ``now == expires_at`` a sibling may already claim."""
    _aware("expires_at", expires_at)
    _aware("now", now)
    return now >= expires_at


def may_start_row(*, now: datetime, batch_deadline: datetime, per_row: timedelta) -> bool:
    """The row-start gate: start a row only if its whole budget ends by the batch deadline.

    A row the batch can't finish is left alone; it keeps its lease and is re-claimed after it,
    instead of being cut off mid-send when the batch is cancelled.
    """
    _aware("now", now)
    _aware("batch_deadline", batch_deadline)
    _positive("per_row", per_row)
    return now + per_row <= batch_deadline


def _deadline_after_start(inst: BatchClock, _attribute: object, deadline: datetime) -> None:
    if deadline <= inst.started_at:
        raise ValueError(
            f"a batch deadline must come after its start, got {deadline} for a start at"
            f" {inst.started_at}"
        )


@attrs.frozen
class BatchClock:
    """When the current batch started and when it must be done."""

    #: When the worker started the batch (after the claim committed).
    started_at: datetime = attrs.field(validator=aware)
    #: ``started_at + batch_timeout``: no row may still be running then.
    deadline: datetime = attrs.field(validator=[aware, _deadline_after_start])

    @classmethod
    def start(cls, now: datetime, batch_timeout: timedelta) -> BatchClock:
        """A clock for a batch starting at ``now`` with ``batch_timeout`` to run."""
        _positive("batch_timeout", batch_timeout)
        return cls(now, now + batch_timeout)

    def may_start_row(self, now: datetime, per_row: timedelta) -> bool:
        """:func:`may_start_row` against this batch's deadline."""
        return may_start_row(now=now, batch_deadline=self.deadline, per_row=per_row)


def row_deadline(
    *, row_started: datetime, per_row: timedelta, lease_expires_at: datetime
) -> datetime:
    """When a row's work must be over: its budget's end, or its lease's end if that comes first.

    The lease bound is what keeps a slow or partitioned worker from sending after a sibling may
    have re-claimed the row (RELIABILITY F4: no send after the worker's own lease deadline).
    """
    _aware("row_started", row_started)
    _positive("per_row", per_row)
    _aware("lease_expires_at", lease_expires_at)
    return min(row_started + per_row, lease_expires_at)


def exchange_deadline(
    *,
    now: datetime,
    row_deadline: datetime,
    cap: timedelta = DEFAULT_EMAIL_TIMING.budgets.smtp_exchange,
) -> datetime:
    """The SMTP exchange's deadline: ``min(now + cap, row_deadline)`` (ADR-072 decision 6).

    ``cap`` is the exchange step's budget (30 s by default); pass the configured one.
    """
    _aware("now", now)
    _aware("row_deadline", row_deadline)
    _positive("cap", cap)
    return min(now + cap, row_deadline)


def fence_admits(
    *, row_status: Status, row_token: ClaimToken | None, mark_token: ClaimToken
) -> bool:
    """True when a mark may be applied: the row is pending AND still held under the mark's token.

    Why ``status = 'pending'`` alone is not enough (the record's guard, ADR-072 decision 3): a
    retry and a re-claim both leave the row ``pending``. A worker whose lease expired (paused,
    partitioned, slow) cannot tell that a sibling re-claimed the row meanwhile; with the status
    guard alone its late mark would overwrite the sibling's result: a stale permanent failure
    would replace the sibling's success, and an operator's requeue would then send a delivered
    email again. The token changes on every claim, so only the current holder's mark matches. A
    row with no token (never claimed, or written before tokens existed) admits no mark.
    """
    return row_status is Status.PENDING and row_token is not None and row_token == mark_token


def max_duplicates(*, crashes: int, rows_in_flight: int) -> int:
    """The most duplicates ``crashes`` crashes can cause: one per crash per row in flight.

    A row is duplicated only when a worker dies after the peer may have the message and before its
    mark commits; the row is then sent once more by whoever re-claims it, and that claim carries a
    new token, so the dead worker can't add a third copy.
    """
    if crashes < 0 or rows_in_flight < 0:
        raise ValueError(
            f"crashes and rows_in_flight are counts, got crashes={crashes}"
            f" and rows_in_flight={rows_in_flight}"
        )
    return crashes * rows_in_flight


class KillPoint(enum.StrEnum):
    """Where a worker can die while handling one row (the fail-points of RELIABILITY F1)."""

    AFTER_CLAIM = "after_claim"
    MID_SMTP_BEFORE_DATA = "mid_smtp_before_data"
    AFTER_DATA_BEFORE_REPLY = "after_data_before_reply"
    AFTER_REPLY_BEFORE_MARK = "after_reply_before_mark"
    MID_MARK = "mid_mark"
    AFTER_MARK = "after_mark"


class DuplicateWindow(NamedTuple):
    """How many extra copies of a row one kill at a point can cause: ``fewest..most``."""

    fewest: int
    most: int


#: What one kill at each point can cost (RELIABILITY F1). Zero where the peer surely lacks the
#: message or the mark is durable; exactly one where the peer has it and the mark is not written.
DUPLICATE_WINDOWS: Final = MappingProxyType(
    {
        # Nothing was sent yet; the re-claim sends the only copy.
        KillPoint.AFTER_CLAIM: DuplicateWindow(0, 0),
        # No DATA, no message: the server discards the half-open transaction.
        KillPoint.MID_SMTP_BEFORE_DATA: DuplicateWindow(0, 0),
        # The server may or may not have queued the message before the connection dropped.
        KillPoint.AFTER_DATA_BEFORE_REPLY: DuplicateWindow(0, 1),
        # The server accepted (250) but the row is still pending: the re-claim sends it again.
        KillPoint.AFTER_REPLY_BEFORE_MARK: DuplicateWindow(1, 1),
        # The mark's UPDATE may or may not have committed.
        KillPoint.MID_MARK: DuplicateWindow(0, 1),
        # The row is dispatched: nothing claims it again.
        KillPoint.AFTER_MARK: DuplicateWindow(0, 0),
    }
)


def duplicates_possible(point: KillPoint) -> DuplicateWindow:
    """The ``(fewest, most)`` duplicates one kill at ``point`` can cause for the row in flight."""
    return DUPLICATE_WINDOWS[point]
