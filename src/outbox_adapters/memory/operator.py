"""The in-memory store's operator side (:class:`outbox_core.ports.OperatorStore`): what
``outbox get|failed|stats|keys rotate`` read and rewrite, with PostgreSQL's orderings.

A base class of :class:`~outbox_adapters.memory.store.MemoryStore`, which owns the rows, the lock
and the clock; kept apart so each module stays one concern.
"""

from __future__ import annotations

import asyncio
import threading

from outbox_adapters.memory.rows import Row, decoded, error_group, failed_order
from outbox_adapters.store_rules import check_batch_size, coerce_row_id, payload_json
from outbox_core.delivery import Status
from outbox_core.errors import StoreUnavailable
from outbox_core.messages import RowId
from outbox_core.operator import FailedReport, LaneStats, PayloadRewrites, StoredRow
from outbox_core.ports import Clock, PayloadRewrite

__all__ = ["MemoryOperatorReads"]


class MemoryOperatorReads:
    """Operator reads and the payload rewrite over the rows a ``MemoryStore`` holds."""

    _clock: Clock
    _lock: threading.RLock
    _rows: dict[int, Row]
    #: Stale marks per lane (PostgreSQL: ``outbox_stale_marks``).
    _stale: dict[str, int]
    #: Switched off, every operation raises StoreUnavailable (an outage, for tests).
    available: bool

    # --- operator reads ---------------------------------------------------------------------------

    async def get(self, row_id: RowId) -> StoredRow | None:
        """One row, or ``None``. The payload is raw: redact before showing it."""
        await asyncio.sleep(0)
        self._check_available("get")
        with self._lock:
            row = self._rows.get(coerce_row_id(row_id))
            return None if row is None else row.snapshot()

    async def list_failed(self, lane: str | None = None, limit: int = 100) -> FailedReport:
        """The ``limit`` newest failed rows, and all failed rows grouped by error."""
        await asyncio.sleep(0)
        self._check_available("list_failed")
        with self._lock:
            failed = [
                row.snapshot()
                for row in self._by_id()
                if row.status is Status.FAILED and (lane is None or row.lane == lane)
            ]
        # PostgreSQL: ORDER BY resolved_at DESC, id DESC (a NULL would sort first).
        newest = sorted(failed, key=failed_order, reverse=True)
        groups: dict[str | None, list[StoredRow]] = {}
        for row in failed:
            groups.setdefault(row.last_error, []).append(row)
        by_error = [error_group(error, rows) for error, rows in groups.items()]
        # PostgreSQL: ORDER BY count(*) DESC, last_error (a NULL sorts last).
        by_error.sort(key=lambda g: (-g.rows, g.error is None, g.error or ""))
        return FailedReport(rows=tuple(newest[:limit]), by_error=tuple(by_error))

    async def counts(self) -> dict[str, dict[Status, int]]:
        """Rows per lane and status, e.g. ``{"email": {Status.PENDING: 3, ...}}``."""
        await asyncio.sleep(0)
        self._check_available("counts")
        result: dict[str, dict[Status, int]] = {}
        with self._lock:
            for row in self._by_id():
                lane = result.setdefault(row.lane, {})
                lane[row.status] = lane.get(row.status, 0) + 1
        return result

    async def lane_stats(self) -> dict[str, LaneStats]:
        """Per lane: rows per status and stale marks (a lane with only stale marks is listed)."""
        self._check_available("lane_stats")
        counts = await self.counts()
        with self._lock:
            stale = dict(self._stale)
        return {
            lane: LaneStats(rows=counts.get(lane, {}), stale_marks=stale.get(lane, 0))
            for lane in sorted(counts.keys() | stale.keys())
        }

    async def rewrite_payloads(
        self, rewrite: PayloadRewrite, *, lane: str | None = None, batch_size: int = 500
    ) -> PayloadRewrites:
        """PostgresStore.rewrite_payloads: every pending and failed row (of ``lane``) in id order,
        ``batch_size`` at a time; ``rewrite`` returns the new payload or ``None``. A poison row
        (its payload can't be decoded) is read and left alone."""
        check_batch_size(batch_size)
        await asyncio.sleep(0)
        self._check_available("rewrite_payloads")
        with self._lock:
            unsent = [
                row
                for row in self._by_id()
                if row.status in (Status.PENDING, Status.FAILED) and lane in (None, row.lane)
            ]
            rewritten: list[int] = []
            for row in unsent:
                payload = decoded(row.payload)
                if isinstance(payload, str):
                    continue
                new = rewrite(row.id, row.lane, payload)
                if new is not None:
                    row.payload = payload_json(new)
                    row.updated_at = self._clock.now()
                    rewritten.append(row.id)
        # Nothing changes between the read and the write here: one step under the lock.
        return PayloadRewrites(
            batches=-(-len(unsent) // batch_size),
            examined=len(unsent),
            rewritten=tuple(rewritten),
            changed=(),
        )

    def rows(self, lane: str | None = None) -> list[StoredRow]:
        """Every row (of ``lane``), oldest first: what a host's test asserts it enqueued."""
        self._check_available("rows")
        with self._lock:
            return [row.snapshot() for row in self._by_id() if lane is None or row.lane == lane]

    def _by_id(self) -> list[Row]:
        return [self._rows[i] for i in sorted(self._rows)]

    def _check_available(self, doing: str) -> None:
        if not self.available:
            raise StoreUnavailable(
                f"in-memory store unavailable during {doing} (MemoryStore.available is False)"
            )
