# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""decide() (catalogue C3): one outcome in, one mark out, through the state table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.strategies import durations_between, jitters

from outbox_core import delivery
from outbox_core.backoff import CONSUMER_BACKOFF, EMAIL_BACKOFF, ExponentialBackoff, SlotSchedule
from outbox_core.decide import DEFAULT_RETRY_AFTER_CAP, decide, event_for
from outbox_core.delivery import Event, Status, transition
from outbox_core.errors import IllegalTransition
from outbox_core.messages import ClaimedRow, ClaimToken, Mark
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.scrub import DEFAULT_SECRET_KEYS, ScrubRules

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TOKEN = ClaimToken("tok_" + "a" * 28)
SCRUB = ScrubRules()
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def claimed(attempts: int = 1, payload: dict[str, Any] | None = None) -> ClaimedRow:
    return ClaimedRow(
        id=42,
        lane="email",
        payload={"to": "a@example.org", "setup_url": "https://x.example/s?t=1"}
        if payload is None
        else payload,
        attempts=attempts,
        token=TOKEN,
        lease_expires_at=NOW + timedelta(minutes=6),
        created_at=NOW - HOUR,
    )


@attrs.define
class SpyBackoff:
    """Answers a fixed delay and records the attempts it was asked about."""

    answer: timedelta | None
    asked: list[int] = attrs.field(factory=list)

    def delay(self, attempts: int, *, jitter: float) -> timedelta | None:
        self.asked.append(attempts)
        return self.answer


def run(
    outcome: Outcome,
    *,
    attempts: int = 1,
    backoff: Any = EMAIL_BACKOFF,
    jitter: float = 0.5,
    **kwargs: Any,
) -> Mark:
    return decide(claimed(attempts), outcome, backoff=backoff, scrub=SCRUB, jitter=jitter, **kwargs)


# --- one case per outcome kind -------------------------------------------------------------------


def test_sent_dispatches_and_scrubs_every_configured_key() -> None:
    mark = run(Outcome.sent())
    assert mark == Mark(42, TOKEN, Status.DISPATCHED, scrub_keys=DEFAULT_SECRET_KEYS)
    # All six keys, not only the one the worker saw: the stored payload is what gets scrubbed.
    payload = claimed().payload
    assert not isinstance(payload, str)
    assert mark.scrub_keys > SCRUB.secret_keys_in(payload)


def test_skipped_scrubs_and_keeps_the_reason() -> None:
    mark = run(Outcome.skipped("recipient opted out of invoice mail"))
    assert mark.status is Status.SKIPPED
    assert mark.reason == "recipient opted out of invoice mail"
    assert mark.scrub_keys == DEFAULT_SECRET_KEYS
    assert mark.retry_delay is None


def test_scrub_keys_follow_the_lanes_rules() -> None:
    rules = ScrubRules(frozenset({"magic_link"}))
    mark = decide(claimed(), Outcome.sent(), backoff=EMAIL_BACKOFF, scrub=rules, jitter=0.5)
    assert mark.scrub_keys == {"magic_link"}


def test_permanent_on_the_first_attempt_fails_at_once_without_asking_the_schedule() -> None:
    spy = SpyBackoff(MINUTE)
    mark = run(Outcome.permanent("550 5.1.1 mailbox unknown"), backoff=spy)
    assert mark == Mark(42, TOKEN, Status.FAILED, "550 5.1.1 mailbox unknown")
    assert mark.scrub_keys == frozenset()  # a failed row keeps its payload for a requeue
    assert spy.asked == []


def test_transient_retries_after_the_schedules_delay() -> None:
    mark = run(Outcome.transient("421 4.3.2 try later"), attempts=3)
    assert mark.status is Status.PENDING
    assert mark.reason == "421 4.3.2 try later"
    assert mark.retry_delay == 5 * MINUTE  # the email schedule's 3rd slot
    assert mark.scrub_keys == frozenset()


@pytest.mark.parametrize(("jitter", "wait"), [(0.0, 54), (0.5, 60), (1.0, 66)])
def test_the_jitter_draw_reaches_the_schedule(jitter: float, wait: int) -> None:
    mark = run(Outcome.transient("timeout"), jitter=jitter)
    assert mark.retry_delay == timedelta(seconds=wait)


def test_attempts_are_passed_through_not_incremented() -> None:
    spy = SpyBackoff(MINUTE)
    run(Outcome.transient("timeout"), attempts=7, backoff=spy)
    assert spy.asked == [7]


# --- Retry-After ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempts", "retry_after", "cap", "wait"),
    [
        pytest.param(1, 10 * MINUTE, HOUR, 10 * MINUTE, id="retry-after-longer-than-backoff-wins"),
        pytest.param(3, 2 * MINUTE, HOUR, 5 * MINUTE, id="backoff-longer-than-retry-after-wins"),
        pytest.param(1, timedelta(0), HOUR, MINUTE, id="retry-after-zero-never-hurries"),
        pytest.param(1, timedelta(days=30), HOUR, HOUR, id="retry-after-capped"),
        pytest.param(1, timedelta(days=30), 5 * MINUTE, 5 * MINUTE, id="custom-cap"),
        pytest.param(1, timedelta(days=30), timedelta(0), MINUTE, id="zero-cap-ignores-it"),
        pytest.param(15, 2 * HOUR, HOUR, 20 * HOUR, id="cap-never-cuts-the-schedule"),
    ],
)
def test_retry_after_is_honoured_up_to_the_cap(
    attempts: int, retry_after: timedelta, cap: timedelta, wait: timedelta
) -> None:
    outcome = Outcome.transient("503 Service Unavailable", retry_after=retry_after)
    mark = run(outcome, attempts=attempts, retry_after_cap=cap)
    assert mark.retry_delay == wait


def test_default_cap_is_one_hour() -> None:
    assert DEFAULT_RETRY_AFTER_CAP == HOUR
    mark = run(Outcome.transient("429", retry_after=timedelta(hours=5)))
    assert mark.retry_delay == HOUR


@given(
    attempts=st.integers(min_value=1, max_value=4),
    retry_after=st.none() | durations_between(timedelta(0), timedelta(days=3)),
    cap=durations_between(timedelta(0), timedelta(days=1)),
    jitter=jitters,
)
def test_retry_wait_bounds(
    attempts: int, retry_after: timedelta | None, cap: timedelta, jitter: float
) -> None:
    mark = run(
        Outcome.transient("503", retry_after=retry_after),
        attempts=attempts,
        backoff=CONSUMER_BACKOFF,
        jitter=jitter,
        retry_after_cap=cap,
    )
    delay = CONSUMER_BACKOFF.delay(attempts, jitter=jitter)
    assert delay is not None
    assert mark.retry_delay is not None
    wait = mark.retry_delay
    assert wait >= delay  # never sooner than the schedule
    assert wait <= max(delay, cap)  # never later than the schedule or the cap
    if retry_after is not None:
        assert wait >= min(retry_after, cap)  # the peer's wish, as far as the cap allows


# --- exhaustion ----------------------------------------------------------------------------------


def test_exhausted_schedule_fails_with_the_last_reason() -> None:
    mark = run(Outcome.transient("421 4.7.0 too many connections"), attempts=16)
    assert mark == Mark(
        42,
        TOKEN,
        Status.FAILED,
        "retries exhausted after 16 attempts: 421 4.7.0 too many connections",
    )


def test_exhausted_wins_over_retry_after() -> None:
    outcome = Outcome.transient("503", retry_after=MINUTE)
    mark = run(outcome, attempts=5, backoff=CONSUMER_BACKOFF)
    assert mark.status is Status.FAILED
    assert mark.reason == "retries exhausted after 5 attempts: 503"
    assert mark.retry_delay is None


def test_one_attempt_schedule_says_attempt_in_the_singular() -> None:
    mark = run(Outcome.transient("timeout"), backoff=ExponentialBackoff(max_attempts=1))
    assert mark.reason == "retries exhausted after 1 attempt: timeout"


def test_last_email_slot_still_retries() -> None:
    mark = run(Outcome.transient("timeout"), attempts=15)
    assert mark.status is Status.PENDING
    assert mark.retry_delay == 20 * HOUR


# --- refused inputs ------------------------------------------------------------------------------


def test_a_retry_carries_its_delay_not_a_time_so_no_clock_enters_it() -> None:
    # The store stamps its own now() + delay: decide() takes no clock at all.
    mark = decide(
        claimed(), Outcome.transient("timeout"), backoff=EMAIL_BACKOFF, scrub=SCRUB, jitter=0.5
    )
    assert mark == Mark.retry(claimed(), "timeout", delay=MINUTE)


@pytest.mark.parametrize("jitter", [-0.5, 1.5, float("nan")])
def test_bad_jitter_is_refused_even_when_no_retry_needs_it(jitter: float) -> None:
    with pytest.raises(ValueError, match=r"jitter must be a float in \[0, 1\]"):
        run(Outcome.sent(), jitter=jitter)


def test_negative_retry_after_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="retry_after_cap must not be negative"):
        run(Outcome.transient("503"), retry_after_cap=-MINUTE)


# --- through the state table ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "attempts", "event"),
    [
        (Outcome.sent(), 1, Event.SUCCEED),
        (Outcome.skipped("opted out"), 1, Event.SKIP),
        (Outcome.permanent("550"), 1, Event.FAIL),
        (Outcome.transient("421"), 1, Event.RETRY),
        (Outcome.transient("421"), 16, Event.FAIL),
        (Outcome.deferred("rate cap"), 16, Event.RETRY),
    ],
)
def test_every_mark_is_a_legal_move_from_pending(
    outcome: Outcome, attempts: int, event: Event
) -> None:
    mark = run(outcome, attempts=attempts)
    assert event_for(mark) is event
    assert transition(Status.PENDING, event_for(mark)) is mark.status
    # The store can apply it to the row it was decided for.
    after = delivery.step(delivery.RowState(attempts=attempts), event_for(mark))
    assert after.status is mark.status
    assert after.attempts == attempts  # marks never count attempts; claims do


def test_the_status_comes_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "TRANSITIONS", MappingProxyType({}))
    with pytest.raises(IllegalTransition, match="a row in state pending cannot take event succeed"):
        run(Outcome.sent())


def test_a_slot_schedule_of_one_retries_once() -> None:
    backoff = SlotSchedule((MINUTE,))
    assert run(Outcome.transient("x"), backoff=backoff).status is Status.PENDING
    assert run(Outcome.transient("x"), attempts=2, backoff=backoff).status is Status.FAILED


# --- webhook etiquette and handler-owns-mark -------------------------------------------------------


def test_a_410_fails_the_row_and_asks_the_store_to_disable_the_endpoint_in_the_same_write() -> None:
    mark = run(Outcome.permanent("endpoint gone (status 410)", disable_endpoint=True))
    assert mark.status is Status.FAILED
    assert mark.disable_endpoint
    assert not run(Outcome.permanent("receiver rejected the request: 400")).disable_endpoint


def test_a_mark_the_handler_recorded_itself_is_flagged_so_the_runtime_writes_nothing() -> None:
    mark = run(Outcome.recorded_by_handler())
    assert mark.status is Status.DISPATCHED
    assert mark.recorded
    assert not run(Outcome.sent()).recorded


def test_only_a_failed_mark_disables_and_only_a_dispatched_one_is_handler_recorded() -> None:
    with pytest.raises(ValueError, match="disables an endpoint"):
        Mark(42, TOKEN, Status.DISPATCHED, disable_endpoint=True)
    with pytest.raises(ValueError, match="recorded by its handler"):
        Mark(42, TOKEN, Status.FAILED, "x", recorded=True)
    with pytest.raises(ValueError, match="recorded by its handler"):
        Outcome(OutcomeKind.PERMANENT, "x", recorded=True)


# --- not attempted: a deferral (an endpoint's rate cap, ADR 0018) ----------------------------------


def test_a_deferred_send_is_handed_back_with_its_attempt_refunded_and_never_fails() -> None:
    spy = SpyBackoff(answer=None)  # a spent schedule: a transient outcome would fail here
    mark = run(Outcome.deferred("endpoint rate cap", retry_after=timedelta(seconds=3)), backoff=spy)
    assert mark.status is Status.PENDING
    assert mark.refund
    assert mark.retry_delay == timedelta(seconds=3)
    assert mark.reason == "endpoint rate cap"
    assert spy.asked == []  # the schedule is never consulted, so a deferral cannot exhaust it
    assert not run(Outcome.transient("503")).refund


def test_a_deferral_waits_what_the_cap_says_even_beyond_the_retry_after_cap() -> None:
    mark = run(Outcome.deferred("cap", retry_after=2 * HOUR), retry_after_cap=HOUR)
    assert mark.retry_delay == 2 * HOUR


def test_only_a_retry_mark_refunds_its_attempt() -> None:
    with pytest.raises(ValueError, match="only a retry mark"):
        Mark(42, TOKEN, Status.FAILED, "x", refund=True)
