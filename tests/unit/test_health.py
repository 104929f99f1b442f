"""The healthcheck's rules (outbox_core.health) and the worker's heartbeat in its loop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.memory import MemoryLeaderLease, MemoryStore, RecordingHandler
from outbox_adapters.runtime import Worker
from outbox_core.errors import StoreUnavailable
from outbox_core.event_timing import RelayTiming
from outbox_core.health import (
    HEARTBEAT_BUDGET,
    HEARTBEAT_INTERVAL,
    Beat,
    LeaderSeen,
    assess,
    healthy,
    heartbeat_due,
    stale_after,
)
from outbox_core.messages import NewMessage
from outbox_core.timing import EmailTiming

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def test_a_beat_is_due_first_then_every_interval() -> None:
    assert heartbeat_due(None, 5.0)
    assert not heartbeat_due(100.0, 109.9)
    assert heartbeat_due(100.0, 110.0)
    assert heartbeat_due(100.0, 101.0, interval=S)


def test_a_live_beat_is_never_older_than_a_batch_a_pause_and_two_intervals() -> None:
    relay = RelayTiming()
    assert stale_after(relay, 1.0) == 2 * HEARTBEAT_INTERVAL + relay.batch_timeout + S
    email = EmailTiming()
    assert stale_after(email, 0.5, interval=S) == 2 * S + email.batch_timeout + S / 2


def checks(**given: object) -> dict[str, tuple[bool, str]]:
    stated: dict[str, object] = {
        "lane": "email",
        "host": "h1",
        "skew": timedelta(0),
        "beats": [Beat("h1:7", age=S, stale_after=60 * S, leading=True)],
        "leader": LeaderSeen("h1:7", term=3, expires_in=20 * S),
    }
    found = assess(**{**stated, **given})  # type: ignore[arg-type]
    return {check.name: (check.ok, check.detail) for check in found}


def test_a_live_leading_worker_on_a_true_clock_is_healthy() -> None:
    found = checks()
    assert all(ok for ok, _ in found.values())
    assert (
        found["heartbeat"][1] == "1 live worker(s) of lane email on h1; newest beat h1:7 1.0s ago"
    )
    assert found["leader"][1] == "lane email led by h1:7 (term 3, 20.0s left)"
    assert healthy(
        assess(
            lane="l",
            host="h",
            skew=timedelta(0),
            beats=[Beat("w", S, S)],
            leader=None,
            require_leader=False,
        )
    )


@pytest.mark.parametrize("skew", [3 * S, -3 * S])
def test_a_clock_off_by_more_than_the_bound_fails_either_way(skew: timedelta) -> None:
    ok, detail = checks(skew=skew)["clock"]
    assert not ok
    assert "(bound 2.0s)" in detail
    assert checks(skew=skew, max_skew=4 * S)["clock"][0]
    assert checks(skew=2 * S)["clock"][0]  # the bound itself passes


def test_heartbeats_stale_or_missing_fail_naming_why() -> None:
    stale = checks(beats=[Beat("h1:7", age=61 * S, stale_after=60 * S)])["heartbeat"]
    assert stale == (
        False,
        "no live worker of lane email on h1: the newest beat (h1:7) is 61.0s old, over its bound of 60.0s",
    )
    assert checks(beats=[Beat("h1:7", age=60 * S, stale_after=60 * S)])["heartbeat"][0]
    assert checks(beats=[])["heartbeat"] == (False, "no worker of lane email on h1 has ever beaten")
    mixed = checks(beats=[Beat("old", 90 * S, 60 * S), Beat("new", 2 * S, 60 * S)])["heartbeat"]
    assert mixed[0]
    assert "newest beat new 2.0s ago" in mixed[1]


def test_a_stop_beat_is_never_live_however_young_and_the_check_says_it_stopped() -> None:
    stopped = Beat("h1:7", age=S, stale_after=60 * S, stopped=True)
    assert not stopped.fresh
    assert checks(beats=[stopped])["heartbeat"] == (
        False,
        (
            "no live worker of lane email on h1: the newest beat (h1:7) says it stopped cleanly"
            " 1.0s ago"
        ),
    )
    # A sibling still beating keeps the lane live; a stale beat newer than a stop says so.
    assert checks(beats=[stopped, Beat("h1:8", 2 * S, 60 * S)])["heartbeat"][0]
    stale_last = checks(
        beats=[Beat("h1:7", 90 * S, 60 * S, stopped=True), Beat("h1:8", 61 * S, 60 * S)]
    )
    assert "(h1:8) is 61.0s old, over its bound" in stale_last["heartbeat"][1]


def test_a_lane_without_a_live_leader_fails_unless_not_required() -> None:
    assert checks(leader=None)["leader"] == (False, "lane email has no live leader (no leader row)")
    over = checks(leader=LeaderSeen("h2:9", term=4, expires_in=-S))["leader"]
    assert over == (False, "lane email has no live leader (h2:9's term is over)")
    assert "leader" not in checks(leader=None, require_leader=False)
    assert not healthy(assess(lane="l", host="h", skew=timedelta(0), beats=[], leader=None))


class CountingClaims(MemoryStore):
    """The in-memory store, counting claims (one per turn of the worker's loop)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.claims: list[object] = []

    async def claim_due(self, request):
        self.claims.append(request)
        return await super().claim_due(request)


class Beats:
    def __init__(self, *, fail: bool = False) -> None:
        self.beats: list[tuple[str, str, timedelta, bool | None]] = []
        self.stops: list[tuple[str, str]] = []
        self.fail = fail

    async def beat(
        self, lane: str, holder: str, *, stale_after: timedelta, leading: bool | None
    ) -> None:
        self.beats.append((lane, holder, stale_after, leading))
        if self.fail:
            raise StoreUnavailable("connection refused")

    async def stop(self, lane: str, holder: str) -> None:
        self.stops.append((lane, holder))
        if self.fail:
            raise StoreUnavailable("connection refused")


async def test_the_loop_beats_once_per_interval_with_its_lanes_bound() -> None:
    clock = FakeClock(T0)
    store = CountingClaims(clock=clock)
    beats = Beats()
    config = email_lane(poll_interval=0.001)
    worker = Worker(store, RecordingHandler(), config, clock=clock, holder="me", heartbeat=beats)

    async def turns(count: int) -> None:
        """Let the loop turn ``count`` times (each claim is one turn), the clock standing still."""
        target = len(store.claims) + count
        async with asyncio.timeout(10):
            while len(store.claims) < target:  # noqa: ASYNC110 - the worker counts, not signals
                await asyncio.sleep(0.001)

    async def turn_then_stop() -> None:
        await turns(5)
        assert len(beats.beats) == 1
        clock.advance(HEARTBEAT_INTERVAL)
        await turns(5)
        worker.request_stop()

    await asyncio.gather(worker.run(), turn_then_stop())
    assert beats.beats == [("email", "me", stale_after(config.timing, 0.001), None)] * 2
    assert beats.stops == [("email", "me")]  # the stop beat, once, after the last beat


async def test_a_loop_that_never_beat_writes_no_stop_beat() -> None:
    beats = Beats()
    worker = Worker(MemoryStore(), RecordingHandler(), email_lane(), heartbeat=beats)
    worker.request_stop()
    await worker.run()
    assert (beats.beats, beats.stops) == ([], [])


async def test_a_loop_that_ends_with_an_error_writes_no_stop_beat() -> None:
    class Broken(MemoryStore):
        async def claim_due(self, request):
            raise RuntimeError("a bug")

    beats = Beats()
    worker = Worker(Broken(), RecordingHandler(), email_lane(), heartbeat=beats)
    with pytest.raises(RuntimeError, match="a bug"):
        await worker.run()
    assert (len(beats.beats), beats.stops) == (1, [])


async def test_a_leader_gated_worker_says_whether_it_leads_and_a_failing_beat_stops_nothing() -> (
    None
):
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    store.enqueue(NewMessage("email", {"n": 1}))
    lease = MemoryLeaderLease(clock=clock)
    beats = Beats(fail=True)
    handler = RecordingHandler()
    worker = Worker(
        store,
        handler,
        email_lane(poll_interval=0.001),
        clock=clock,
        leader=lease,
        holder="me",
        heartbeat=beats,
    )
    stats = await asyncio.wait_for(worker.run(drain=True), timeout=5)
    assert stats.dispatched == 1  # the heartbeat failed; the work did not
    assert [leading for *_, leading in beats.beats] == [True]
    assert beats.stops == [("email", "me")]  # tried; its failure ended nothing either


class HangingBeats:
    def __init__(self) -> None:
        self.calls = 0

    async def beat(
        self, lane: str, holder: str, *, stale_after: timedelta, leading: bool | None
    ) -> None:
        self.calls += 1
        await asyncio.Event().wait()  # a database gone silent

    async def stop(self, lane: str, holder: str) -> None:
        """The stop beat answers (this test is about the hanging beat)."""


async def test_a_heartbeat_that_hangs_costs_the_loop_its_short_budget_and_no_more() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    store.enqueue(NewMessage("email", {"n": 1}))
    beats = HangingBeats()
    handler = RecordingHandler()
    worker = Worker(store, handler, email_lane(poll_interval=0.001), clock=clock, heartbeat=beats)
    stats = await asyncio.wait_for(
        worker.run(drain=True), timeout=HEARTBEAT_BUDGET.total_seconds() + 5
    )
    assert (stats.dispatched, beats.calls) == (1, 1)
