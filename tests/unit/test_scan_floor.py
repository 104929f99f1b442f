"""outbox_core.scan_floor: where a claim may start its scan, and when it must scan from the start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_core.errors import ConfigurationError
from outbox_core.scan_floor import ScanFloor

T0 = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)


def times(*seconds: int) -> list[datetime]:
    return [T0 + timedelta(seconds=s) for s in seconds]


def test_a_full_batch_sets_the_floor_at_its_oldest_due_time_and_a_short_one_drops_it() -> None:
    floor = ScanFloor()
    assert floor.floor is None  # the first claim scans from the start
    floor.claimed(3, times(7, 5, 9))
    assert floor.floor == T0 + timedelta(seconds=5)
    floor.claimed(3, times(11, 10, 12))
    assert floor.floor == T0 + timedelta(seconds=10)
    floor.claimed(3, times(13))  # short: the next claim scans from the start
    assert floor.floor is None
    floor.claimed(3, [])
    assert floor.floor is None


def test_at_least_every_full_every_th_claim_scans_from_the_start() -> None:
    floor = ScanFloor(full_every=4)
    scans = []
    for n in range(12):
        scans.append(floor.floor is None)
        floor.claimed(1, times(n))
    assert scans == [True, False, False, False] * 3


@given(
    full_every=st.integers(min_value=1, max_value=10),
    batches=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=60),
)
def test_never_more_than_full_every_minus_one_floored_claims_in_a_row_and_short_means_full(
    full_every: int, batches: list[int]
) -> None:
    floor = ScanFloor(full_every=full_every)
    run = 0
    short_before = False
    for n, returned in enumerate(batches):
        floored = floor.floor is not None
        assert not (floored and short_before), "a claim after a short one must scan from the start"
        run = run + 1 if floored else 0
        assert run <= full_every - 1
        floor.claimed(3, times(*range(n, n + returned)))
        short_before = returned < 3


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_full_every_must_be_a_positive_count(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="full_every"):
        ScanFloor(full_every=bad)  # type: ignore[arg-type]
