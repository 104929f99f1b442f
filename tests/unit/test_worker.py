"""The worker loop over the shipped in-memory fakes (no sockets): the same class as in production."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.memory import MemoryLeaderLease, MemoryStore, RecordingHandler
from outbox_adapters.runtime import Worker
from outbox_core.backoff import RetryPause, SlotSchedule
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError, InvalidPayload, StoreUnavailable
from outbox_core.messages import ClaimedRow, ClaimToken, NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.ports import ClaimRequest
from outbox_core.timing import EmailTiming

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


def setup(count: int, **config: object) -> tuple[MemoryStore, FakeClock, list[int]]:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    ids = [
        int(store.enqueue(NewMessage("email", {"n": n, "invite_url": "secret"})).row_id)
        for n in range(count)
    ]
    return store, clock, ids


def worker_for(store: MemoryStore, handler: object, clock: FakeClock, **config: object) -> Worker:
    config.setdefault("poll_interval", 0.01)
    return Worker(store, handler, email_lane(**config), clock=clock, jitter=lambda: 0.5)  # type: ignore[arg-type]


async def test_drain_sends_every_row_once_and_scrubs_it() -> None:
    store, clock, ids = setup(7)
    handler = RecordingHandler()
    stats = await worker_for(store, handler, clock).run(drain=True)

    assert sorted(call.row.id for call in handler.calls) == ids  # each row exactly once
    assert stats.dispatched == 7
    for row in store.rows():
        assert row.status is Status.DISPATCHED
        assert "invite_url" not in row.payload


async def test_transient_failures_retry_on_schedule_then_fail_when_it_is_used_up() -> None:
    store, clock, [row_id] = setup(1)
    handler = RecordingHandler(default=Outcome.transient("SMTP 451 4.3.0: try later"))
    schedule = SlotSchedule((timedelta(minutes=1), timedelta(minutes=5)), jitter_ratio=0.0)
    worker = worker_for(store, handler, clock, backoff=schedule)

    await worker.run_once()
    row = await store.get(row_id)
    assert row is not None
    assert (row.status, row.attempts) == (Status.PENDING, 1)
    assert row.next_attempt_at == T0 + timedelta(minutes=1)

    assert (await worker.run_once()).claimed == 0  # not due yet
    clock.advance(timedelta(minutes=1))
    await worker.run_once()
    clock.advance(timedelta(minutes=5))
    await worker.run_once()

    row = await store.get(row_id)
    assert row is not None
    assert (row.status, row.attempts) == (Status.FAILED, 3)
    assert row.last_error is not None
    assert row.last_error.startswith("retries exhausted after 3 attempts")
    assert isinstance(row.payload, Mapping)
    assert row.payload["invite_url"] == "secret"  # a failed row keeps its payload for a requeue


async def test_invalid_message_from_a_handler_fails_the_row_at_once() -> None:
    store, clock, [row_id] = setup(1)
    handler = RecordingHandler()
    handler.script(InvalidPayload("payload field 'to' is missing"))
    await worker_for(store, handler, clock).run_once()
    row = await store.get(row_id)
    assert row is not None
    assert (row.status, row.attempts) == (Status.FAILED, 1)
    assert "'to' is missing" in (row.last_error or "")


async def test_rows_in_flight_sends_that_many_rows_at_the_same_time() -> None:
    store, clock, _ = setup(4)
    together = asyncio.Barrier(4)  # only passable when four sends are in flight at once

    async def send(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        await asyncio.wait_for(together.wait(), timeout=5)
        return Outcome.sent()

    timing = EmailTiming(batch_size=4)
    report = await worker_for(store, send, clock, timing=timing, rows_in_flight=4).run_once()
    assert report.dispatched == 4


class CountingStore(MemoryStore):
    """Counts the writes that record marks, and what was unrecorded when each send started."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.writes: list[list[int]] = []
        self.sent = 0
        self.recorded = 0
        #: Rows sent and not yet recorded, as each send started: a crash would repeat them.
        self.exposed: list[int] = []

    async def mark_if_pending(self, mark):
        self.writes.append([int(mark.row_id)])
        self.recorded += 1
        return await super().mark_if_pending(mark)

    async def mark_many(self, marks):
        self.writes.append([int(m.row_id) for m in marks])
        self.recorded += len(marks)
        return await super().mark_many(marks)


async def test_grouped_marks_record_each_window_of_rows_in_flight_with_one_write() -> None:
    clock = FakeClock(T0)
    store = CountingStore(clock)
    ids = [
        int(store.enqueue(NewMessage("email", {"n": n, "invite_url": "s"})).row_id)
        for n in range(10)
    ]

    async def send(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        store.exposed.append(store.sent - store.recorded + 1)
        store.sent += 1
        await asyncio.sleep(0)
        if row.id == ids[5]:
            return Outcome.permanent("550 no such user")
        return Outcome.sent()

    timing = EmailTiming(batch_size=10)
    worker = worker_for(store, send, clock, timing=timing, rows_in_flight=4, group_marks=True)
    report = await worker.run_once()

    assert store.writes == [ids[0:4], ids[4:8], ids[8:10]]  # one write per window, in order
    assert max(store.exposed) == 4  # a crash could repeat at most rows_in_flight rows
    assert (report.claimed, report.dispatched, report.failed) == (10, 9, 1)
    rows = {row.id: row for row in store.rows()}
    assert rows[ids[5]].status is Status.FAILED
    kept = rows[ids[5]].payload
    assert isinstance(kept, Mapping)
    assert kept["invite_url"] == "s"
    assert all(
        r.status is Status.DISPATCHED and "invite_url" not in r.payload
        for i, r in rows.items()
        if i != ids[5]
    )


async def test_a_stale_mark_in_a_group_is_dropped_and_the_others_apply() -> None:
    store, clock, ids = setup(2)

    async def send(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        if row.id == ids[0]:  # meanwhile a sibling re-claimed this row (its lease ran out)
            await store.release(row.id, row.token)
            await store.claim_due(
                ClaimRequest("email", 1, timedelta(minutes=5), ClaimToken("f" * 32), now=T0)
            )
        return Outcome.sent()

    timing = EmailTiming(batch_size=2)
    worker = worker_for(store, send, clock, timing=timing, rows_in_flight=2, group_marks=True)
    report = await worker.run_once()

    assert (report.dispatched, report.stale_marks) == (1, 1)
    first, second = await store.get(ids[0]), await store.get(ids[1])
    assert first is not None
    assert second is not None
    assert (first.status, first.claim_token) == (Status.PENDING, "f" * 32)
    assert second.status is Status.DISPATCHED


def test_grouped_marks_need_more_than_one_row_in_flight() -> None:
    with pytest.raises(ConfigurationError, match="group_marks needs rows_in_flight of 2 or more"):
        email_lane(group_marks=True)
    with pytest.raises(ConfigurationError, match="group_marks must be True or False"):
        email_lane(timing=EmailTiming(batch_size=4), rows_in_flight=2, group_marks=1)


def test_rows_in_flight_is_bounded_by_the_batch() -> None:
    with pytest.raises(ConfigurationError, match="rows_in_flight must be between 1 and the batch"):
        email_lane(timing=EmailTiming(batch_size=5), rows_in_flight=6)
    with pytest.raises(ConfigurationError):
        email_lane(rows_in_flight=0)


async def test_only_the_leader_claims() -> None:
    store, clock, _ = setup(3)
    lease = MemoryLeaderLease(clock=clock)
    other = await lease.try_acquire("email", "other-replica", ttl=timedelta(seconds=30))
    assert other is not None
    handler = RecordingHandler()
    worker = Worker(
        store, handler, email_lane(poll_interval=0.01), clock=clock, leader=lease, holder="me"
    )

    async def stop_soon() -> None:
        await asyncio.sleep(0.05)
        worker.request_stop()

    await asyncio.gather(worker.run(), stop_soon())
    assert handler.calls == []  # another replica holds the lane: nothing claimed

    clock.advance(timedelta(seconds=31))  # the other leader's lease runs out
    successor = Worker(
        store, handler, email_lane(poll_interval=0.01), clock=clock, leader=lease, holder="me"
    )
    stats = await asyncio.wait_for(successor.run(drain=True), timeout=5)
    assert stats.dispatched == 3
    # and it stepped down when it stopped: the lane is free for a sibling at once
    assert await lease.try_acquire("email", "sibling", ttl=timedelta(seconds=30)) is not None


class FlakyClaims(MemoryStore):
    """A store whose first claims fail as if the database were down."""

    def __init__(self, clock: FakeClock, failures: int) -> None:
        super().__init__(clock=clock)
        self.failures = failures

    async def claim_due(self, request):
        if self.failures:
            self.failures -= 1
            message = "connection refused"
            raise StoreUnavailable(message)
        return await super().claim_due(request)


class SlowClaims(MemoryStore):
    """A store whose claim takes ``seconds`` (of the fake clock) to answer."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        super().__init__(clock=clock)
        self.fake_clock = clock
        self.seconds = seconds
        self.claims = 0

    async def claim_due(self, request):
        self.claims += 1
        rows = await super().claim_due(request)
        self.fake_clock.advance(self.seconds)
        return rows


async def test_a_batch_of_one_row_starts_its_row_after_a_claim_that_took_time() -> None:
    """The shortest batch timeout (batch 1 x per-row) must still admit the row the claim took: the
    timeout counts from the claim's answer (a batch of one would otherwise give its row back and
    claim it again, forever)."""
    clock = FakeClock(T0)
    store = SlowClaims(clock, seconds=0.3)
    ids = [int(store.enqueue(NewMessage("email", {"n": n})).row_id) for n in range(3)]
    handler = RecordingHandler()
    worker = worker_for(store, handler, clock, timing=EmailTiming(batch_size=1))

    first = await worker.run_once()
    assert (first.dispatched, first.released) == (1, 0)
    stats = await worker.run(drain=True)
    assert stats.dispatched == 3  # since the worker started: the first batch too
    assert sorted(call.row.id for call in handler.calls) == ids
    assert store.claims == 4  # one per row, and the one that found nothing


async def test_a_window_cancelled_while_one_row_hangs_records_the_rows_that_ended() -> None:
    """Grouped marks: the window's mark waits for its slowest row. If the worker is cancelled then
    (the host, a parent task group), the rows whose send ended keep their outcome: it is recorded
    detached, and only the row still in flight keeps its lease (found by the simulator)."""
    store, clock, (fast, slow) = setup(2)
    hang, both = asyncio.Event(), asyncio.Event()
    started: list[int] = []

    async def handler(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        del budget
        started.append(int(row.id))
        if len(started) == 2:
            both.set()
        if row.id == slow:
            await hang.wait()
        return Outcome.sent()

    worker = worker_for(store, handler, clock, rows_in_flight=2, group_marks=True)
    batch = asyncio.ensure_future(worker.run_once())
    await both.wait()
    await asyncio.sleep(0)  # the fast row's send ends
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    await worker.wait_for_marks()
    rows = {row.id: row for row in store.rows()}
    assert rows[fast].status is Status.DISPATCHED
    assert rows[slow].status is Status.PENDING
    assert rows[slow].claim_token is not None  # still leased: it comes back when the lease ends


class HeldMarks(MemoryStore):
    """A store whose marks wait for ``go`` (a mark still running when the worker is cancelled)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.go = asyncio.Event()
        self.marking = asyncio.Event()

    async def mark_if_pending(self, mark):
        self.marking.set()
        await self.go.wait()
        return await super().mark_if_pending(mark)


async def test_a_mark_survives_a_second_cancellation_of_a_stopping_worker() -> None:
    """Cancelled once while its mark runs, the worker re-runs the mark detached and waits for it;
    cancelled again while it waits, the mark must go on (found by the simulator, seed 72324:
    ``gather`` cancelled the marks it waited for, and the row was sent again)."""
    clock = FakeClock(T0)
    store = HeldMarks(clock)
    [row_id] = [int(store.enqueue(NewMessage("email", {"n": 1})).row_id)]
    worker = worker_for(store, RecordingHandler(), clock)
    running = asyncio.ensure_future(worker.run())
    await store.marking.wait()
    running.cancel()  # the first: the mark is re-run in a task of its own
    for _ in range(3):
        await asyncio.sleep(0)
    running.cancel()  # the second: the worker stops waiting for it
    with pytest.raises(asyncio.CancelledError):
        await running
    store.go.set()
    await worker.wait_for_marks()
    [row] = store.rows()
    assert (row.id, row.status) == (row_id, Status.DISPATCHED)


async def test_a_database_outage_does_not_end_the_worker() -> None:
    clock = FakeClock(T0)
    store = FlakyClaims(clock, failures=2)
    store.enqueue(NewMessage("email", {"n": 1}))
    handler = RecordingHandler()
    pause = RetryPause(base=timedelta(milliseconds=1), cap=timedelta(milliseconds=2))
    config = email_lane(poll_interval=0.001, claim_retry=pause)
    stats = await asyncio.wait_for(Worker(store, handler, config, clock=clock).run(drain=True), 5)
    assert store.failures == 0
    assert stats.dispatched == 1  # it kept trying and delivered once the database came back


async def test_drain_ends_when_another_replica_leads_the_lane() -> None:
    store, clock, _ = setup(2)
    lease = MemoryLeaderLease(clock=clock)
    assert await lease.try_acquire("email", "other", ttl=timedelta(seconds=30)) is not None
    handler = RecordingHandler()
    worker = Worker(store, handler, email_lane(), clock=clock, leader=lease, holder="me")
    await asyncio.wait_for(worker.run(drain=True), timeout=5)
    assert handler.calls == []


# --- rows the store could not decode, marks that fail ----------------------------------------------


async def test_a_row_whose_payload_can_not_be_decoded_fails_at_once_without_the_handler() -> None:
    store, clock, [good] = setup(1)
    deep = store.insert_raw("email", '{"to": ' + "[" * 3000 + "]" * 3000 + "}").row_id
    scalar = store.insert_raw("email", "42").row_id
    handler = RecordingHandler()

    report = await worker_for(store, handler, clock).run_once()

    assert [call.row.id for call in handler.calls] == [good]  # never handed to the handler
    assert (report.claimed, report.failed, report.dispatched, report.handler_errors) == (3, 2, 1, 0)
    # Not store.rows(): like psycopg's jsonb loader, it can't show a payload nested 3,000 deep.
    assert await store.counts() == {"email": {Status.FAILED: 2, Status.DISPATCHED: 1}}
    assert deep not in {row.id for row in await store.claim_due(claim_all())}  # resolved
    row = await store.get(scalar)
    assert row is not None
    assert (row.status, row.attempts) == (Status.FAILED, 1)
    assert row.last_error == "undeliverable: the stored payload is a JSON number, not a JSON object"


def claim_all() -> ClaimRequest:
    token = ClaimToken.from_entropy(bytes(16))
    return ClaimRequest("email", 100, timedelta(minutes=5), token, now=T0 + timedelta(days=30))


class BrokenMarks(MemoryStore):
    """A store whose mark raises what no retry can fix (a statement the row breaks, a bug)."""

    def __init__(self, clock: FakeClock, error: Exception) -> None:
        super().__init__(clock)
        self.error = error
        self.marks = 0

    async def mark_if_pending(self, mark):
        self.marks += 1
        if self.marks == 1:
            raise self.error
        return await super().mark_if_pending(mark)


async def test_a_mark_that_fails_is_given_up_and_counted_and_never_fails_the_batch(caplog) -> None:
    clock = FakeClock(T0)
    secret = "https://shop.example/reset?token=in-the-error-text"
    store = BrokenMarks(clock, RuntimeError(f"the row broke the statement: {secret}"))
    first = store.enqueue(NewMessage("email", {"n": 1})).row_id
    second = store.enqueue(NewMessage("email", {"n": 2})).row_id

    report = await worker_for(store, RecordingHandler(), clock).run_once()

    assert (report.claimed, report.mark_errors, report.dispatched) == (2, 1, 1)
    assert store.marks == 2  # given up at once: not retried within the mark budget
    first_row, second_row = await store.get(first), await store.get(second)
    assert first_row is not None
    assert second_row is not None
    assert first_row.status is Status.PENDING  # still leased: claimed again after the lease
    assert first_row.next_attempt_at > T0
    assert second_row.status is Status.DISPATCHED  # the batch went on
    [record] = [r for r in caplog.records if "not recorded" in r.getMessage()]
    assert record.getMessage() == (
        f"mark of row {first} failed (RuntimeError); not recorded, the row will be claimed again"
        " after its lease"
    )
    assert secret not in caplog.text


# --- LaneConfig ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"lane": "Email "}, "LaneConfig.lane: a lane name is 1 to 64 characters of [a-z0-9_.-]"),
        ({"lane": ""}, "LaneConfig.lane"),
        ({"poll_interval": 0}, "LaneConfig.poll_interval must be a finite number of seconds above 0"),
        ({"poll_interval": -1.0}, "poll_interval"),
        ({"poll_interval": float("inf")}, "poll_interval"),
        ({"poll_interval": float("nan")}, "poll_interval"),
        ({"poll_interval": True}, "poll_interval"),
        ({"poll_interval": "1"}, "poll_interval"),
        ({"leader_ttl": timedelta(0)}, "LaneConfig.leader_ttl must be a duration above 0s"),
        ({"leader_ttl": 30}, "leader_ttl"),
        ({"retry_after_cap": timedelta(seconds=-1)}, "LaneConfig.retry_after_cap must be a duration 0s or more"),
        ({"retry_after_cap": None}, "retry_after_cap"),
    ],
)  # fmt: skip
def test_a_lane_config_that_cannot_work_is_refused_naming_the_setting(
    settings: dict[str, object], words: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        email_lane(**settings)
    assert words in str(refused.value)


def test_a_lane_config_accepts_the_edges() -> None:
    config = email_lane(
        lane="billing.v2_eu-1",
        poll_interval=1,
        retry_after_cap=timedelta(0),
        leader_ttl=timedelta(1),
    )
    assert (config.poll_interval, config.retry_after_cap) == (1, timedelta(0))


async def test_a_stale_mark_is_logged_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    store, clock, [row_id] = setup(1)

    async def send(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        # Meanwhile a sibling re-claimed the row (its lease ran out): this claim's mark is stale.
        await store.release(row.id, row.token)
        await store.claim_due(
            ClaimRequest("email", 1, timedelta(minutes=5), ClaimToken("f" * 32), now=T0)
        )
        return Outcome.sent()

    with caplog.at_level(logging.DEBUG):
        report = await worker_for(store, send, clock).run_once()

    assert report.stale_marks == 1
    stale = [r for r in caplog.records if "stale mark" in r.getMessage()]
    assert [r.getMessage() for r in stale] == [
        f"stale mark dropped for row {row_id} (dispatched): another claim owns it"
    ]


@pytest.mark.parametrize("grouped", [False, True], ids=["strict", "grouped"])
async def test_a_mark_the_handler_recorded_itself_is_not_written_again(grouped: bool) -> None:
    """Handler-owns-mark (the webhook fan-out): the handler's own transaction wrote the dispatched
    mark under the claim's token, so the runtime writes nothing: no round trip, no stale alarm."""
    clock = FakeClock(T0)
    store = CountingStore(clock)
    ids = [int(store.enqueue(NewMessage("email", {"n": n})).row_id) for n in range(4)]
    owned = set(ids[:2])

    async def send(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        if row.id in owned:
            return Outcome.recorded_by_handler()
        return Outcome.sent()

    config: dict[str, object] = {"timing": EmailTiming(batch_size=4)}
    if grouped:
        config.update(rows_in_flight=4, group_marks=True)
    worker = worker_for(store, send, clock, **config)
    report = await worker.run_once()

    written = sorted(row_id for write in store.writes for row_id in write)
    assert written == ids[2:]  # only the rows the handler did not record
    assert report.dispatched == 4
    assert report.stale_marks == 0
