"""The drainer's handler (lanes/fan_out.py): the rows the runtime hands over in one turn fan out in
one round (one ``fan_out_many``, one transaction on PostgreSQL), each row's answer its own.

The repository here is a stand-in over the in-memory stores that records each ``fan_out_many``
call; what a real repository does inside the call is the contract suite's and the PostgreSQL
tests' (tests/contract, tests/integration/test_webhook_fan_out_batch.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.webhooks import FanOutHandler, delivery_lane, drain_lane
from outbox_adapters.memory import MemoryStore, RecordingHandler
from outbox_adapters.postgres.webhooks import DELIVERY_LANE, WEBHOOK_LANE, FanOut
from outbox_adapters.runtime import Worker
from outbox_adapters.runtime.born import BornRows
from outbox_core.delivery import Status
from outbox_core.errors import InvalidMessage, StoreUnavailable
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, NewMessage, RowId
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import ClaimRequest, MarkResult
from outbox_core.webhook_timing import FanOutTiming, WebhookTiming

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
TIMING = WebhookTiming()
BUDGET = timedelta(seconds=5)


class Repository:
    """``fan_out_many`` over two memory stores: the rows' fenced dispatched marks in one step,
    then one born-leased delivery per marked row; ``refuse`` rows answer ``marked=False``."""

    def __init__(self, outbox: MemoryStore, deliveries: MemoryStore) -> None:
        self.outbox = outbox
        self.deliveries = deliveries
        self.calls: list[list[RowId]] = []
        self.refuse: set[RowId] = set()
        self.delay = 0.0
        self.error: Exception | None = None
        self.finished = 0

    async def fan_out_many(
        self, rows: Sequence[ClaimedRow], *, birth_lease: timedelta, birth_token: ClaimToken
    ) -> tuple[FanOut, ...]:
        self.calls.append([row.id for row in rows])
        await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        kept = [row for row in rows if row.id not in self.refuse]
        marks = [Mark.dispatched(row, scrub_keys=frozenset()) for row in kept]
        applied = dict(zip((r.id for r in kept), await self.outbox.mark_many(marks), strict=True))
        answers = []
        for row in rows:
            if applied.get(row.id) is not MarkResult.APPLIED:
                answers.append(FanOut(marked=False))
                continue
            self.deliveries.enqueue(NewMessage(DELIVERY_LANE, {"source": row.id}))
            born = await self.deliveries.claim_due(
                ClaimRequest(DELIVERY_LANE, 1, birth_lease, birth_token)
            )
            answers.append(FanOut(marked=True, event_id=int(row.id), deliveries=tuple(born)))
        self.finished += 1
        return tuple(answers)


class Drainer:
    def __init__(self, rows: int) -> None:
        self.clock = FakeClock(T0)
        self.outbox = MemoryStore(clock=self.clock)
        self.deliveries = MemoryStore(clock=self.clock)
        self.repository = Repository(self.outbox, self.deliveries)
        self.attempts = RecordingHandler(default=Outcome.sent())
        self.first = BornRows(
            self.deliveries, self.attempts, delivery_lane(), lease=TIMING.birth_lease,
            clock=self.clock, jitter=lambda: 0.5,
        )  # fmt: skip
        self.handler = FanOutHandler(self.repository, self.first, clock=self.clock)
        for n in range(rows):
            self.outbox.enqueue(NewMessage(WEBHOOK_LANE, {"event_type": "a.b", "data": {"n": n}}))

    async def claim(self, count: int) -> list[ClaimedRow]:
        token = ClaimToken.from_entropy(bytes(16))
        request = ClaimRequest(WEBHOOK_LANE, count, timedelta(seconds=300), token)
        return list(await self.outbox.claim_due(request))

    async def settled(self) -> None:
        await self.handler.wait()
        await self.first.wait()


async def test_a_claimed_batch_fans_out_in_one_round_and_each_row_s_deliveries_start() -> None:
    drainer = Drainer(7)
    config = drain_lane(timing=FanOutTiming(batch_size=7))
    assert (config.rows_in_flight, config.group_marks) == (7, True)
    worker = Worker(drainer.outbox, drainer.handler, config, clock=drainer.clock)
    report = await worker.run_once()
    await drainer.settled()

    assert report.claimed == report.dispatched == 7
    assert report.stale_marks == 0
    assert len(drainer.repository.calls) == 1
    assert set(drainer.repository.calls[0]) == {r.id for r in drainer.outbox.rows()}
    assert (drainer.handler.rounds, drainer.handler.rows) == (1, 7)
    assert {row.status for row in drainer.outbox.rows()} == {Status.DISPATCHED}
    assert len(drainer.attempts.calls) == 7  # every delivery's first attempt, after the round
    assert {row.status for row in drainer.deliveries.rows()} == {Status.DISPATCHED}


async def test_each_call_gets_its_own_row_s_answer_a_refused_row_a_transient_failure() -> None:
    drainer = Drainer(3)
    rows = await drainer.claim(3)
    drainer.repository.refuse.add(rows[1].id)
    outcomes = await asyncio.gather(*(drainer.handler(row, budget=BUDGET) for row in rows))
    await drainer.settled()

    assert [o.recorded for o in outcomes] == [True, False, True]
    assert outcomes[1].kind is OutcomeKind.TRANSIENT
    assert "claimed again by another worker" in (outcomes[1].reason or "")
    assert drainer.repository.calls == [[row.id for row in rows]]
    assert len(drainer.attempts.calls) == 2


async def test_calls_of_later_turns_make_rounds_of_their_own() -> None:
    drainer = Drainer(2)
    first, second = await drainer.claim(2)
    assert (await drainer.handler(first, budget=BUDGET)).recorded
    assert (await drainer.handler(second, budget=BUDGET)).recorded
    assert drainer.repository.calls == [[first.id], [second.id]]


async def test_a_round_ends_at_the_earliest_deadline_among_its_rows() -> None:
    drainer = Drainer(2)
    rows = await drainer.claim(2)
    drainer.repository.delay = 60.0
    budgets = (timedelta(seconds=0.05), timedelta(seconds=30))
    async with asyncio.timeout(10):
        answers = await asyncio.gather(
            *(drainer.handler(row, budget=b) for row, b in zip(rows, budgets, strict=True)),
            return_exceptions=True,
        )
    assert [type(a) for a in answers] == [TimeoutError, TimeoutError]
    assert drainer.repository.finished == 0  # cut off: nothing committed
    assert {row.status for row in drainer.outbox.rows()} == {Status.PENDING}


async def test_a_cancelled_call_leaves_the_round_running_and_its_row_s_deliveries_start() -> None:
    drainer = Drainer(2)
    rows = await drainer.claim(2)
    drainer.repository.delay = 0.05
    calls = [asyncio.ensure_future(drainer.handler(row, budget=BUDGET)) for row in rows]
    await asyncio.sleep(0.01)  # the round is inside fan_out_many now
    calls[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await calls[0]
    assert (await calls[1]).recorded
    await drainer.settled()

    assert drainer.repository.finished == 1
    assert {row.status for row in drainer.outbox.rows()} == {Status.DISPATCHED}
    assert len(drainer.attempts.calls) == 2  # the cancelled call's delivery went out too


async def test_a_round_that_fails_fails_every_call_with_its_error() -> None:
    drainer = Drainer(2)
    rows = await drainer.claim(2)
    drainer.repository.error = StoreUnavailable("connection refused")
    answers = await asyncio.gather(
        *(drainer.handler(row, budget=BUDGET) for row in rows), return_exceptions=True
    )
    assert [type(a) for a in answers] == [StoreUnavailable, StoreUnavailable]
    assert len(drainer.repository.calls) == 1


async def test_a_row_that_is_not_an_event_fails_at_once_and_joins_no_round() -> None:
    drainer = Drainer(1)
    (row,) = await drainer.claim(1)
    bad = ClaimedRow(
        id=row.id, lane=row.lane, payload={"event_type": "a.b", "data": [1]}, attempts=1,
        token=row.token, lease_expires_at=row.lease_expires_at, created_at=row.created_at,
    )  # fmt: skip
    with pytest.raises(InvalidMessage, match="'data' is not a JSON object"):
        await drainer.handler(bad, budget=BUDGET)
    assert drainer.repository.calls == []
