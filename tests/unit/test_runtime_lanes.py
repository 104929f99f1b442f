"""One runtime for every lane: the same Worker over a webhook-timed lane and a recording handler.

Every lane (e-mail, webhook retries, the relay, each consumer channel) is the runtime driving one
store with a handler and a timing of its own. These tests run the runtime with WebhookTiming (not
e-mail's) and check that the lane's own figures, not e-mail's, reach the claim and the handler.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.memory import MemoryStore, RecordingHandler
from outbox_adapters.runtime import LaneConfig, Worker
from outbox_core.backoff import CONSUMER_BACKOFF, ExponentialBackoff
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError
from outbox_core.messages import ClaimedRow, ClaimToken, NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.ports import ClaimRequest
from outbox_core.timing import EmailTiming, LaneTiming, WebhookTiming

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
LANE = "webhook-retries"


class ClaimLog(MemoryStore):
    """The in-memory store, keeping every claim request it was given."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.requests: list[ClaimRequest] = []

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        self.requests.append(request)
        return await super().claim_due(request)


def webhook_lane(**settings: object) -> LaneConfig:
    stated: dict[str, object] = {
        "lane": LANE,
        "timing": WebhookTiming(),
        "backoff": CONSUMER_BACKOFF,
    }
    return LaneConfig(**{**stated, **settings})  # type: ignore[arg-type]


def test_both_timings_are_lane_timings() -> None:
    assert isinstance(WebhookTiming(), LaneTiming)
    assert isinstance(EmailTiming(), LaneTiming)
    timing = WebhookTiming()
    # The retry lane's figures under the runtime's names: 13 s a row, 10 a claim, 190 s a lease.
    assert (timing.batch_size, timing.per_row, timing.mark_budget) == (
        10,
        timedelta(seconds=13),
        timedelta(seconds=5),
    )
    assert timing.batch_timeout == timedelta(seconds=130)
    assert timing.claim_lease() == timedelta(seconds=190)


async def test_the_worker_runs_a_webhook_timed_lane_with_its_own_figures() -> None:
    clock = FakeClock(T0)
    store = ClaimLog(clock)
    ids = [int(store.enqueue(NewMessage(LANE, {"n": n})).row_id) for n in range(12)]
    handler = RecordingHandler()

    stats = await Worker(store, handler, webhook_lane(poll_interval=0.01), clock=clock).run(
        drain=True
    )

    assert sorted(call.row.id for call in handler.calls) == ids  # each row exactly once
    assert stats.dispatched == 12
    assert all(row.status is Status.DISPATCHED for row in store.rows(LANE))
    first = store.requests[0]
    assert (first.lane, first.limit, first.lease) == (LANE, 10, timedelta(seconds=190))
    # The handler gets the attempt's budget (13 s per row less the 5 s mark), not e-mail's 55 s.
    assert {call.budget for call in handler.calls} == {timedelta(seconds=8)}


async def test_a_webhook_lane_retries_on_its_own_backoff() -> None:
    clock = FakeClock(T0)
    store = ClaimLog(clock)
    row_id = store.enqueue(NewMessage(LANE, {"n": 1})).row_id
    handler = RecordingHandler(default=Outcome.transient("HTTP 503"))
    backoff = ExponentialBackoff(max_attempts=2, base=timedelta(seconds=7), jitter_ratio=0.0)
    worker = Worker(store, handler, webhook_lane(backoff=backoff), clock=clock)

    await worker.run_once()
    row = await store.get(row_id)
    assert row is not None
    assert row.status is Status.PENDING
    assert row.next_attempt_at == T0 + timedelta(seconds=7)

    clock.advance(timedelta(seconds=7))
    await worker.run_once()
    row = await store.get(row_id)
    assert row is not None
    assert row.status is Status.FAILED  # the schedule's two attempts are used up


def test_a_lane_states_its_name_timing_and_backoff() -> None:
    with pytest.raises(TypeError, match="lane"):
        LaneConfig(timing=WebhookTiming(), backoff=CONSUMER_BACKOFF)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="backoff"):
        LaneConfig(lane=LANE, timing=WebhookTiming())  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match=r"LaneConfig\.timing must be a lane timing"):
        LaneConfig(lane=LANE, timing=timedelta(seconds=13), backoff=CONSUMER_BACKOFF)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"LaneConfig\.backoff must be a backoff"):
        LaneConfig(lane=LANE, timing=WebhookTiming(), backoff=timedelta(seconds=1))  # type: ignore[arg-type]


def test_rows_in_flight_is_bounded_by_the_lanes_own_batch() -> None:
    assert webhook_lane(rows_in_flight=10).rows_in_flight == 10
    with pytest.raises(ConfigurationError, match="between 1 and the batch size 10, got 11"):
        webhook_lane(rows_in_flight=11)


def test_the_leader_ttl_must_hold_a_whole_row_between_renewals() -> None:
    # Defaults to twice a row: 26 s for the 13 s webhook attempt, 120 s for e-mail's 60 s row.
    assert webhook_lane().leader_ttl == timedelta(seconds=26)
    assert webhook_lane(leader_ttl=timedelta(seconds=19.5)).leader_ttl == timedelta(seconds=19.5)
    with pytest.raises(ConfigurationError, match=r"leader_ttl 19s is too short for per_row 13s"):
        webhook_lane(leader_ttl=timedelta(seconds=19))


async def test_a_lane_reports_its_stale_marks_as_its_own_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The delivery lane logs a refused mark as StaleDeliveryMark (once), e-mail as StaleMark."""
    from outbox_core.errors import StaleDeliveryMark  # noqa: PLC0415 - the name under test

    clock = FakeClock(T0)
    store = ClaimLog(clock)
    store.enqueue(NewMessage(LANE, {"n": 1}))

    async def lose_the_row(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        # A sibling took the row meanwhile (its lease ran out): this claim's mark is stale.
        clock.advance(WebhookTiming().claim_lease() + timedelta(seconds=1))
        await store.claim_due(ClaimRequest(LANE, 1, timedelta(seconds=60), ClaimToken("x" * 32)))
        return Outcome.permanent("receiver rejected the request: 400")

    config = webhook_lane(stale_mark=StaleDeliveryMark)
    report = await Worker(store, lose_the_row, config, clock=clock, jitter=lambda: 0.5).run_once()
    assert report.stale_marks == 1
    stale = [r.getMessage() for r in caplog.records if "stale" in r.getMessage()]
    assert len(stale) == 1
    assert stale[0].startswith("stale delivery mark dropped for delivery")
    with pytest.raises(ConfigurationError, match="stale_mark"):
        webhook_lane(stale_mark=ValueError)
