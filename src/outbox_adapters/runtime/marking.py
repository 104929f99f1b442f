"""Recording outcomes: marks that survive the batch's cancellation, within their own budget.

A mark is the fenced compare-and-set that records a row's outcome. Three rules:

* It runs with a budget of its own (the timing's ``mark_budget``), and a store outage inside that
  budget is retried after a jittered pause (:data:`outbox_core.backoff.MARK_RETRY`). The store
  reports an outage as :class:`~outbox_core.errors.StoreUnavailable`; anything else is not retried
  (a statement the row breaks, a bug): the row's lease brings it back.
* It survives cancellation (:func:`run_surviving_cancel`): if the batch times out or the worker is
  stopped while a mark runs, the mark is run again in a task of its own, so work already done is
  always recorded. Running it twice is harmless because it is fenced.
* A stale mark (the fence said no: another claim owns the row) is logged once, here, and counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from outbox_adapters.runtime.config import LaneConfig
from outbox_adapters.runtime.deadline import Deadlines
from outbox_core.backoff import MARK_RETRY
from outbox_core.errors import StaleMark, StoreUnavailable
from outbox_core.messages import ClaimedRow, Mark
from outbox_core.ports import MarkResult, OutboxStore

__all__ = ["Marker", "run_detached", "run_surviving_cancel"]

_log = logging.getLogger("outbox_adapters.runtime")
T = TypeVar("T")
W = TypeVar("W", Mark, Sequence[Mark])


async def run_detached(coro: Coroutine[Any, Any, T], keep: set[asyncio.Task[Any]]) -> T:
    """Run ``coro`` in a task of its own and wait for it, shielded from our caller's cancellation.

    If the caller is cancelled (the batch timed out, the worker is stopping), the task goes on to
    the end; ``keep`` holds it so it is neither garbage-collected nor forgotten at shutdown.
    """
    task = asyncio.ensure_future(coro)
    keep.add(task)
    task.add_done_callback(keep.discard)
    return await asyncio.shield(task)


async def run_surviving_cancel(
    attempt: Callable[[], Coroutine[Any, Any, T]], keep: set[asyncio.Task[Any]]
) -> T:
    """Await ``attempt()`` here; if our caller is cancelled meanwhile, run it again detached.

    This is how a mark survives the batch's cancellation without a task per row: on the happy
    path the mark is an ordinary await. If the batch times out or the worker is cancelled while
    it runs, the driver has settled the statement (committed, or cancelled on the server) by the
    time the cancellation reaches us, and a second run in a task of its own (``keep`` holds it)
    records the result. Running it twice is safe because a mark is fenced: once one run has
    applied, the row is no longer pending under this claim's token and the other matches no row.
    """
    try:
        return await attempt()
    except asyncio.CancelledError:
        task = asyncio.ensure_future(attempt())
        keep.add(task)
        task.add_done_callback(keep.discard)
        raise


class Marker:
    """Writes marks (one, or a window's in one statement) and releases unstarted rows."""

    def __init__(
        self,
        store: OutboxStore,
        *,
        mark_budget: float,
        jitter: Callable[[], float],
        stale: type[StaleMark] = StaleMark,
    ) -> None:
        self.store = store
        self._stale_error = stale
        self.mark_budget = mark_budget
        self._jitter = jitter
        #: The marks' time limits, one loop timer for the marks written one after another.
        self._deadlines = Deadlines()
        #: Detached marks and releases still running; the worker waits for them at shutdown.
        self.in_flight: set[asyncio.Task[Any]] = set()

    @classmethod
    def for_lane(
        cls, store: OutboxStore, config: LaneConfig, *, jitter: Callable[[], float]
    ) -> Marker:
        """The marker of a lane: its mark budget and its way of reporting a stale mark."""
        return cls(
            store,
            mark_budget=config.mark_budget.total_seconds(),
            jitter=jitter,
            stale=config.stale_mark,
        )

    async def mark(self, mark: Mark) -> MarkResult | None:
        """Record ``mark``; ``None`` when it could not be recorded within its budget."""
        if mark.recorded:
            # Handler-owns-mark: the handler's own transaction wrote it, fenced by this claim's
            # token (the webhook fan-out). A second write could only match nothing.
            return MarkResult.APPLIED
        result = await self._within_budget(self.store.mark_if_pending, mark)
        if result is MarkResult.STALE:
            self._stale(mark)
        return result

    async def mark_group(self, marks: Sequence[Mark]) -> Sequence[MarkResult | None]:
        """Record a window's marks in one write (grouped-mark mode), like :meth:`mark`."""
        to_write = [mark for mark in marks if not mark.recorded]  # handler-owns-mark: see mark()
        written = await self._within_budget(self.store.mark_many, to_write) if to_write else []
        if written is None:
            return [MarkResult.APPLIED if mark.recorded else None for mark in marks]
        results = iter(written)
        out = [MarkResult.APPLIED if mark.recorded else next(results) for mark in marks]
        for mark, result in zip(marks, out, strict=True):
            if result is MarkResult.STALE:
                self._stale(mark)
        return out

    def _stale(self, mark: Mark) -> None:
        # Logged once, here (the stores don't), and counted by the caller.
        error = self._stale_error(mark.row_id, mark.status)
        _log.warning("%s", error, extra={"outbox_row": mark.row_id})

    async def surviving(self, mark: Mark) -> MarkResult | None:
        """:meth:`mark`, run again detached if the caller is cancelled meanwhile."""
        return await run_surviving_cancel(lambda: self.mark(mark), self.in_flight)

    async def surviving_group(self, marks: Sequence[Mark]) -> Sequence[MarkResult | None]:
        """:meth:`mark_group`, run again detached if the caller is cancelled meanwhile."""
        return await run_surviving_cancel(lambda: self.mark_group(marks), self.in_flight)

    def detach_group(self, marks: Sequence[Mark]) -> None:
        """Start :meth:`mark_group` in a task of its own and return: for a caller that is being
        cancelled; the worker waits for it with every other detached mark."""
        task = asyncio.ensure_future(self.mark_group(marks))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def release(self, row: ClaimedRow) -> bool:
        """Give back a row that will not be started; ``True`` if the store took it back."""
        try:
            result = await run_detached(self._release_within_budget(row), self.in_flight)
        except Exception:  # noqa: BLE001 - a row not given back comes back when its lease ends
            return False
        return result is MarkResult.APPLIED

    async def wait(self) -> None:
        """Wait for every detached mark still running (each is bounded by its own budget).

        ``asyncio.wait``, not ``gather``: if the waiter is cancelled (a second cancellation of a
        worker already stopping), ``gather`` would cancel the marks it waits for and lose them;
        ``wait`` leaves them running to their end (tests/unit/test_worker.py, simulator seed 72324).
        """
        while self.in_flight:
            await asyncio.wait(list(self.in_flight))

    async def _release_within_budget(self, row: ClaimedRow) -> MarkResult:
        # The budget sits inside the detached task: a timeout around run_detached would leave
        # the shielded task running, and a graceful stop would wait for it for ever.
        async with asyncio.timeout(self.mark_budget):
            return await self.store.release(row.id, row.token)

    async def _within_budget(self, write: Callable[[W], Awaitable[T]], marks: W) -> T | None:
        """Run ``write(marks)`` within the mark budget, retrying a store outage inside it."""
        failures = 0
        try:
            async with self._deadlines.within(self.mark_budget):
                while True:
                    try:
                        return await write(marks)
                    except StoreUnavailable as exc:
                        failures += 1
                        pause = MARK_RETRY.after(failures, jitter=self._jitter())
                        _log.warning("%s failed (%s); retrying", _what(marks), exc)
                    except Exception as exc:  # noqa: BLE001 - a mark must never fail the batch
                        # Not an outage, so a retry won't help. Give up on this row: its lease
                        # brings it back. Type and id only, no traceback: the text may quote it.
                        _log.error(
                            "%s failed (%s); not recorded, the row will be claimed again after"
                            " its lease",
                            _what(marks),
                            type(exc).__name__,
                            extra={"outbox_row": _row_ids(marks)},
                        )
                        return None
                    await asyncio.sleep(pause.total_seconds())
        except TimeoutError:
            _log.error(
                "%s not recorded within %ss; the row will be claimed again after its"
                " lease (a duplicate is possible)",
                _what(marks),
                self.mark_budget,
            )
            return None


def _what(marks: Mark | Sequence[Mark]) -> str:
    """How a log line names a mark, or a grouped mark."""
    if isinstance(marks, Mark):
        return f"mark of row {marks.row_id}"
    return "grouped mark of rows " + ", ".join(str(m.row_id) for m in marks)


def _row_ids(marks: Mark | Sequence[Mark]) -> object:
    return marks.row_id if isinstance(marks, Mark) else [m.row_id for m in marks]
