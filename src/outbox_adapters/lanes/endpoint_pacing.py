"""Each webhook endpoint's own rate cap (ADR 0018): at most ``max_per_second`` deliveries a
second to an endpoint, across the sending process.

One :class:`EndpointPacers` is made per run of the deliveries' lane and shared by every attempt
of it in the process, first attempts (``BornRows``) and retries (the retry ``Worker``) alike, so
the cap holds across both (not across processes: N processes deliver up to N times the cap). It
keeps one core :class:`~outbox_core.send_caps.TokenBucket` per capped endpoint, keyed by endpoint
id, and drops the buckets that have gone idle (every reservation passed: a fresh bucket would
answer the same), so the endpoints a lane stopped delivering to hold no entry for long.

A delivery waits for its start inside its attempt's budget, but for at most half of it, so the
request keeps the other half. A delivery whose start would come later is NOT a failed attempt:
:meth:`EndpointPacers.admit` answers :meth:`~outbox_core.outcomes.Outcome.deferred`, the core
decides a retry mark that refunds the attempt (due again when the bucket next admits), and the
delivery never moves toward ``failed`` nor counts toward endpoint health.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from outbox_core.outcomes import Outcome
from outbox_core.ports import Clock
from outbox_core.send_caps import TokenBucket

__all__ = ["EndpointPacers"]

#: The registry looks for idle buckets once it holds this many (then twice as many as it kept).
_FIRST_SWEEP: Final = 64


class EndpointPacers:
    """The buckets of a lane run's capped endpoints, by endpoint id; waits on ``clock``."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._buckets: dict[int, TokenBucket] = {}
        self._sweep_at = _FIRST_SWEEP

    async def admit(self, endpoint_id: int, cap: int | None, deadline: float) -> Outcome | None:
        """Wait for this delivery's start to ``endpoint_id`` (capped at ``cap`` a second; ``None``:
        no cap, no wait); ``None`` once it may start, or the deferred outcome of a delivery whose
        start would come after ``deadline`` (the clock's monotonic seconds): nothing was sent and
        nothing was reserved."""
        if cap is None:
            return None
        now = self.clock.monotonic()
        bucket = self._bucket(endpoint_id, cap, now)
        admission = bucket.admit(now, latest=deadline)
        wait = admission.wait(now)
        if not admission.admitted:
            return Outcome.deferred(
                f"endpoint {endpoint_id} rate cap ({cap}/s): no start before the attempt's"
                f" deadline; not attempted, due again in {wait:.1f}s",
                retry_after=timedelta(seconds=wait),
            )
        if wait > 0:
            await self.clock.sleep(wait)
        return None

    def _bucket(self, endpoint_id: int, cap: int, now: float) -> TokenBucket:
        bucket = self._buckets.get(endpoint_id)
        if bucket is None or bucket.rate != cap:
            # A changed cap starts a fresh bucket at the new rate.
            if len(self._buckets) >= self._sweep_at:
                self._sweep(now)
            bucket = self._buckets[endpoint_id] = TokenBucket(cap)
        return bucket

    def _sweep(self, now: float) -> None:
        """Drop the idle buckets; sweep again when twice as many as kept (amortised O(1))."""
        self._buckets = {i: b for i, b in self._buckets.items() if not b.idle(now)}
        self._sweep_at = max(_FIRST_SWEEP, 2 * len(self._buckets))

    def tracked(self) -> frozenset[int]:
        """The endpoints holding a bucket (for tests and diagnostics)."""
        return frozenset(self._buckets)
