"""A leader-gated lane over the in-memory fakes (catalogue A2, ADR 0008): the term is renewed while a
batch runs, a worker that can't prove its term for a whole row starts none, a send never outlives
the term, and a TTL that can't hold a row between renewals is refused at construction.

Every clock here is a :class:`FakeClock`; the handler "takes" its time by moving it. The renewal
task beside a batch sleeps in real time, so these tests reach it through the row-start gate, which
asks it for a renewal at once when the term runs short (``Leadership.admits``).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.memory import MemoryLeaderLease, MemoryStore, RecordingHandler
from outbox_adapters.runtime import Worker
from outbox_adapters.runtime.leadership import Leadership
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError
from outbox_core.messages import NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.ports import LeaderTerm, RowHandler
from outbox_core.timing import EmailTiming

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
TIMING = EmailTiming(batch_size=5)  # per-row 60 s, batch timeout 300 s, claim lease 360 s
PER_ROW = TIMING.per_row.total_seconds()
TTL = timedelta(seconds=2 * PER_ROW)  # the default: twice a row
LANE = "email"


class Lease(MemoryLeaderLease):
    """The memory lease, recording every answer; ``fail_after`` answers, it loses or breaks."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.clock = clock
        self.answers: list[LeaderTerm | None] = []
        self.fail_after: int | None = None
        self.failure: Exception | None = None
        #: Seconds each attempt takes (the clock moves while the statement runs).
        self.slowness = 0.0

    async def try_acquire(
        self, lane: str, holder: str, *, ttl: timedelta, now: datetime | None = None
    ) -> LeaderTerm | None:
        if self.fail_after is not None and len(self.answers) >= self.fail_after:
            if self.failure is not None:
                raise self.failure
            self.answers.append(None)
            return None
        started = self.clock.monotonic()
        answer = await super().try_acquire(lane, holder, ttl=ttl, now=now)
        self.clock.advance(self.slowness)
        if answer is not None:
            assert answer.trusted_until == started + ttl.total_seconds()
        self.answers.append(answer)
        return answer


def scene(rows: int = 5) -> tuple[MemoryStore, FakeClock, Lease, list[int]]:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    ids = [int(store.enqueue(NewMessage(LANE, {"n": n})).row_id) for n in range(rows)]
    return store, clock, Lease(clock), ids


def slow_handler(clock: FakeClock, seconds: float) -> RecordingHandler:
    """Each send takes ``seconds`` of the fake clock."""
    handler = RecordingHandler()

    async def send() -> Outcome:
        clock.advance(seconds)
        return Outcome.sent()

    handler.script(*([send] * 50))
    return handler


def leader_worker(
    store: MemoryStore, handler: RowHandler, clock: FakeClock, lease: Lease
) -> Worker:
    config = email_lane(timing=TIMING, leader_ttl=TTL, poll_interval=0.01)
    return Worker(
        store, handler, config, clock=clock, leader=lease, holder="me", jitter=lambda: 0.5
    )


async def test_a_batch_longer_than_the_ttl_keeps_leadership_and_the_lease_expiry_moves() -> None:
    store, clock, lease, ids = scene(5)
    handler = slow_handler(clock, 0.9 * PER_ROW)  # 5 rows: 4.5 rows' worth, over twice the TTL
    worker = leader_worker(store, handler, clock, lease)
    assert await worker.leadership.lead()

    report = await worker.run_once()

    assert clock.monotonic() - 1000.0 > 2 * TTL.total_seconds()  # the batch outlasted two TTLs
    assert (report.claimed, report.dispatched, report.released, report.leadership_lost) == (
        5,
        5,
        0,
        0,
    )
    assert [call.row.id for call in handler.calls] == ids
    terms = [answer for answer in lease.answers if answer is not None]
    assert len(terms) >= 3  # won, then renewed while the batch ran
    assert {term.term for term in terms} == {1}  # renewals, never a new election
    assert sorted(t.trusted_until for t in terms) == [t.trusted_until for t in terms]
    assert terms[-1].trusted_until > terms[0].trusted_until + TTL.total_seconds()
    # The lease row's expiry moved with the renewals: at the first term's expiry (and well
    # after it) a sibling is still refused.
    at_first_expiry = T0 + TTL + timedelta(seconds=PER_ROW)
    assert clock.now() > at_first_expiry
    assert await lease.try_acquire(LANE, "sibling", ttl=TTL, now=at_first_expiry) is None
    assert await lease.try_acquire(LANE, "sibling", ttl=TTL) is None
    assert all(row.status is Status.DISPATCHED for row in store.rows())


@pytest.mark.parametrize(
    "failure", [None, ConnectionError("database went away")], ids=["lost", "error"]
)
async def test_a_worker_whose_renewal_fails_mid_batch_starts_no_new_row(
    failure: Exception | None,
) -> None:
    store, clock, lease, ids = scene(5)
    handler = slow_handler(clock, 0.9 * PER_ROW)
    worker = leader_worker(store, handler, clock, lease)
    assert await worker.leadership.lead()
    lease.fail_after = 1  # every renewal from now on is lost to another holder, or breaks
    lease.failure = failure

    report = await worker.run_once()

    # Rows 1 and 2 fit the first term (1.8 rows' worth of a 2-row TTL); row 3 needed a renewal.
    assert [call.row.id for call in handler.calls] == ids[:2]
    assert (report.dispatched, report.released, report.leadership_lost) == (2, 3, 1)
    assert worker.leadership.term is None
    assert not await worker.leadership.admits(PER_ROW)
    for row_id in ids[2:]:  # given back: due again at once, attempt refunded
        row = await store.get(row_id)
        assert row is not None
        assert (row.status, row.attempts) == (Status.PENDING, 0)
        assert row.next_attempt_at <= clock.now()


async def test_a_worker_that_cannot_prove_its_term_for_a_whole_row_starts_none() -> None:
    store, clock, lease, ids = scene(3)
    # Every election answer comes back 1.6 rows after the attempt began: it grants 2 rows of TTL
    # from the attempt's start, so 0.4 of a row is all the worker can prove. It leads (and claims),
    # but must not start a row it can't finish inside its term.
    lease.slowness = 1.6 * PER_ROW
    handler = RecordingHandler()
    worker = leader_worker(store, handler, clock, lease)
    assert await worker.leadership.lead()

    report = await worker.run_once()

    assert handler.calls == []
    assert (report.claimed, report.released, report.leadership_lost) == (3, 3, 1)
    assert len(lease.answers) >= 2  # the gate asked for a renewal first; it was as slow
    for row_id in ids:
        row = await store.get(row_id)
        assert row is not None
        assert (row.status, row.attempts) == (Status.PENDING, 0)


@pytest.mark.parametrize(("frozen", "budget_left"), [(100.0, 20.0), (130.0, None)])
async def test_a_worker_frozen_after_the_gate_never_sends_past_its_term(
    frozen: float, budget_left: float | None
) -> None:
    """The process is frozen right after the gate admitted a row (SIGSTOP, a VM pause). On waking
    it may send only until its term ends: another worker may lead the lane after that."""
    store, clock, lease, [row_id] = scene(1)
    handler = RecordingHandler()
    worker = leader_worker(store, handler, clock, lease)
    assert await worker.leadership.lead()
    term_ends = worker.leadership.trusted_until()
    admits = worker.leadership.admits

    async def admitted_then_frozen(per_row: float) -> bool:
        verdict = await admits(per_row)
        clock.advance(frozen)
        return verdict

    worker.leadership.admits = admitted_then_frozen  # type: ignore[method-assign]

    report = await worker.run_once()

    if budget_left is None:
        assert clock.monotonic() > term_ends
        assert handler.calls == []  # the term ended while frozen: not sent at all
        assert report.retried == 1
        row = await store.get(row_id)
        assert row is not None
        assert row.last_error == "no time left on the lease or leader term to start the send"
    else:
        assert clock.monotonic() + budget_left == pytest.approx(term_ends)
        [call] = handler.calls
        assert call.budget == timedelta(seconds=budget_left)  # cut at the term, not per-row


def test_a_ttl_that_cannot_hold_a_row_between_renewals_is_refused_naming_both_figures() -> None:
    timing = EmailTiming.with_overrides(
        {"dial": 2, "smtp_exchange": 3, "mark": 1, "suppression": 1, "branding": 1,
         "bounce_report": 2},
    )  # fmt: skip
    assert timing.per_row == timedelta(seconds=10)
    with pytest.raises(ConfigurationError) as refused:
        email_lane(timing=timing, leader_ttl=timedelta(seconds=14.9))
    assert str(refused.value) == (
        "LaneConfig.leader_ttl 14.9s is too short for per_row 10s: a leader renews every ttl/3"
        " and starts a row only if it ends inside its term, so the TTL must be at least 15s"
        " (per_row \u00d7 3/2)"
    )
    assert email_lane(timing=timing, leader_ttl=timedelta(seconds=15)).leader_ttl == timedelta(
        seconds=15
    )
    assert email_lane(timing=timing).leader_ttl == timedelta(seconds=20)  # default: twice a row


async def test_a_lane_without_a_leader_lease_is_never_gated() -> None:
    store, clock, _, ids = scene(2)
    handler = RecordingHandler()
    worker = Worker(store, handler, email_lane(timing=TIMING), clock=clock)
    assert worker.leadership.trusted_until() == float("inf")
    assert await worker.leadership.admits(PER_ROW)
    report = await worker.run_once()
    assert [call.row.id for call in handler.calls] == ids
    assert report.leadership_lost == 0


class LosesCancellation(Lease):
    """A lease whose renewal, once under way, loses a cancellation and answers anyway: what a
    pooled connection's wait can do on Python 3.11 (psycopg_pool's getconn waits with
    ``asyncio.wait_for``, which returns the connection it got at the moment it is cancelled)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.renewing = asyncio.Event()

    async def try_acquire(
        self, lane: str, holder: str, *, ttl: timedelta, now: datetime | None = None
    ) -> LeaderTerm | None:
        if self.answers:  # a renewal (the first answer was the election)
            self.renewing.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.05)
        return await super().try_acquire(lane, holder, ttl=ttl, now=now)


async def test_a_batch_ends_even_when_its_renewal_loses_the_cancellation() -> None:
    """The renewal beside a batch is told to stop by a flag and a wake-up as well as by a
    cancellation: a renewal that lost the cancellation ends at its next turn, so the end of the
    batch does not wait on it for ever (a fresh-clone CI run hung there, 2026-12-07)."""
    clock = FakeClock(T0)
    lease = LosesCancellation(clock)
    leadership = Leadership(lease, email_lane(timing=TIMING), holder="w1", clock=clock)
    assert await leadership.lead()

    async def batch() -> None:
        async with leadership.renewed():
            leadership._now_please.set()  # ask for a renewal now, as the row-start gate does
            await lease.renewing.wait()  # the renewal is under way when the batch ends

    running = asyncio.ensure_future(batch())
    done, _ = await asyncio.wait({running}, timeout=2)
    assert running in done, "the batch's end waited on a renewal that lost its cancellation"
    await running
    assert leadership.term is not None
