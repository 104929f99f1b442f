"""Lease math, the row-start gate, row deadlines, the fence and duplicate accounting (C10)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.strategies import durations_between

from outbox_core.delivery import Status
from outbox_core.lease import (
    DUPLICATE_WINDOWS,
    BatchClock,
    DuplicateWindow,
    KillPoint,
    duplicates_possible,
    exchange_deadline,
    fence_admits,
    is_expired,
    leader_admits_row,
    lease_expires_at,
    max_duplicates,
    may_start_row,
    row_deadline,
)
from outbox_core.messages import ClaimToken
from outbox_core.timing import DEFAULT_EMAIL_TIMING, EmailStepBudgets, EmailTiming

S = timedelta(seconds=1)
T0 = datetime(2026, 7, 3, 12, 0, tzinfo=UTC)
NAIVE = datetime(2026, 7, 3, 12, 0)  # noqa: DTZ001 -- the naive value under test
TOKEN = ClaimToken("token-of-this-claim")
SIBLING = ClaimToken("token-of-a-later-claim")

signed = durations_between(-timedelta(days=2), timedelta(days=2))
#: A monotonic instant (seconds), as the worker reads ``Clock.monotonic()``.
M0 = 1_000.0
moments = st.floats(min_value=0, max_value=1e9, allow_nan=False)
spans = st.floats(min_value=1e-6, max_value=172_800.0)
signed_spans = st.floats(min_value=-172_800.0, max_value=172_800.0)


# -- expiry ------------------------------------------------------------------------------------


def test_a_lease_ends_its_length_after_the_claim():
    assert lease_expires_at(T0, DEFAULT_EMAIL_TIMING.claim_lease()) == T0 + 360 * S


def test_a_lease_keeps_the_claims_offset():
    plus_two = timezone(timedelta(hours=2))
    expires = lease_expires_at(T0.astimezone(plus_two), 60 * S)
    assert expires == T0 + 60 * S
    assert expires.utcoffset() == timedelta(hours=2)


@pytest.mark.parametrize(
    ("now", "expired"),
    [(T0 - timedelta(microseconds=1), False), (T0, True), (T0 + S, True)],
    ids=["just-before", "at-expiry", "after"],
)
def test_a_lease_is_expired_from_its_expiry_instant_on(now, expired):
    assert is_expired(T0, now=now) is expired


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: lease_expires_at(NAIVE, S), "claimed_at"),
        (lambda: is_expired(NAIVE, now=T0), "expires_at"),
        (lambda: is_expired(T0, now=NAIVE), "now"),
        (lambda: is_expired(T0, now="2026-07-03T12:00Z"), "now"),  # type: ignore[arg-type]
    ],
)
def test_naive_datetimes_are_refused(call, name):
    with pytest.raises(ValueError, match=rf"^{name} must be a timezone-aware datetime"):
        call()


@pytest.mark.parametrize("bad", [timedelta(0), -S, 60])
@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda d: lease_expires_at(T0, d), "lease"),
        (lambda d: BatchClock.start(M0, batch_timeout=d, lease=360 * S), "batch_timeout"),
        (lambda d: BatchClock.start(M0, batch_timeout=S, lease=d), "lease"),
    ],
)
def test_durations_that_are_not_positive_are_refused(call, name, bad):
    with pytest.raises(ValueError, match=rf"^{name} must be a positive timedelta"):
        call(bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, "1000", True])
def test_a_batch_starts_at_a_finite_monotonic_instant(bad):
    with pytest.raises(
        ValueError, match=r"^claimed_at must be a finite number of monotonic seconds"
    ):
        BatchClock.start(bad, batch_timeout=300 * S, lease=360 * S)


def test_a_batch_timeout_must_end_before_the_lease():
    with pytest.raises(ValueError, match="must end before its claim lease"):
        BatchClock.start(M0, batch_timeout=360 * S, lease=360 * S)


# -- the row-start gate (monotonic seconds, as the worker reads them) -----------------------------


@pytest.mark.parametrize(
    ("now", "admitted"),
    [
        (M0, True),
        (M0 + 240, True),  # the fifth row of a default batch: it ends exactly at the deadline
        (M0 + 240.000001, False),
        (M0 + 299, False),
    ],
)
def test_a_row_starts_only_if_its_whole_budget_fits(now, admitted):
    timing = DEFAULT_EMAIL_TIMING
    deadline = M0 + timing.batch_timeout.total_seconds()
    assert may_start_row(now=now, batch_deadline=deadline, per_row=60.0) is admitted
    clock = BatchClock.start(M0, batch_timeout=timing.batch_timeout, lease=timing.claim_lease())
    assert clock.may_start_row(now, 60.0) is admitted


@given(now=moments, per_row=spans, slack=signed_spans)
def test_the_gate_never_admits_a_row_that_ends_after_the_deadline(now, per_row, slack):
    deadline = now + per_row + slack
    admitted = may_start_row(now=now, batch_deadline=deadline, per_row=per_row)
    assert admitted is (now + per_row <= deadline)


@given(
    steps=st.lists(st.integers(min_value=1, max_value=600), min_size=6, max_size=6),
    batch_size=st.integers(min_value=1, max_value=50),
    grace=st.integers(min_value=1, max_value=600),
    row_fractions=st.lists(st.floats(min_value=0, max_value=1), min_size=50, max_size=50),
)
def test_a_gated_batch_ends_inside_its_claim_lease(steps, batch_size, grace, row_fractions):
    budgets = EmailStepBudgets(*(seconds * S for seconds in steps))
    timing = EmailTiming(budgets, batch_size, lease_grace=grace * S)
    clock = BatchClock.start(M0, batch_timeout=timing.batch_timeout, lease=timing.claim_lease())
    per_row = timing.per_row.total_seconds()
    now, started = M0, 0
    for fraction in row_fractions[:batch_size]:
        if not clock.may_start_row(now, per_row):
            break
        started += 1
        now += per_row * fraction  # a row uses at most its budget
        assert now <= clock.batch_deadline < clock.lease_deadline
    # With the default batch timeout a full batch always fits: no row is left for a re-claim.
    assert started == batch_size


def test_a_batch_clock_holds_its_two_deadlines():
    clock = BatchClock.start(M0, batch_timeout=300 * S, lease=360 * S)
    assert (clock.claimed_at, clock.batch_deadline, clock.lease_deadline) == (
        M0,
        M0 + 300,
        M0 + 360,
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        clock.batch_deadline = M0  # type: ignore[misc]


def test_the_batch_timeout_counts_from_the_claims_answer_never_past_the_lease():
    # A batch of one with the shortest timeout the chain allows (its per-row budget): counted from
    # the claim's start, the row could never start once the claim took any time at all.
    clock = BatchClock.start(M0, batch_timeout=60 * S, lease=120 * S)
    assert not clock.may_start_row(M0 + 0.2, per_row=60)
    answered = clock.answered(M0 + 0.2)
    assert answered.may_start_row(M0 + 0.2, per_row=60)
    assert (answered.claimed_at, answered.batch_deadline, answered.lease_deadline) == (
        M0,
        M0 + 60.2,
        M0 + 120,
    )
    # A claim that answered late: the deadline stops at the lease, which still counts from the
    # claim's start.
    late = clock.answered(M0 + 100)
    assert late.batch_deadline == late.lease_deadline == M0 + 120
    assert not late.may_start_row(M0 + 100, per_row=60)
    assert late.row_deadline(M0 + 100, per_row=10) == M0 + 110
    with pytest.raises(ValueError, match="at"):
        clock.answered(math.nan)


# -- the leadership gate -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trusted_until", "admitted"),
    [
        (M0 + 60, True),  # the row ends exactly when the term does
        (M0 + 59.999, False),  # a row that would outlive the term: another leader may act then
        (math.inf, True),  # a lane without a leader lease
        (-math.inf, False),  # no term at all
    ],
)
def test_a_leader_starts_a_row_only_if_it_ends_inside_its_term(trusted_until, admitted):
    got = leader_admits_row(now=M0, trusted_until=trusted_until, per_row=60.0)
    assert got is admitted


# -- row and step deadlines ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lease_end", "expected"),
    [
        (M0 + 360, M0 + 55),  # a fresh lease: the row's send budget ends first
        (M0 + 20, M0 + 20),  # a lease about to end: the worker stops at its own lease
        (M0 + 55, M0 + 55),
    ],
)
def test_a_row_never_runs_past_its_budget_or_its_lease(lease_end, expected):
    assert row_deadline(row_started=M0, per_row=55.0, lease_deadline=lease_end) == expected
    clock = BatchClock(M0, M0 + 300, lease_end)
    assert clock.row_deadline(M0, 55.0) == expected


@given(start=moments, per_row=spans, lease_offset=signed_spans)
def test_the_row_deadline_is_the_earlier_bound(start, per_row, lease_offset):
    lease_end = start + lease_offset
    got = row_deadline(row_started=start, per_row=per_row, lease_deadline=lease_end)
    assert got <= start + per_row
    assert got <= lease_end
    assert got in {start + per_row, lease_end}


@pytest.mark.parametrize(
    ("row_end", "cap", "expected"),
    [
        (M0 + 50, 30.0, M0 + 30),  # the default 30 s exchange budget
        (M0 + 12, 30.0, M0 + 12),  # less time left in the row than the exchange budget
        (M0 + 50, 45.0, M0 + 45),  # a configured budget
        (M0 + 50, 90.0, M0 + 50),
        (M0 - 1, 10.0, M0 - 1),  # the row's time is up: the step's deadline has passed already
    ],
)
def test_a_step_deadline_is_its_budget_or_the_time_left(row_end, cap, expected):
    assert exchange_deadline(now=M0, row_deadline=row_end, cap=cap) == expected


# -- the fence ---------------------------------------------------------------------------------


@pytest.mark.parametrize("status", list(Status))
@pytest.mark.parametrize(
    ("row_token", "holder"),
    [(TOKEN, "same"), (SIBLING, "different"), (None, "none")],
    ids=["same-token", "sibling-token", "no-token"],
)
def test_the_fence_admits_only_the_current_holder_of_a_pending_row(status, row_token, holder):
    admitted = fence_admits(row_status=status, row_token=row_token, mark_token=TOKEN)
    assert admitted is (status is Status.PENDING and holder == "same")


def test_the_fence_compares_token_values_not_objects():
    copy = ClaimToken(TOKEN.value)
    assert copy is not TOKEN
    assert fence_admits(row_status=Status.PENDING, row_token=copy, mark_token=TOKEN)


def test_a_row_without_a_token_admits_no_mark_even_without_one():
    # An untyped caller passing no token must not match a legacy row that has none.
    assert not fence_admits(row_status=Status.PENDING, row_token=None, mark_token=None)  # type: ignore[arg-type]


def test_a_late_holder_cannot_overwrite_a_sibling_after_a_reclaim():
    # Worker A claims (TOKEN), stalls past its lease; B re-claims (SIBLING): the row stays pending.
    # A's late failure mark must be refused although the status guard alone would admit it.
    assert not fence_admits(row_status=Status.PENDING, row_token=SIBLING, mark_token=TOKEN)
    assert fence_admits(row_status=Status.PENDING, row_token=SIBLING, mark_token=SIBLING)


# -- duplicate accounting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("crashes", "rows_in_flight", "bound"),
    [(0, 5, 0), (1, 0, 0), (1, 1, 1), (3, 1, 3), (3, 5, 15)],
)
def test_each_crash_duplicates_each_row_in_flight_at_most_once(crashes, rows_in_flight, bound):
    assert max_duplicates(crashes=crashes, rows_in_flight=rows_in_flight) == bound


@pytest.mark.parametrize(("crashes", "rows_in_flight"), [(-1, 1), (1, -1)])
def test_negative_counts_are_refused(crashes, rows_in_flight):
    with pytest.raises(ValueError, match="crashes and rows_in_flight are counts"):
        max_duplicates(crashes=crashes, rows_in_flight=rows_in_flight)


@pytest.mark.parametrize(
    ("point", "window"),
    [
        (KillPoint.AFTER_CLAIM, (0, 0)),
        (KillPoint.MID_SMTP_BEFORE_DATA, (0, 0)),
        (KillPoint.AFTER_DATA_BEFORE_REPLY, (0, 1)),
        (KillPoint.AFTER_REPLY_BEFORE_MARK, (1, 1)),
        (KillPoint.MID_MARK, (0, 1)),
        (KillPoint.AFTER_MARK, (0, 0)),
    ],
)
def test_each_kill_point_has_the_records_duplicate_window(point, window):
    got = duplicates_possible(point)
    assert got == window
    assert (got.fewest, got.most) == window


def test_every_kill_point_has_a_window():
    assert set(DUPLICATE_WINDOWS) == set(KillPoint)
    assert KillPoint("after_reply_before_mark") is KillPoint.AFTER_REPLY_BEFORE_MARK


@given(st.lists(st.sampled_from(list(KillPoint)), max_size=30))
def test_kills_never_cost_more_than_the_bound(kills):
    window = DuplicateWindow(
        sum(duplicates_possible(point).fewest for point in kills),
        sum(duplicates_possible(point).most for point in kills),
    )
    assert window.fewest <= window.most <= max_duplicates(crashes=len(kills), rows_in_flight=1)
    assert window.fewest == kills.count(KillPoint.AFTER_REPLY_BEFORE_MARK)
