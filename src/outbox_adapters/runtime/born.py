"""First attempts of rows that were born claimed: the webhook deliveries a fan-out just wrote.

A fan-out writes each delivery row already leased to this process (``next_attempt_at = now +
birth lease``, a birth claim token, one attempt counted), so no retry worker can take it while
its first attempt runs here. That first attempt is an ordinary row of the lane: the same
:class:`~outbox_adapters.runtime.batch.BatchRunner` gates it, bounds its send by the lease, lets
the core decide and writes the fenced mark (surviving cancellation) — a one-row batch whose claim
is the fan-out, and whose lease is the birth lease. Nothing here claims, sends or marks by itself.

The birth lease is trusted from an instant taken *before* the fan-out transaction began (the
database stamped it no earlier), so the row-start gate and the send deadline can only err on the
short side. A row that cannot start in time (too many first attempts waiting for a slot) is given
back, due at once, for the retry lane.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Final

import attrs

from outbox_adapters.clock import SystemClock
from outbox_adapters.runtime.batch import BatchRunner
from outbox_adapters.runtime.config import LaneConfig
from outbox_adapters.runtime.leadership import Leadership
from outbox_adapters.runtime.marking import Marker
from outbox_adapters.runtime.report import BatchReport, WorkerStats
from outbox_core.errors import ConfigurationError
from outbox_core.lease import BatchClock
from outbox_core.messages import ClaimedRow
from outbox_core.ports import Clock, OutboxStore, RowHandler

__all__ = ["DEFAULT_FIRST_ATTEMPTS", "BornRows"]

#: First attempts one process runs at the same time (each is one HTTP request in flight).
DEFAULT_FIRST_ATTEMPTS: Final = 32
# The gate needs a batch deadline strictly inside the lease: end the rows' window this much early.
_EDGE: Final = timedelta(milliseconds=1)


class BornRows:
    """Runs the first attempt of born-leased rows in this process, bounded in number."""

    def __init__(  # noqa: PLR0913 - keyword-only collaborators, as the Worker's
        self,
        store: OutboxStore,
        handler: RowHandler,
        config: LaneConfig,
        *,
        lease: timedelta,
        clock: Clock | None = None,
        jitter: Callable[[], float] = random.random,
        in_flight: int = DEFAULT_FIRST_ATTEMPTS,
    ) -> None:
        if lease < config.timing.per_row:
            raise ConfigurationError(
                f"a birth lease of {lease.total_seconds():g}s cannot hold one attempt of"
                f" {config.timing.per_row.total_seconds():g}s"
            )
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
            raise ConfigurationError(f"in_flight must be a whole number >= 1, got {in_flight!r}")
        self.config = config
        self.lease = lease
        self.clock: Clock = clock or SystemClock()
        self.stats = WorkerStats()
        self._slots = asyncio.Semaphore(in_flight)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = asyncio.Event()
        self.marker = Marker.for_lane(store, config, jitter=jitter)
        self._rows = BatchRunner(
            handler=handler,
            config=_one_row_at_a_time(config),
            clock=self.clock,
            marker=self.marker,
            jitter=jitter,
            stopping=self._stopping.is_set,
            # Not leader-gated: a born row is this process's by its birth token, whoever leads.
            leadership=Leadership(None, config, holder="first-attempts", clock=self.clock),
        )

    def start(self, rows: Sequence[ClaimedRow], *, born_at: float) -> None:
        """Start the first attempt of each of ``rows``, born leased at or after ``born_at`` (the
        monotonic instant taken before the fan-out transaction began)."""
        times = BatchClock.start(born_at, batch_timeout=self.lease - _EDGE, lease=self.lease)
        for row in rows:
            task = asyncio.ensure_future(self._first_attempt(row, times))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @property
    def running(self) -> int:
        """First attempts started and not finished (waiting for a slot, sending or marking)."""
        return len(self._tasks)

    def request_stop(self) -> None:
        """Start no more first attempts: rows still waiting for a slot are given back."""
        self._stopping.set()

    async def wait(self) -> None:
        """Wait until every first attempt started so far has finished and been recorded."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.marker.wait()

    async def _first_attempt(self, row: ClaimedRow, times: BatchClock) -> None:
        report = BatchReport(claimed=1)
        async with self._slots:
            # A one-row batch: the gate (release if it can no longer end inside its birth lease),
            # the send bounded by the lease, decide, and the fenced mark, as for any claimed row.
            await self._rows.run([row], times, report)
        self.stats.add(report)
        self.stats.batches += 1
        self._rows.metrics.batch(report)


def _one_row_at_a_time(config: LaneConfig) -> LaneConfig:
    """``config`` in the strict mode: each first attempt is a one-row batch of its own."""
    return attrs.evolve(config, rows_in_flight=1, group_marks=False)
