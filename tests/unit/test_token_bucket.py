"""The send caps' core (outbox_core.send_caps): the token bucket's burst, steady rate and waits,
the refusal that reserves nothing, the per-domain order, and the caps' validation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_core.errors import ConfigurationError, InvalidRecipient
from outbox_core.send_caps import TokenBucket, check_cap, recipient_domains


def test_a_burst_starts_at_once_then_the_rest_are_spaced_by_the_rate():
    bucket = TokenBucket(rate=4, burst=3)
    starts = [bucket.admit(10.0).start for _ in range(6)]
    assert starts[:3] == [10.0, 10.0, 10.0]
    assert starts[3:] == pytest.approx([10.25, 10.5, 10.75])


def test_with_a_burst_of_one_sends_are_spaced_evenly():
    bucket = TokenBucket(rate=5)
    starts = [bucket.admit(0.0).start for _ in range(5)]
    assert starts == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])
    # Five starts in [0, 1): the sixth comes at 1.0, in the next second.
    assert bucket.admit(0.0).start == pytest.approx(1.0)


def test_a_steady_caller_at_the_rate_never_waits():
    bucket = TokenBucket(rate=10)
    for n in range(50):
        now = n * 0.1
        admission = bucket.admit(now)
        assert admission.admitted
        assert admission.wait(now) == pytest.approx(0.0, abs=1e-9)


def test_the_wait_is_what_is_left_until_the_reserved_start():
    bucket = TokenBucket(rate=2)
    assert bucket.admit(5.0).wait(5.0) == 0.0
    second = bucket.admit(5.1)
    assert second.admitted
    assert second.start == pytest.approx(5.5)
    assert second.wait(5.1) == pytest.approx(0.4)


def test_an_idle_bucket_refills_up_to_its_burst_only():
    bucket = TokenBucket(rate=1, burst=2)
    for _ in range(2):
        bucket.admit(0.0)
    # A long idle spell gives back the burst, never more.
    starts = [bucket.admit(100.0).start for _ in range(3)]
    assert starts == pytest.approx([100.0, 100.0, 101.0])


def test_a_start_after_latest_is_refused_and_reserves_nothing():
    bucket = TokenBucket(rate=1)
    assert bucket.admit(0.0, latest=0.5).admitted
    refused = bucket.admit(0.0, latest=0.5)
    assert not refused.admitted
    assert refused.start == pytest.approx(1.0)
    # Nothing was reserved: the next caller gets the same slot.
    again = bucket.admit(0.0, latest=2.0)
    assert again.admitted
    assert again.start == pytest.approx(1.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, True, "1"])
def test_now_must_be_finite_seconds(bad):
    with pytest.raises(ValueError, match="now must be a finite number"):
        TokenBucket(rate=1).admit(bad)


@pytest.mark.parametrize("bad", [0, -1, 1.5, 2.0, True, "3"])
def test_a_cap_is_a_whole_number_of_at_least_one(bad):
    with pytest.raises(ConfigurationError, match=r"max_per_domain: a whole number of at least 1"):
        check_cap("max_per_domain", bad)
    with pytest.raises(ConfigurationError, match="rate"):
        TokenBucket(rate=bad)
    with pytest.raises(ConfigurationError, match="burst"):
        TokenBucket(rate=1, burst=bad)


def test_no_cap_is_allowed():
    check_cap("max_per_second", None)
    check_cap("max_per_second", 1)


def test_recipient_domains_are_normalised_each_once_in_sorted_order():
    assert recipient_domains(
        ["b@Yahoo.Example", "a@gmail.com", "c@GMAIL.COM", "d@bücher.example"]
    ) == ("gmail.com", "xn--bcher-kva.example", "yahoo.example")


def test_recipient_domains_refuse_a_bad_address():
    with pytest.raises(InvalidRecipient):
        recipient_domains(["not-an-address"])


# --- properties -----------------------------------------------------------------------------------

requests = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=5.0, allow_nan=False),  # time since the previous ask
        st.floats(min_value=0.0, max_value=5.0, allow_nan=False) | st.just(math.inf),  # patience
    ),
    min_size=1,
    max_size=60,
)


@given(
    rate=st.integers(min_value=1, max_value=50),
    burst=st.integers(min_value=1, max_value=5),
    asks=requests,
)
def test_granted_starts_never_exceed_burst_plus_rate(rate, burst, asks):
    """Whatever the requests: the i-th and j-th granted starts are at least (j - i - burst + 1)
    intervals apart, so a window of t seconds holds at most burst + rate * t starts; no start is
    before its ask nor after its latest."""
    bucket = TokenBucket(rate=rate, burst=burst)
    now = 0.0
    starts: list[float] = []
    for gap, patience in asks:
        now += gap
        admission = bucket.admit(now, latest=now + patience)
        assert admission.start >= now
        if admission.admitted:
            assert admission.start <= now + patience
            starts.append(admission.start)
        else:
            assert admission.start > now + patience
    interval = 1.0 / rate
    for i in range(len(starts)):
        for j in range(i + 1, len(starts)):
            assert starts[j] - starts[i] >= (j - i - burst + 1) * interval - 1e-6


@given(rate=st.integers(min_value=1, max_value=50), gaps=st.lists(st.floats(0.0, 3.0), max_size=40))
def test_with_a_burst_of_one_a_send_waits_no_longer_than_the_rate_requires(rate, gaps):
    """Liveness: each start is its ask or one interval after the previous start, whichever is
    later (the bucket never makes a send wait more than the rate requires)."""
    bucket = TokenBucket(rate=rate)
    now, previous = 0.0, -math.inf
    for gap in gaps:
        now += gap
        start = bucket.admit(now).start
        assert start == pytest.approx(max(now, previous + 1.0 / rate), abs=1e-6)
        previous = start


def test_a_bucket_is_idle_once_every_reservation_has_passed() -> None:
    bucket = TokenBucket(2)
    assert bucket.idle(0.0)  # never used
    bucket.admit(10.0)
    assert not bucket.idle(10.0)  # the next start is 10.5
    assert not bucket.idle(10.49)
    assert bucket.idle(10.5)
    with pytest.raises(ValueError, match="now must be a finite number"):
        bucket.idle(math.nan)
