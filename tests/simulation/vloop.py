"""Virtual time: an event loop whose clock moves only when every task waits.

:class:`VirtualLoop` is an ``asyncio`` loop with no I/O at all. Its :meth:`~VirtualLoop.time` is a
number that only :meth:`~VirtualLoop._run_once` moves: when no callback is ready, the clock jumps
to the earliest timer. So ``asyncio.sleep``, ``asyncio.timeout`` and ``wait_for`` (and with them
every budget, lease and TTL of the runtime) run in simulated seconds, an hour of them in
milliseconds, the same way every time.

Each iteration runs the ready callbacks in a canonical order (a task's callbacks by the task's
creation number, the rest after them in arrival order), so the interleaving never depends on
object addresses (``set`` iteration over tasks, as ``TaskGroup`` cancels its children). With
``reorder`` on, a seeded shuffle of that order stands for wake-ups arriving in another order;
with :attr:`VirtualLoop.ordered_starts` the first steps of new tasks keep their creation order
among themselves (asyncio runs ``call_soon`` callbacks in order: a task starts when it was made).

It overrides ``BaseEventLoop._run_once`` (CPython 3.11's logic, without the selector) and reads
the loop's private ``_ready`` / ``_scheduled`` queues: a test tool, pinned by the simulator's tests.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from collections.abc import Callable, Coroutine, Generator
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["Deadlock", "VirtualClock", "VirtualLoop"]

#: The wall time at virtual second 0.
EPOCH = datetime(2030, 1, 1, tzinfo=UTC)


class Deadlock(RuntimeError):
    """Every task waits and no timer is set: the simulated system can never move again."""


class VirtualLoop(asyncio.BaseEventLoop):
    """An asyncio loop on a virtual clock (see the module docstring)."""

    def __init__(self, *, rng: random.Random | None = None) -> None:
        super().__init__()
        self._now = 0.0
        self._clock_resolution = 1e-9
        #: The seeded source of reordered wake-ups (``None``: never reorder).
        self._rng = rng
        #: Reorder the ready callbacks until this virtual instant.
        self.reorder_until = -1.0
        #: Keep new tasks' first steps in creation order under a reorder (the relay's world).
        self.ordered_starts = False
        self._unstarted: set[asyncio.Task[Any]] = set()
        self._task_numbers = itertools.count()
        self.set_task_factory(self._numbered_task)
        #: Loop iterations run so far (a cost figure).
        self.iterations = 0

    # --- the virtual clock -----------------------------------------------------------------------

    def time(self) -> float:
        return self._now

    def _numbered_task(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any],
    ) -> asyncio.Task[Any]:
        # The name is the canonical order of the task's callbacks (zero-padded: sorts as text).
        task = asyncio.Task(coro, loop=loop, name=f"{next(self._task_numbers):09d}")
        if self.ordered_starts:
            self._unstarted.add(task)
        return task

    def _run_once(self) -> None:
        scheduled = self._scheduled  # type: ignore[attr-defined]
        ready = self._ready  # type: ignore[attr-defined]
        while scheduled and scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
            heapq.heappop(scheduled)._scheduled = False
        if not ready and not self._stopping:  # type: ignore[attr-defined]
            if not scheduled:
                raise Deadlock("every task waits and no timer is set")
            self._now = max(self._now, scheduled[0]._when)
        end = self._now + self._clock_resolution
        while scheduled and scheduled[0]._when < end:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            ready.append(handle)
        self.iterations += 1
        ntodo = len(ready)
        if ntodo > 1:
            batch = [ready.popleft() for _ in range(ntodo)]
            batch.sort(key=_canonical)
            self._reorder(batch)
            ready.extendleft(reversed(batch))
        if self._unstarted:  # each of these tasks takes its first step now
            # Only a task's own step counts (a ready callback may be bound to anything: a done
            # callback such as ``set.discard`` is bound to a set, which is not even hashable).
            self._unstarted.difference_update(
                owner for owner in map(_owner, ready) if isinstance(owner, asyncio.Task)
            )
        for _ in range(ntodo):
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()

    def _reorder(self, batch: list[asyncio.Handle]) -> None:
        if self._rng is None or self._now >= self.reorder_until:
            return
        self._rng.shuffle(batch)
        if self._unstarted:
            self._keep_starts_in_order(batch)

    def _keep_starts_in_order(self, batch: list[asyncio.Handle]) -> None:
        starts = [i for i, handle in enumerate(batch) if _owner(handle) in self._unstarted]
        for i, handle in zip(
            starts, sorted((batch[i] for i in starts), key=_canonical), strict=True
        ):
            batch[i] = handle

    # --- no I/O ------------------------------------------------------------------------------------

    def _process_events(self, event_list: object) -> None:  # pragma: no cover - never called
        del event_list

    def _write_to_self(self) -> None:
        """Nothing wakes a selector here: the loop never blocks."""


def _owner(handle: asyncio.Handle) -> object:
    return getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]


def _canonical(handle: asyncio.Handle) -> str:
    owner = _owner(handle)
    if isinstance(owner, asyncio.Task):
        return owner.get_name()
    return "~"  # after the tasks, in arrival order (the sort is stable)


class VirtualClock:
    """:class:`outbox_core.ports.Clock` on the running virtual loop, with a wall-time offset.

    ``monotonic()`` is the loop's virtual time; ``now()`` is :data:`EPOCH` plus that plus
    :attr:`offset`, which a wall-clock jump moves (monotonic time never jumps).
    """

    def __init__(self, time: Callable[[], float]) -> None:
        self._time = time
        self.offset = 0.0

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self._time() + self.offset)

    def monotonic(self) -> float:
        return self._time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
