"""F1 — a worker SIGKILLed at each named point of a delivery (RELIABILITY.md).

For every :class:`~outbox_core.lease.KillPoint` a lane of its own gets a few rows; worker A (the real
worker in a subprocess, ``OUTBOX_FAILPOINT=<point>:<nth>``) kills itself there; worker B, started
beforehand and waiting (``--standby``, as a sibling replica would be), is released the moment A is
gone and works until every row is resolved. Then the test counts, from what the real SMTP server
accepted (copies per Message-ID) and what the database holds:

- rows lost (not dispatched, or never received): 0;
- duplicates of the row A was on: within ``DUPLICATE_WINDOWS[point]`` — exactly 1 after the 250
  and before the mark, at most 1 after DATA and mid-mark, 0 elsewhere; every other row: 1 copy;
- recovery: every row resolved within claim lease + 2 ticks of the kill.

Mechanisms that turn it red if removed: the claim lease (a dead worker's rows come back when it
ends — without the expiry the killed rows are never claimed again: lost > 0); the attempt
accounting in the claim and retry on the sibling (a killed row still goes out); the per-row
detached mark right after each send (a mark deferred to the end of the batch — batches are two
rows here — leaves a sent row unmarked when A dies after the first mark: a duplicate at
``after_mark``); and a lease sized from the row budgets (a lease longer than the budgets say, e.g.
the 360 s default, breaks the recovery bound).

Short mode (default): each point once (6 kills). ``OUTBOX_CHAOS=full``: each point at its 1st,
2nd and 3rd occurrence (18 kills).
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from tests.faults.failpoints import FailPoint
from tests.faults.worker_proc import WorkerProcess

from outbox_core.lease import DUPLICATE_WINDOWS, KillPoint

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

#: Two rows per claim, so a kill leaves a claimed-but-unstarted row behind as well.
BATCH = 2
#: The workers' polling interval. Recovery takes lease + up to one tick + one send, so the bound's
#: second tick is the margin for that send on a loaded machine.
TICK = 0.75
START_TIMEOUT = 60.0


@attrs.define
class Scenario:
    point: KillPoint
    nth: int
    lane: str
    ids: list[int]
    a: WorkerProcess | None = None
    b: WorkerProcess | None = None
    killed_at: float | None = None
    hit_rows: list[int] = attrs.Factory(list)
    # filled in after recovery
    lost: int = 0
    duplicates: int = 0
    other_duplicates: int = 0
    recovery: float = 0.0
    bound: float = 0.0


def _start_wave(
    nth: int, spawn: Callable[..., WorkerProcess], db: Any, new_lane: Any
) -> list[Scenario]:
    scenarios = []
    for point in KillPoint:
        lane = new_lane(f"f1_{point.value}_{nth}")
        # Enough rows that the nth occurrence of every point exists, and one more after it.
        scenario = Scenario(point, nth, lane, db.enqueue(lane, BATCH * nth + 1))
        scenario.b = spawn(lane, name=f"B:{point}:{nth}", standby=True, batch_size=BATCH,
                           poll_interval=TICK)  # fmt: skip
        scenarios.append(scenario)
    for scenario in scenarios:
        assert scenario.b is not None
        scenario.b.wait_event("ready", timeout=START_TIMEOUT)
    for scenario in scenarios:
        scenario.a = spawn(scenario.lane, name=f"A:{scenario.point}:{nth}", batch_size=BATCH,
                           poll_interval=TICK, failpoint=FailPoint(scenario.point, nth))  # fmt: skip
    return scenarios


def _release_siblings_as_workers_die(scenarios: list[Scenario]) -> None:
    """Release each B the moment its A is dead (not in list order: A's die when they die)."""
    waiting = list(scenarios)
    deadline = time.monotonic() + START_TIMEOUT
    while waiting:
        for scenario in list(waiting):
            a, b = scenario.a, scenario.b
            assert a is not None
            assert b is not None
            if a.alive:
                continue
            b.go()
            # Its last lines may still be in the pipe: wait_event reads up to the end of output.
            fired = a.wait_event("failpoint", timeout=10)
            assert a.popen.returncode == -signal.SIGKILL, a.stderr_tail()
            scenario.killed_at = fired["t"]
            scenario.hit_rows = fired.get("rows") or [fired["row"]]
            if scenario.point is KillPoint.MID_MARK:
                # The tooling's own claim: the kill came with the UPDATE on the server.
                assert fired["update_on_server"] is True
            waiting.remove(scenario)
        if time.monotonic() > deadline:
            raise AssertionError(f"fail-points not reached: {[s.a.name for s in waiting if s.a]}")
        time.sleep(0.005)


def _count(scenario: Scenario, db: Any, sink: Any) -> None:
    assert scenario.b is not None
    assert scenario.b.options is not None
    lease = scenario.b.options.lease
    rows = db.wait_resolved(scenario.lane, timeout=lease + 30)
    copies = sink.copies(scenario.lane)
    assert set(rows) == set(scenario.ids)
    scenario.lost = sum(
        1 for i in scenario.ids if rows[i]["status"] != "dispatched" or copies[i] == 0
    )
    scenario.duplicates = sum(max(0, copies[i] - 1) for i in scenario.hit_rows)
    scenario.other_duplicates = sum(
        max(0, copies[i] - 1) for i in scenario.ids if i not in scenario.hit_rows
    )
    assert scenario.killed_at is not None
    scenario.recovery = max(rows[i]["resolved"] - scenario.killed_at for i in scenario.ids)
    scenario.bound = lease + 2 * TICK
    assert scenario.b.terminate() == 0, scenario.b.stderr_tail()


def test_f1_kill_at_every_point_loses_nothing_and_duplicates_only_inside_the_window(  # noqa: PLR0917 - fixtures
    chaos_full, chaos_db, chaos_sink, spawn_worker, new_lane, report
):
    occurrences = (1, 2, 3) if chaos_full else (1,)
    done: list[Scenario] = []
    for nth in occurrences:
        scenarios = _start_wave(nth, spawn_worker, chaos_db, new_lane)
        _release_siblings_as_workers_die(scenarios)
        for scenario in scenarios:
            _count(scenario, chaos_db, chaos_sink)
        done += scenarios

    by_point: dict[KillPoint, list[Scenario]] = defaultdict(list)
    for scenario in done:
        by_point[scenario.point].append(scenario)
    for point, runs in by_point.items():
        window = DUPLICATE_WINDOWS[point]
        report(
            f"F1 point={point} kills={len(runs)} lost={sum(s.lost for s in runs)}"
            f" duplicates={sum(s.duplicates for s in runs)}"
            f" (allowed {window.fewest * len(runs)}..{window.most * len(runs)})"
            f" recovery_max={max(s.recovery for s in runs):.2f}s"
            f" (bound lease+2 ticks = {runs[0].bound:.2f}s)"
        )
    total_dup = sum(s.duplicates + s.other_duplicates for s in done)
    bound = sum(DUPLICATE_WINDOWS[s.point].most for s in done)
    report(
        f"F1 kills={len(done)} lost={sum(s.lost for s in done)} duplicates={total_dup}"
        f" (bound {bound})"
    )

    for s in done:
        window = DUPLICATE_WINDOWS[s.point]
        where = f"{s.point}:{s.nth} on {s.lane}"
        assert s.lost == 0, f"{where}: {s.lost} rows lost"
        assert s.other_duplicates == 0, f"{where}: rows A was not on were duplicated"
        assert window.fewest <= s.duplicates <= window.most, (
            f"{where}: {s.duplicates} duplicates, allowed {window.fewest}..{window.most}"
        )
        assert s.recovery <= s.bound, f"{where}: resolved {s.recovery:.2f}s after the kill"
    assert chaos_sink.plaintext_commands() == 0
