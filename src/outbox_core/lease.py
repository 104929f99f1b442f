"""Lease math, the row-start gate, per-row deadlines, fencing and duplicate accounting (ADR 0004).

Theory of operation
-------------------
A claim stamps each row with a lease (``claimed_at + claim_lease``); until it expires no sibling
claims the row, and when it expires the row is claimable again, which is how a crashed worker's rows
come back. Everything here keeps a live worker inside its own lease and keeps a late one harmless:

* **The row-start gate.** A row is started only if a whole per-row budget still fits before the
  batch deadline (:func:`may_start_row`). A row that is not started keeps its lease and is
  re-claimed later; it is not sent half-way and cancelled. (The gate shrinks the duplicate
  window; the detached mark is what keeps delivered work recorded.)
* **Row and step deadlines.** A row's work ends at ``min(start + per_row, lease expiry)``
  (:func:`row_deadline`): a worker never keeps sending past its own lease (docs/reliability.md,
  network partition), because after that a sibling may own the row. A step within it (the SMTP
  dial, the exchange) ends at ``min(start + its budget, row deadline)`` (:func:`exchange_deadline`).
* **The leadership gate.** On a leader-gated lane a row starts only if it ends inside the term
  the worker can prove (:func:`leader_admits_row`), so two workers never send at once.

The gate and the deadlines take monotonic seconds, as the worker reads them: the runtime calls
these functions, so their tests and mutants prove the code that runs.
* **The fence.** Every claim issues a fresh :class:`~outbox_core.messages.ClaimToken`, and a mark
  applies only while the row is ``pending`` under that same token (:func:`fence_admits`).
* **Duplicate accounting.** Delivery is at least once: a crash can duplicate a row only if the peer
  may already have the message when the worker dies, so each crash duplicates each row in flight at
  most once (:func:`max_duplicates`), and :data:`DUPLICATE_WINDOWS` says which kill points can.
"""

from __future__ import annotations

import enum
import math
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, NamedTuple

import attrs

from outbox_core.delivery import Status

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
    "leader_admits_row",
    "lease_expires_at",
    "max_duplicates",
    "may_start_row",
    "may_work_ahead",
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


def _finite(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of monotonic seconds, got {value!r}")


# The gate and the deadlines below run once per row on the worker's hot path; they take monotonic
# seconds (floats) as the worker reads them, and check their inputs only where a batch starts
# (:meth:`BatchClock.start`), so the runtime applies exactly these functions and nothing beside them.


def may_start_row(*, now: float, batch_deadline: float, per_row: float) -> bool:
    """The row-start gate: start a row only if its whole budget ends by the batch deadline.

    A row the batch can't finish is left alone; it is given back (or keeps its lease) and is
    claimed again, instead of being cut off mid-send when the batch ends.
    """
    return now + per_row <= batch_deadline


def leader_admits_row(*, now: float, trusted_until: float, per_row: float) -> bool:
    """The leadership gate: start a row only if it ends inside the term this worker can prove.

    A leader-gated lane must never have two workers sending at once. A new leader can only win
    after the old term has run out; a row that ends before ``trusted_until`` (the term's end on
    the monotonic clock, measured from the renewal's *start*) is therefore over before anybody
    else may act on the lane.
    """
    return now + per_row <= trusted_until


def row_deadline(*, row_started: float, per_row: float, lease_deadline: float) -> float:
    """When a row's work must be over: its budget's end, or its lease's end if that comes first.

    The lease bound is what keeps a slow or partitioned worker from sending after a sibling may
    have re-claimed the row (no send after the worker's own lease deadline: docs/reliability.md,
    the network-partition fault).
    """
    return min(row_started + per_row, lease_deadline)


def exchange_deadline(*, now: float, row_deadline: float, cap: float) -> float:
    """A step's deadline within a row (an SMTP dial or exchange): ``min(now + cap, row_deadline)``.

    ``cap`` is the step's budget (dial 10 s, exchange 30 s by default): a step never runs past its
    own budget nor past the row's deadline.
    """
    return min(now + cap, row_deadline)


@attrs.frozen
class BatchClock:
    """A claimed batch's two deadlines on the worker's monotonic clock (seconds).

    ``claimed_at`` is the instant the claim *started*: the database stamped the lease no earlier,
    so trusting the lease until ``claimed_at + lease`` can only err on the short side.
    """

    #: When the claim started (monotonic seconds).
    claimed_at: float
    #: ``claimed_at + batch_timeout`` until the claim answers, then the answer's instant +
    #: ``batch_timeout`` (never past :attr:`lease_deadline`): no row may start unless it ends by
    #: then.
    batch_deadline: float
    #: ``claimed_at + claim lease``: no row's work may run past it.
    lease_deadline: float

    @classmethod
    def start(cls, claimed_at: float, *, batch_timeout: timedelta, lease: timedelta) -> BatchClock:
        """The clock of a batch whose claim started at ``claimed_at``."""
        _finite("claimed_at", claimed_at)
        _positive("batch_timeout", batch_timeout)
        _positive("lease", lease)
        if batch_timeout >= lease:
            raise ValueError(
                f"a batch timeout ({batch_timeout}) must end before its claim lease ({lease})"
            )
        return cls(
            claimed_at,
            claimed_at + batch_timeout.total_seconds(),
            claimed_at + lease.total_seconds(),
        )

    def answered(self, at: float) -> BatchClock:
        """The clock once the claim answered at ``at``: the batch timeout counts from there.

        The batch timeout is the time the batch's ROWS may take (``batch_size * per_row`` at the
        least); counted from the claim's start it would lose the claim's own round trip, and a
        batch of one row with the shortest timeout (``per_row``) could then never start its row:
        it would give the row back and claim it again, without end. The lease still counts from
        the claim's start, and the deadline never passes it, so no row runs past its lease.
        """
        _finite("at", at)
        timeout = self.batch_deadline - self.claimed_at
        return attrs.evolve(self, batch_deadline=min(at + timeout, self.lease_deadline))

    def may_start_row(self, now: float, per_row: float) -> bool:
        """:func:`may_start_row` against this batch's deadline."""
        return may_start_row(now=now, batch_deadline=self.batch_deadline, per_row=per_row)

    def row_deadline(self, row_started: float, per_row: float) -> float:
        """:func:`row_deadline` against this batch's lease."""
        return row_deadline(
            row_started=row_started, per_row=per_row, lease_deadline=self.lease_deadline
        )


def fence_admits(
    *, row_status: Status, row_token: ClaimToken | None, mark_token: ClaimToken
) -> bool:
    """True when a mark may be applied: the row is pending AND still held under the mark's token.

    Why ``status = 'pending'`` alone is not enough (ADR 0004): a
    retry and a re-claim both leave the row ``pending``. A worker whose lease expired (paused,
    partitioned, slow) cannot tell that a sibling re-claimed the row meanwhile; with the status
    guard alone its late mark would overwrite the sibling's result: a stale permanent failure
    would replace the sibling's success, and an operator's requeue would then send a delivered
    email again. The token changes on every claim, so only the current holder's mark matches. A
    row with no token (never claimed, or written before tokens existed) admits no mark.
    """
    return row_status is Status.PENDING and row_token is not None and row_token == mark_token


def may_work_ahead(*, claimed: int, terminal: int, timed_out: bool) -> bool:
    """Whether a batch claimed ahead may be worked once the batch it was claimed ahead of ended.

    A claim ahead (ADR 0023) is made while the previous batch is still being sent, so on a per-key
    ordered lane it may hold the rows that follow that batch's rows of a key. Those are sent only
    when every one of the ``claimed`` rows of the previous batch ended recorded ``terminal``
    (sent, skipped or failed for good, the mark applied) and the batch was not cut short: then the
    claim ahead holds exactly what a claim made after those marks could have taken. Otherwise (a
    row retried, given back, its mark stale or not recorded) the batch claimed ahead is given back
    unsent, and the next claim starts again from what the store records.
    """
    if claimed < 0 or terminal < 0:
        raise ValueError(f"counts, got claimed={claimed} and terminal={terminal}")
    return not timed_out and terminal == claimed


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
    """Where a worker can die while handling one row (the kill points of docs/reliability.md)."""

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


#: What one kill at each point can cost (docs/reliability.md, a worker killed). Zero where the peer
#: surely lacks the message or the mark is durable; exactly one where the peer has it and the mark
#: is not written.
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
