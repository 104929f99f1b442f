"""The runtime's figures as OpenTelemetry metrics, one :class:`LaneMetrics` per lane.

The runtime already counts what each batch did (``runtime.report.BatchReport``); a lane reports that
report here once per batch, the claim's duration once per claim, and the age of each row it
marked dispatched. Nothing is counted twice and nothing is decided: the instruments are in
:mod:`.providers`, their names and what to alert on in docs/operations.md ("Metrics").

Every measurement carries the attribute ``outbox.lane`` (the Prometheus label ``outbox_lane``);
the budget counter adds ``outbox.budget`` (``row``: a send cut off by its per-row budget;
``batch``: a batch cut off by its timeout). The feed's refused SSE streams (:func:`stream_refused`)
carry ``outbox.feed.limit`` instead: ``principal`` or ``process``, the cap that refused it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Final, Protocol

from outbox_adapters.telemetry import providers

if TYPE_CHECKING:
    from outbox_core.ports import Clock

__all__ = ["FEED_LIMIT", "LANE", "Counts", "LaneMetrics", "stream_refused"]

#: The attribute that names the lane on every measurement.
LANE: Final = "outbox.lane"
#: The attribute that names the cap a refused feed stream hit (``principal`` or ``process``).
FEED_LIMIT: Final = "outbox.feed.limit"

#: The report's counters and the instrument each one adds to.
_COUNTERS: Final = (
    ("dispatched", "sent"),
    ("skipped", "skipped"),
    ("failed", "failed"),
    ("retried", "retried"),
    ("released", "released"),
    ("stale_marks", "stale_marks"),
    ("mark_errors", "mark_errors"),
    ("handler_errors", "handler_errors"),
    ("leadership_lost", "leadership_lost"),
)


class Counts(Protocol):
    """What one batch did (``runtime.report.BatchReport`` satisfies it)."""

    dispatched: int
    skipped: int
    failed: int
    retried: int
    released: int
    stale_marks: int
    mark_errors: int
    handler_errors: int
    leadership_lost: int
    budget_overruns: int
    timed_out: bool


class LaneMetrics:
    """Reports one lane's figures; every method is a no-op without the OpenTelemetry API."""

    def __init__(self, lane: str) -> None:
        self.lane = lane
        self._attributes = {LANE: lane}
        self._row_budget = {LANE: lane, "outbox.budget": "row"}
        self._batch_budget = {LANE: lane, "outbox.budget": "batch"}

    def claimed(self, seconds: float) -> None:
        """One claim statement took ``seconds``."""
        found = providers.instruments()
        if found is not None:
            found.claim_duration.record(seconds, self._attributes)

    def delivered(self, enqueued_at: datetime, clock: Clock) -> None:
        """A row enqueued at ``enqueued_at`` was marked dispatched now (the clock is read only when
        the figure is recorded: this is on every row's path)."""
        found = providers.instruments()
        if found is not None:
            seconds = (clock.now() - enqueued_at).total_seconds()
            found.end_to_end.record(max(0.0, seconds), self._attributes)

    def batch(self, report: Counts) -> None:
        """Add what one batch did."""
        found = providers.instruments()
        if found is None:
            return
        attributes = self._attributes
        for field, name in _COUNTERS:
            value = getattr(report, field)
            if value:
                getattr(found, name).add(value, attributes)
        if report.budget_overruns:
            found.budget_overruns.add(report.budget_overruns, self._row_budget)
        if report.timed_out:
            found.budget_overruns.add(1, self._batch_budget)

    def overran(self) -> None:
        """A unit of work other than a row (a channel's event) overran its deadline."""
        found = providers.instruments()
        if found is not None:
            found.budget_overruns.add(1, self._row_budget)


def stream_refused(limit: str) -> None:
    """The feed refused a new SSE stream at its ``limit`` (``principal`` or ``process``)."""
    found = providers.instruments()
    if found is not None:
        found.feed_streams_refused.add(1, {FEED_LIMIT: limit})
