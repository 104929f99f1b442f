"""The clocks (catalogue A10): the system clock reads the real ones; the fake one moves when told."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from outbox_adapters.clock import FakeClock, SystemClock
from outbox_core.ports import Clock

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def test_both_clocks_satisfy_the_port():
    clocks: list[Clock] = [SystemClock(), FakeClock(START)]
    assert len(clocks) == 2


async def test_system_clock_reads_aware_utc_wall_time_and_monotonic_time():
    clock = SystemClock()
    before = datetime.now(UTC)
    now = clock.now()
    after = datetime.now(UTC)
    assert now.tzinfo is UTC
    assert before <= now <= after
    first = clock.monotonic()
    await clock.sleep(0.01)
    assert clock.monotonic() - first >= 0.009  # it really waited
    assert repr(clock) == "SystemClock()"


def test_fake_clock_starts_where_told_in_utc_and_stands_still():
    clock = FakeClock(datetime(2026, 3, 1, 10, 0, tzinfo=timezone(timedelta(hours=1))))
    assert clock.now() == START
    assert clock.now().tzinfo is UTC
    assert clock.now() == clock.now()
    assert clock.monotonic() == clock.monotonic()
    assert FakeClock().now().tzinfo is UTC


def test_fake_clock_refuses_a_naive_start():
    with pytest.raises(ValueError, match="timezone-aware"):
        FakeClock(datetime(2026, 3, 1))  # noqa: DTZ001


@pytest.mark.parametrize("amount", [90, 90.0, timedelta(seconds=90)])
def test_advance_moves_wall_and_monotonic_time_together(amount):
    clock = FakeClock(START, monotonic_start=5.0)
    assert clock.advance(amount) == START + timedelta(seconds=90)
    assert clock.now() == START + timedelta(seconds=90)
    assert clock.monotonic() == 95.0


def test_advance_keeps_microseconds_exact():
    clock = FakeClock(START)
    clock.advance(timedelta(days=400, microseconds=1))
    assert clock.now() == START + timedelta(days=400, microseconds=1)


@pytest.mark.parametrize("amount", [-1, timedelta(seconds=-1)])
def test_advance_refuses_to_go_back(amount):
    clock = FakeClock(START)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(amount)
    assert clock.now() == START


def test_set_steps_wall_time_only_backwards_included():
    clock = FakeClock(START, monotonic_start=7.0)
    earlier = START - timedelta(hours=3)
    clock.set(earlier)
    assert clock.now() == earlier
    assert clock.monotonic() == 7.0  # a wall-clock step never moves monotonic time
    with pytest.raises(ValueError, match="timezone-aware"):
        clock.set(datetime(2026, 1, 1))  # noqa: DTZ001


async def test_sleep_advances_the_clock_without_waiting_and_records_the_request():
    clock = FakeClock(START, monotonic_start=0.0)
    real_start = time.monotonic()
    await clock.sleep(3600)
    await clock.sleep(-5)  # like asyncio.sleep: a negative delay is no delay
    assert time.monotonic() - real_start < 1.0
    assert clock.now() == START + timedelta(hours=1)
    assert clock.monotonic() == 3600.0
    assert clock.sleeps == [3600, -5]


async def test_sleep_yields_to_the_loop_so_other_tasks_run():
    clock = FakeClock(START)
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    task = asyncio.create_task(other())
    await clock.sleep(1)
    assert ran == ["other"]
    await task


def test_repr_shows_both_times():
    assert repr(FakeClock(START, monotonic_start=2.0)) == (
        "FakeClock(2026-03-01T09:00:00+00:00, monotonic=2.0)"
    )
