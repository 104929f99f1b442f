"""runtime.deadline.Deadlines: asyncio.timeout's behaviour for scopes opened one after another on
one reused loop timer (the strict walk's send and mark limits); runtime.deadline.WindowDeadline:
the same for the concurrent scopes of a window's sends on one timer."""

from __future__ import annotations

import asyncio

import pytest

from outbox_adapters.runtime.deadline import Deadlines, WindowDeadline


async def test_a_body_that_overruns_its_scope_gets_timeout_error_and_the_task_is_not_left_cancelled():
    deadlines = Deadlines()
    with pytest.raises(TimeoutError):
        async with deadlines.within(0.02):
            await asyncio.sleep(1)
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # the task still runs: nothing is left pending against it


async def test_a_body_that_ends_in_time_is_not_cut_and_its_timer_fires_into_nothing_later():
    deadlines = Deadlines()
    async with deadlines.within(0.02):
        await asyncio.sleep(0)
    await asyncio.sleep(0.06)  # the first scope's timer fires here, with no scope open
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_a_later_scope_is_not_cut_at_an_earlier_scope_s_deadline():
    """The reused timer fires at the first scope's deadline while the second is open: it must
    re-arm for the second's deadline, not cut it (the mutant "no re-arm" fails here)."""
    deadlines = Deadlines()
    async with deadlines.within(0.03):
        pass
    async with deadlines.within(2):
        await asyncio.sleep(0.1)  # past the first scope's deadline, well inside this one's
    with pytest.raises(TimeoutError):
        async with deadlines.within(0.5):
            await asyncio.sleep(2)  # the re-armed timer still cuts the scope at its own deadline


async def test_an_earlier_deadline_than_the_armed_timer_s_is_still_kept():
    deadlines = Deadlines()
    async with deadlines.within(5):
        pass
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with deadlines.within(0.03):
            await asyncio.sleep(2)
    assert loop.time() - started < 1


async def test_every_scope_in_a_long_sequence_is_cut_at_its_own_deadline():
    deadlines = Deadlines()
    cut = 0
    for n in range(20):
        try:
            async with deadlines.within(0.01 if n % 2 else 1.0):
                await asyncio.sleep(0.03)
        except TimeoutError:
            cut += 1
    assert cut == 10


async def test_a_cancellation_from_elsewhere_passes_through_as_cancelled_error():
    deadlines = Deadlines()
    reached = asyncio.Event()

    async def body() -> None:
        async with deadlines.within(5):
            reached.set()
            await asyncio.sleep(5)

    task = asyncio.ensure_future(body())
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancellation_from_elsewhere_after_expiry_is_not_swallowed():
    """Expired and then cancelled by its owner: the owner's cancellation wins (asyncio.timeout)."""
    deadlines = Deadlines()

    async def body() -> None:
        async with deadlines.within(0.01):
            try:
                await asyncio.sleep(5)
            finally:
                # Cancelled by the deadline; now the owner cancels it too, before it ends.
                current = asyncio.current_task()
                assert current is not None
                current.cancel()
                await asyncio.sleep(0)

    task = asyncio.ensure_future(body())
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_scope_opened_while_another_task_s_is_open_gets_a_limit_of_its_own():
    deadlines = Deadlines()
    outcomes: dict[str, str] = {}

    async def one(name: str, limit: float, takes: float) -> None:
        try:
            async with deadlines.within(limit):
                await asyncio.sleep(takes)
            outcomes[name] = "done"
        except TimeoutError:
            outcomes[name] = "cut"

    await asyncio.gather(one("long", 1, 0.05), one("short", 0.02, 1), one("fine", 1, 0.01))
    assert outcomes == {"long": "done", "short": "cut", "fine": "done"}


def test_a_deadlines_object_keeps_its_limits_on_a_new_event_loop():
    """A timer armed on a loop that has ended never fires: a scope on a new loop re-arms."""
    deadlines = Deadlines()

    async def first() -> None:
        async with deadlines.within(0.01):
            pass

    async def second() -> None:
        async with deadlines.within(0.05):
            await asyncio.sleep(2)

    asyncio.run(first())
    with pytest.raises(TimeoutError):
        asyncio.run(second())


async def _in_window(window: WindowDeadline, seconds: float) -> str:
    try:
        async with window.within():
            await asyncio.sleep(seconds)
    except TimeoutError:
        task = asyncio.current_task()
        assert task is not None
        assert task.cancelling() == 0  # the window's cancellation was taken back
        return "cut"
    return "ended"


async def test_a_window_cuts_every_send_still_running_at_its_deadline_and_only_those():
    window = WindowDeadline(0.05)
    try:
        results = await asyncio.gather(
            _in_window(window, 0), _in_window(window, 0.01), _in_window(window, 1)
        )
    finally:
        window.close()
    assert list(results) == ["ended", "ended", "cut"]


async def test_a_scope_opened_after_the_window_s_deadline_is_cut_at_once():
    window = WindowDeadline(0)
    await asyncio.sleep(0.01)
    assert await _in_window(window, 1) == "cut"


async def test_a_cancellation_from_elsewhere_passes_through_a_window_scope():
    window = WindowDeadline(5)
    task = asyncio.ensure_future(_in_window(window, 1))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    window.close()


async def test_a_closed_window_cuts_nothing():
    window = WindowDeadline(0.02)
    window.close()
    assert await _in_window(window, 0.05) == "ended"
