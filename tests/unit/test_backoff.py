# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Backoff schedules (catalogue C4): the e-mail slot table, exponential consumer backoff, jitter."""

from __future__ import annotations

import itertools
import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.strategies import jitters

from outbox_core.backoff import (
    CLAIM_RETRY,
    CONSUMER_BACKOFF,
    EMAIL_BACKOFF,
    LISTEN_RETRY,
    MARK_RETRY,
    Backoff,
    ExponentialBackoff,
    RetryPause,
    SlotSchedule,
    check_jitter,
    doubling,
    jittered,
)
from outbox_core.errors import ConfigurationError

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
US = timedelta(microseconds=1)  # timedelta * float rounds to the microsecond


def test_email_schedule_is_15_slots_over_about_72_hours() -> None:
    assert len(EMAIL_BACKOFF.delays) == 15
    assert EMAIL_BACKOFF.max_attempts == 16
    total = sum(EMAIL_BACKOFF.delays, timedelta(0))
    assert abs(total - timedelta(hours=72)) <= timedelta(hours=2)


def test_email_schedule_base_delays_never_shrink() -> None:
    delays = EMAIL_BACKOFF.delays
    assert all(a <= b for a, b in itertools.pairwise(delays))


def test_shipped_schedules_satisfy_the_protocol() -> None:
    assert isinstance(EMAIL_BACKOFF, Backoff)
    assert isinstance(CONSUMER_BACKOFF, Backoff)


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [
        (1, MINUTE),
        (2, 2 * MINUTE),
        (3, 5 * MINUTE),
        (7, HOUR),
        (14, 15 * HOUR),
        (15, 20 * HOUR),
        (16, None),
        (17, None),
        (1_000, None),
    ],
)
def test_email_slot_for_each_attempt_at_mid_jitter(
    attempts: int, expected: timedelta | None
) -> None:
    assert EMAIL_BACKOFF.delay(attempts, jitter=0.5) == expected


@pytest.mark.parametrize(
    ("jitter", "expected"),
    [(0.0, timedelta(seconds=90)), (0.5, timedelta(seconds=100)), (1.0, timedelta(seconds=110))],
)
def test_jitter_spreads_by_the_ratio(jitter: float, expected: timedelta) -> None:
    schedule = SlotSchedule((timedelta(seconds=100),), jitter_ratio=0.1)
    assert schedule.delay(1, jitter=jitter) == expected


def test_zero_ratio_means_no_jitter() -> None:
    schedule = SlotSchedule((MINUTE, HOUR), jitter_ratio=0.0)
    assert schedule.delay(2, jitter=0.0) == HOUR
    assert schedule.delay(2, jitter=1.0) == HOUR


def test_slot_schedule_copies_a_list_into_a_tuple() -> None:
    delays = [MINUTE, HOUR]
    schedule = SlotSchedule(delays)
    delays.append(timedelta(days=1))
    assert schedule.delays == (MINUTE, HOUR)
    assert schedule.delay(3, jitter=0.5) is None


@given(attempts=st.integers(min_value=1, max_value=15), jitter=jitters)
def test_email_delay_stays_within_ratio_of_its_slot(attempts: int, jitter: float) -> None:
    slot = EMAIL_BACKOFF.delays[attempts - 1]
    delay = EMAIL_BACKOFF.delay(attempts, jitter=jitter)
    assert delay is not None
    assert slot * 0.9 - US <= delay <= slot * 1.1 + US


@given(
    slot_seconds=st.integers(min_value=1, max_value=10**7),
    ratio=st.floats(min_value=0.0, max_value=0.99),
    jitter=jitters,
)
def test_any_slot_is_jittered_within_its_ratio(
    slot_seconds: int, ratio: float, jitter: float
) -> None:
    slot = timedelta(seconds=slot_seconds)
    delay = SlotSchedule((slot,), jitter_ratio=ratio).delay(1, jitter=jitter)
    assert delay is not None
    assert slot * (1 - ratio) - US <= delay <= slot * (1 + ratio) + US
    # The draw maps monotonically onto the range: a larger jitter never gives a shorter wait.
    assert jittered(slot, ratio=ratio, jitter=0.0) <= delay <= jittered(slot, ratio=ratio, jitter=1)


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [
        (1, timedelta(seconds=2)),
        (2, timedelta(seconds=4)),
        (3, timedelta(seconds=8)),
        (4, timedelta(seconds=16)),
        (5, None),
        (6, None),
    ],
)
def test_consumer_backoff_is_five_attempts_exponential(
    attempts: int, expected: timedelta | None
) -> None:
    assert CONSUMER_BACKOFF.delay(attempts, jitter=0.5) == expected


def test_exponential_backoff_stops_growing_at_the_cap() -> None:
    backoff = ExponentialBackoff(
        max_attempts=20, base=timedelta(seconds=2), cap=timedelta(minutes=1)
    )
    waits = [backoff.delay(n, jitter=0.5) for n in range(1, 20)]
    assert waits[:6] == [timedelta(seconds=s) for s in (2, 4, 8, 16, 32, 60)]
    assert set(waits[5:]) == {timedelta(minutes=1)}
    assert backoff.delay(20, jitter=0.5) is None


def test_exponential_backoff_jitters_after_the_cap() -> None:
    backoff = ExponentialBackoff(max_attempts=10, cap=timedelta(seconds=10), jitter_ratio=0.2)
    assert backoff.delay(9, jitter=1.0) == timedelta(seconds=12)
    assert backoff.delay(9, jitter=0.0) == timedelta(seconds=8)


def test_exponential_backoff_survives_an_exponent_no_float_can_hold() -> None:
    backoff = ExponentialBackoff(max_attempts=100_000, factor=10.0, cap=HOUR)
    assert backoff.delay(301, jitter=0.5) == HOUR  # 2 s * 10.0 ** 300 overflows a timedelta
    assert backoff.delay(99_999, jitter=0.5) == HOUR  # 10.0 ** 99_998 overflows the float itself


def test_factor_one_keeps_the_base_wait() -> None:
    backoff = ExponentialBackoff(max_attempts=4, factor=1.0)
    assert [backoff.delay(n, jitter=0.5) for n in (1, 2, 3)] == [timedelta(seconds=2)] * 3


def test_a_single_attempt_schedule_never_retries() -> None:
    assert ExponentialBackoff(max_attempts=1).delay(1, jitter=0.5) is None


@given(attempts=st.integers(min_value=1, max_value=4), jitter=jitters)
def test_consumer_delay_stays_within_ratio_of_its_base(attempts: int, jitter: float) -> None:
    base = timedelta(seconds=2) * 2 ** (attempts - 1)
    delay = CONSUMER_BACKOFF.delay(attempts, jitter=jitter)
    assert delay is not None
    assert base * 0.9 - US <= delay <= base * 1.1 + US


@pytest.mark.parametrize("backoff", [EMAIL_BACKOFF, CONSUMER_BACKOFF], ids=["slots", "exp"])
@pytest.mark.parametrize("jitter", [-0.01, 1.01, math.nan, math.inf, -math.inf])
def test_jitter_outside_the_unit_interval_is_refused(backoff: Backoff, jitter: float) -> None:
    with pytest.raises(ValueError, match=r"jitter must be a float in \[0, 1\]"):
        backoff.delay(1, jitter=jitter)


@pytest.mark.parametrize("backoff", [EMAIL_BACKOFF, CONSUMER_BACKOFF], ids=["slots", "exp"])
@pytest.mark.parametrize("attempts", [0, -1])
def test_attempts_below_one_are_refused(backoff: Backoff, attempts: int) -> None:
    with pytest.raises(ValueError, match=rf"at least one; got {attempts}"):
        backoff.delay(attempts, jitter=0.5)


@pytest.mark.parametrize("jitter", [0.0, 0.25, 1.0])
def test_check_jitter_accepts_the_closed_unit_interval(jitter: float) -> None:
    check_jitter(jitter)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delays": ()}, r"SlotSchedule.delays must hold at least one slot, got none"),
        (
            {"delays": (MINUTE, timedelta(0))},
            r"SlotSchedule.delays must be positive timedeltas; slot 2 is datetime.timedelta\(0\)",
        ),
        ({"delays": (-MINUTE,)}, r"slot 1 is datetime.timedelta\(days=-1"),
        ({"delays": (60,)}, r"slot 1 is 60$"),
        ({"delays": (MINUTE,), "jitter_ratio": 1.0}, r"SlotSchedule.jitter_ratio .* got 1.0"),
        ({"delays": (MINUTE,), "jitter_ratio": -0.1}, r"SlotSchedule.jitter_ratio .* got -0.1"),
        ({"delays": (MINUTE,), "jitter_ratio": math.nan}, r"SlotSchedule.jitter_ratio .* got nan"),
    ],
)
def test_bad_slot_settings_are_refused_at_construction(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SlotSchedule(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, r"ExponentialBackoff.max_attempts must be .* at least 1, got 0"),
        ({"max_attempts": 2.5}, r"ExponentialBackoff.max_attempts .* got 2.5"),
        ({"base": timedelta(0)}, r"ExponentialBackoff.base must be a positive timedelta"),
        ({"base": 2}, r"ExponentialBackoff.base must be a positive timedelta, got 2"),
        ({"cap": -MINUTE}, r"ExponentialBackoff.cap must be a positive timedelta"),
        ({"cap": timedelta(seconds=1)}, r"cap \(0:00:01\) must not be below base \(0:00:02\)"),
        ({"factor": 0.5}, r"ExponentialBackoff.factor .* at least 1, got 0.5"),
        ({"factor": math.inf}, r"ExponentialBackoff.factor .* got inf"),
        ({"factor": math.nan}, r"ExponentialBackoff.factor .* got nan"),
        ({"jitter_ratio": 1.5}, r"ExponentialBackoff.jitter_ratio .* below 1, got 1.5"),
    ],
)
def test_bad_exponential_settings_are_refused_at_construction(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ExponentialBackoff(**kwargs)  # type: ignore[arg-type]


# --- found by mutation testing (docs/testing.md) -----------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: SlotSchedule(delays=()),
            "SlotSchedule.delays must hold at least one slot, got none",
        ),
        (
            lambda: ExponentialBackoff(cap=timedelta(seconds=1)),
            (
                "ExponentialBackoff.cap (0:00:01) must not be below base (0:00:02): every wait would"
                " be the cap and base would mean nothing"
            ),
        ),
    ],
)
def test_refusals_are_whole_sentences(build: object, message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        build()  # type: ignore[operator]
    assert str(refused.value) == message


def test_a_cap_equal_to_base_is_allowed_and_every_wait_is_that_value() -> None:
    backoff = ExponentialBackoff(base=MINUTE, cap=MINUTE, jitter_ratio=0.0)
    assert [backoff.delay(n, jitter=0.5) for n in (1, 2, 3)] == [MINUTE, MINUTE, MINUTE]


# -- the pause after an outage (a failed claim, mark write or LISTEN connection) -----------------


def test_an_outage_pause_doubles_up_to_its_cap() -> None:
    pause = RetryPause(base=timedelta(seconds=1), cap=timedelta(seconds=30), jitter_ratio=0.5)
    waits = [pause.after(n, jitter=0.5) for n in (1, 2, 3, 5, 6, 7, 64, 10_000)]
    assert [w.total_seconds() for w in waits] == [1, 2, 4, 16, 30, 30, 30, 30]


@given(failures=st.integers(min_value=1, max_value=200), jitter=st.floats(0.0, 1.0))
def test_an_outage_pause_is_spread_by_half_either_way(failures: int, jitter: float) -> None:
    grown = min(30.0, 2.0 ** min(failures - 1, 63))
    got = CLAIM_RETRY.after(failures, jitter=jitter).total_seconds()
    assert grown * 0.5 - 1e-9 <= got <= grown * 1.5 + 1e-9


def test_replicas_that_failed_together_come_back_apart() -> None:
    # Two replicas' draws after the same outage: the pauses differ by the draw, not in lockstep.
    assert CLAIM_RETRY.after(3, jitter=0.0) == timedelta(seconds=2)
    assert CLAIM_RETRY.after(3, jitter=1.0) == timedelta(seconds=6)
    assert MARK_RETRY.after(1, jitter=0.5) == timedelta(milliseconds=50)
    assert LISTEN_RETRY.after(100, jitter=0.5) == timedelta(seconds=5)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"base": timedelta(0), "cap": timedelta(seconds=1)}, "RetryPause.base must be a positive"),
        (
            {"base": timedelta(seconds=2), "cap": timedelta(seconds=1)},
            r"RetryPause.cap \(0:00:01\) must not be below base",
        ),
        (
            {"base": timedelta(seconds=1), "cap": timedelta(seconds=1), "jitter_ratio": 0.0},
            "jitter_ratio",
        ),
        (
            {"base": timedelta(seconds=1), "cap": timedelta(seconds=1), "jitter_ratio": 1.5},
            "jitter_ratio",
        ),
        (
            {"base": timedelta(seconds=1), "cap": timedelta(seconds=1), "jitter_ratio": math.nan},
            "jitter_ratio",
        ),
    ],
)
def test_an_outage_pause_that_cannot_work_is_refused(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RetryPause(**settings)


def test_an_outage_pause_counts_failures_from_one() -> None:
    with pytest.raises(ValueError, match="got 0"):
        CLAIM_RETRY.after(0, jitter=0.5)
    with pytest.raises(ValueError, match="jitter must be a float in"):
        CLAIM_RETRY.after(1, jitter=1.5)


def test_the_webhook_schedule_is_eight_attempts_over_about_27_hours_then_failed() -> None:
    from outbox_core.backoff import WEBHOOK_BACKOFF  # noqa: PLC0415 - the one name under test

    waits = [WEBHOOK_BACKOFF.delay(n, jitter=0.5) for n in range(1, 8)]
    assert [w.total_seconds() for w in waits if w is not None] == [
        5,
        300,
        1800,
        7200,
        18000,
        36000,
        36000,
    ]
    assert WEBHOOK_BACKOFF.max_attempts == 8
    assert WEBHOOK_BACKOFF.delay(8, jitter=0.5) is None
    low, high = WEBHOOK_BACKOFF.delay(2, jitter=0.0), WEBHOOK_BACKOFF.delay(2, jitter=1.0)
    assert (low, high) == (timedelta(minutes=4), timedelta(minutes=6))  # +/- 20 %


# --- doubling: a consumer channel's rechecks ------------------------------------------------------


def test_doubling_starts_at_first_doubles_per_step_and_stops_at_the_cap() -> None:
    first, cap = timedelta(seconds=0.25), timedelta(seconds=30)
    waits = [doubling(step, first=first, cap=cap).total_seconds() for step in range(1, 10)]
    assert waits == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert doubling(10**9, first=first, cap=cap) == cap  # no overflow, no long loop
    assert doubling(5, first=timedelta(0), cap=cap) == timedelta(0)
    assert doubling(1, first=timedelta(seconds=40), cap=cap) == cap
    with pytest.raises(ValueError, match="at least 1"):
        doubling(0, first=first, cap=cap)


@given(
    step=st.integers(min_value=1, max_value=200),
    first_ms=st.integers(min_value=0, max_value=60_000),
    cap_ms=st.integers(min_value=0, max_value=600_000),
)
def test_doubling_never_passes_the_cap_and_never_shrinks(
    step: int, first_ms: int, cap_ms: int
) -> None:
    first, cap = timedelta(milliseconds=first_ms), timedelta(milliseconds=cap_ms)
    wait = doubling(step, first=first, cap=cap)
    assert wait <= cap
    assert wait >= min(first, cap)
    assert doubling(step + 1, first=first, cap=cap) >= wait
