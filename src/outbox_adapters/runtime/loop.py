"""The worker loop: claim a batch, work it, pause; the same for every lane.

One pass (:meth:`Worker.run_once`)::

    claim  ── one short committed statement: up to batch_size due rows, attempts + 1, a lease of
              claim_lease(batch_size), a fresh claim token (bounded by claim_budget)
    work   ── runtime.batch: gate, send, decide, mark, row by row
    pause  ── when the claim found less than a full batch: the poll interval, or until the
              wake-up (LISTEN/NOTIFY) signals new work; after a failed claim, a jittered pause
              that grows (outbox_core.backoff.CLAIM_RETRY)

With ``LaneConfig.claim_ahead`` (the relay's default, ADR 0023), a full claim starts the next claim
at once, beside the batch's sends, under ``ClaimRequest.ahead_of`` = this batch's token. The next
pass works the rows claimed ahead only if every row of this batch ended terminal
(``outbox_core.lease.may_work_ahead``); otherwise it gives them back unsent (due at once, attempt
refunded) and claims again. A batch claimed ahead is never worked beside another one: the marks
of one batch are recorded before the next batch's first send.

Stopping (:meth:`Worker.request_stop`, wired to SIGTERM by the CLI) stops claiming, lets the row in
flight finish, releases the rows not yet started, and waits for the marks in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
from collections.abc import Callable, Sequence

from outbox_adapters.clock import SystemClock
from outbox_adapters.runtime.batch import BatchRunner
from outbox_adapters.runtime.config import LaneConfig
from outbox_adapters.runtime.leadership import Leadership
from outbox_adapters.runtime.marking import Marker
from outbox_adapters.runtime.report import BatchReport, WorkerStats
from outbox_adapters.wakeup import Wakeup
from outbox_core.errors import StoreUnavailable
from outbox_core.health import HEARTBEAT_BUDGET, heartbeat_due, stale_after
from outbox_core.lease import BatchClock, may_work_ahead
from outbox_core.messages import ClaimedRow, ClaimToken
from outbox_core.ports import (
    ClaimRequest,
    Clock,
    Heartbeat,
    LeaderLease,
    OutboxStore,
    RowHandler,
)

__all__ = ["Worker"]

_log = logging.getLogger("outbox_adapters.runtime")


class Worker:
    """Claims, sends and marks the rows of one lane. See the package docstring."""

    def __init__(  # noqa: PLR0913 - every collaborator is injected, none is read from the world
        self,
        store: OutboxStore,
        handler: RowHandler,
        config: LaneConfig,
        *,
        clock: Clock | None = None,
        leader: LeaderLease | None = None,
        holder: str | None = None,
        entropy: Callable[[int], bytes] = secrets.token_bytes,
        jitter: Callable[[], float] = random.random,
        wakeup: Wakeup | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        if not isinstance(config, LaneConfig):
            raise TypeError(f"Worker needs a LaneConfig, got {config!r}")
        self.store = store
        self.handler = handler
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.holder = holder or f"worker-{secrets.token_hex(4)}"
        self.stats = WorkerStats()
        #: Ends the idle pause early when new work is signalled (None: poll only).
        self.wakeup = wakeup
        #: Where the loop says it is alive, once a turn at most every HEARTBEAT_INTERVAL (None: not
        #: at all). How old a beat may get is the lane's own figure (outbox_core.health).
        self.heartbeat = heartbeat
        self._stale_after = stale_after(config.timing, config.poll_interval)
        self._last_beat: float | None = None
        self._entropy = entropy
        self._jitter = jitter
        self._stopping = asyncio.Event()
        #: The next batch's claim, started beside this batch's sends (``config.claim_ahead``).
        self._ahead: asyncio.Future[tuple[Sequence[ClaimedRow], BatchClock]] | None = None
        self.leadership = Leadership(leader, config, holder=self.holder, clock=self.clock)
        self.marker = Marker.for_lane(store, config, jitter=jitter)
        self.batch = BatchRunner(
            handler=handler,
            config=config,
            clock=self.clock,
            marker=self.marker,
            jitter=jitter,
            stopping=self._stopping.is_set,
            leadership=self.leadership,
        )

    @property
    def leader(self) -> LeaderLease | None:
        return self.leadership.lease

    # --- control -------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming; finish the row in flight; release the rest (safe from a signal handler)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self, *, drain: bool = False) -> WorkerStats:
        """Work until :meth:`request_stop` (or, with ``drain``, until a claim finds nothing due)."""
        try:
            failures = 0
            while not self.stopping:
                leading = await self.leadership.lead()
                await self._beat(leading)
                if not leading:
                    await self._give_back_ahead()  # claimed while leading: not ours to send now
                    if drain:  # another replica leads this lane and is draining it
                        _log.warning("lane %s is led by another worker", self.config.lane)
                        break
                    await self._pause(self.config.poll_interval)
                    continue
                try:
                    report = await self.run_once()
                except (StoreUnavailable, TimeoutError) as exc:
                    # An outage must not end the worker; replicas pause apart (jitter).
                    failures += 1
                    pause = self.config.claim_retry.after(
                        failures, jitter=self._jitter()
                    ).total_seconds()
                    _log.warning(
                        "claim on lane %s failed (%s: %s); retrying in %.1fs",
                        self.config.lane,
                        type(exc).__name__,
                        exc,
                        pause,
                    )
                    await self._pause(pause)
                    continue
                failures = 0
                if drain and report.claimed == 0:
                    break
                if report.claimed < self.config.timing.batch_size:
                    await self._pause(self.config.poll_interval, wakeable=True)
        finally:
            await self._give_back_ahead()
            await self.wait_for_marks()
            await self.leadership.step_down()
        await self._stop_beat()  # only a loop that ended cleanly says so
        return self.stats

    async def _beat(self, leading: bool) -> None:  # noqa: FBT001 - the loop's own flag
        """Write the heartbeat if one is due (outbox_core.health.heartbeat_due). A heartbeat that
        fails is logged and skipped: the worker's work never waits on its own health report."""
        if self.heartbeat is None or not heartbeat_due(self._last_beat, self.clock.monotonic()):
            return
        self._last_beat = self.clock.monotonic()
        try:
            async with asyncio.timeout(HEARTBEAT_BUDGET.total_seconds()):
                await self.heartbeat.beat(
                    self.config.lane,
                    self.holder,
                    stale_after=self._stale_after,
                    leading=leading if self.leadership.lease is not None else None,
                )
        except (StoreUnavailable, TimeoutError) as exc:
            _log.warning("heartbeat on lane %s failed (%s)", self.config.lane, exc)

    async def _stop_beat(self) -> None:
        """Write the stop beat (``outbox healthcheck`` then reports this worker stopped, not live)
        if this loop ever beat; within the heartbeat's budget, a failure logged and skipped."""
        if self.heartbeat is None or self._last_beat is None:
            return
        try:
            async with asyncio.timeout(HEARTBEAT_BUDGET.total_seconds()):
                await self.heartbeat.stop(self.config.lane, self.holder)
        except (StoreUnavailable, TimeoutError) as exc:
            _log.warning("stop beat on lane %s failed (%s)", self.config.lane, exc)

    async def run_once(self) -> BatchReport:
        """Claim one batch (or take the one claimed ahead) and work it. Returns what happened."""
        report = BatchReport()
        rows, times = await self._next_batch()
        report.claimed = len(rows)
        if rows:
            if self.config.claim_ahead and len(rows) == self.config.timing.batch_size:
                self._ahead = asyncio.ensure_future(self._claim(ahead_of=rows[0].token))
            try:
                async with self.leadership.renewed():
                    await self.batch.run(rows, times, report)
            except TimeoutError:
                report.timed_out = True
                _log.warning(
                    "batch timed out; rows not finished keep their lease",
                    extra={"outbox_lane": self.config.lane, "outbox_rows": len(rows)},
                )
            terminal = report.dispatched + report.skipped + report.failed
            if not may_work_ahead(
                claimed=report.claimed, terminal=terminal, timed_out=report.timed_out
            ):
                await self._give_back_ahead()
        self.stats.add(report)
        self.stats.batches += 1
        self.batch.metrics.batch(report)
        return report

    async def _next_batch(self) -> tuple[Sequence[ClaimedRow], BatchClock]:
        """The batch claimed ahead during the last pass, if one was; else a claim now."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            return await ahead
        return await self._claim()

    async def _give_back_ahead(self) -> None:
        """Give back, unsent, the rows of a claim made ahead (due at once, attempt refunded); a
        claim that failed or is still running is waited for (it is bounded by its budget), its
        failure dropped: the next claim finds what the store records."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        # asyncio.wait, not ``await ahead``: a cancellation of this worker while it waits is the
        # worker's (it propagates, and the claim runs to its end), never taken for the claim's.
        await asyncio.wait({ahead})
        if ahead.cancelled():
            return
        failure = ahead.exception()
        if isinstance(failure, StoreUnavailable | TimeoutError):
            return  # if it did commit, its rows come back when their lease ends
        rows, _ = ahead.result()
        released = await self.batch.release_all(rows)
        self.stats.released += released
        _log.info(
            "lane %s: gave back %d row(s) claimed ahead of a batch that did not end terminal",
            self.config.lane,
            len(rows),
        )

    async def _claim(
        self, *, ahead_of: ClaimToken | None = None
    ) -> tuple[Sequence[ClaimedRow], BatchClock]:
        """Claim a batch: the rows, and the batch's deadlines from the instant the claim started."""
        timing = self.config.timing
        token = ClaimToken.from_entropy(self._entropy(16))
        lease = timing.claim_lease()
        # The lease started no earlier than this instant, so trusting it until claim start + lease
        # on our monotonic clock can only err on the short side.
        times = BatchClock.start(
            self.clock.monotonic(), batch_timeout=timing.batch_timeout, lease=lease
        )
        if self.wakeup is not None:
            # Clear, then claim, then wait: a commit that lands during the claim sets it again,
            # so the next pause returns at once instead of sleeping on a due row.
            self.wakeup.clear()
        # Bounded: on a silent network partition an unbounded claim would wait for the kernel's
        # retransmission timeout (~15 min) and a stop request would never be honoured. If the
        # claim did commit, its rows simply come back when their lease ends.
        async with asyncio.timeout(self.config.claim_budget.total_seconds()):
            rows = await self.store.claim_due(
                ClaimRequest(self.config.lane, timing.batch_size, lease, token, ahead_of=ahead_of)
            )
        answered = self.clock.monotonic()
        self.batch.metrics.claimed(answered - times.claimed_at)
        return rows, times.answered(answered)

    async def wait_for_marks(self) -> None:
        """Wait for every detached mark still running (each is bounded by its own budget)."""
        await self.marker.wait()

    # --- pauses --------------------------------------------------------------------------------

    async def _pause(self, seconds: float, *, wakeable: bool = False) -> None:
        """Sleep, but wake at once when a stop is requested, or (``wakeable``) new work is signalled.

        Only the pause after a claim is wakeable: the claim clears the signal, so a follower (which
        never claims) waiting on it would find it set every time and spin.
        """
        if wakeable and self.wakeup is not None and await self._wait_for_work(self.wakeup, seconds):
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()

    async def _wait_for_work(self, wakeup: Wakeup, seconds: float) -> bool:
        """Wait for a stop, a wake-up or the end of ``seconds``; ``False`` if the wake-up broke."""
        stop = asyncio.ensure_future(self._stopping.wait())
        work = asyncio.ensure_future(wakeup.wait())
        try:
            await asyncio.wait((stop, work), timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            work.cancel()
        if work.done() and not work.cancelled() and work.exception() is not None:
            # Degrade to polling for this pause rather than spin on a signal that fails at once.
            _log.warning("wake-up signal failed (%r); polling", work.exception())
            return False
        return True
