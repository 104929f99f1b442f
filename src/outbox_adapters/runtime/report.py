"""What the runtime did: per batch (:class:`BatchReport`) and since the worker started."""

from __future__ import annotations

import attrs

from outbox_core.delivery import Status
from outbox_core.messages import Mark
from outbox_core.ports import MarkResult

__all__ = ["BatchReport", "WorkerStats", "count"]


@attrs.define
class BatchReport:
    """What one claim-and-send pass did."""

    claimed: int = 0
    dispatched: int = 0
    skipped: int = 0
    failed: int = 0
    retried: int = 0
    released: int = 0
    stale_marks: int = 0
    mark_errors: int = 0
    handler_errors: int = 0
    #: Rows not started because the worker could not prove its leadership for them.
    leadership_lost: int = 0
    #: Sends cut off by the row's budget (the batch's own timeout is :attr:`timed_out`).
    budget_overruns: int = 0
    timed_out: bool = False

    def add(self, other: BatchReport) -> None:
        for field in attrs.fields(BatchReport):
            if field.name != "timed_out":
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


@attrs.define
class WorkerStats(BatchReport):
    """Totals since the worker started."""

    batches: int = 0


_COUNTER_FOR_STATUS = {
    Status.DISPATCHED: "dispatched",
    Status.SKIPPED: "skipped",
    Status.FAILED: "failed",
    Status.PENDING: "retried",
}


def count(mark: Mark, result: MarkResult | None, report: BatchReport) -> None:
    """Count one mark's result: its status when applied, stale, or not recorded (``None``)."""
    if result is MarkResult.APPLIED:
        # A deferral (attempt refunded) is a row given back, like a release, not a retry.
        counter = "released" if mark.refund else _COUNTER_FOR_STATUS[mark.status]
        setattr(report, counter, getattr(report, counter) + 1)
    elif result is MarkResult.STALE:
        report.stale_marks += 1
    else:
        report.mark_errors += 1
