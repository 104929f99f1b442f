"""The simulator's quick run (in the default suite), its determinism, and Hypothesis over plans.

``OUTBOX_SIM_SEEDS`` changes how many seeds the quick run takes (500 by default); ``nox -s
simulate -- --seeds N`` is the long run. A failing seed is printed with the command replaying it.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from hypothesis import HealthCheck, given, settings
from tests.simulation.channel import ChannelWorld
from tests.simulation.cli import describe, replay_command, run_seeds
from tests.simulation.plan import Fault, Kind, Plan, faults_strategy, plan_from_seed
from tests.simulation.relay import RelayWorld
from tests.simulation.run import simulate, world_for
from tests.simulation.vloop import Deadlock, VirtualLoop
from tests.simulation.webhook import WebhookWorld
from tests.simulation.world import World

QUICK_SEEDS = int(os.environ.get("OUTBOX_SIM_SEEDS", "500"))


def test_quick_run_breaks_no_invariant() -> None:
    totals = run_seeds(range(QUICK_SEEDS))
    report = "\n".join(describe(failure) for failure in totals.failures[:5])
    assert not totals.failures, f"{len(totals.failures)} of {QUICK_SEEDS} seeds broke:\n{report}"
    # The run did what it claims: workers died, froze, lost the database; rows were sent twice.
    assert min(totals.crashes, totals.pauses, totals.outages, totals.cancels) > 0
    assert totals.duplicates > 0


#: One seed of each world: e-mail (0), e-mail channel (1), relay (2), webhook deliveries (7).
REPLAYED = [0, 1, 2, 7, 42]


def test_the_replayed_seeds_cover_every_world() -> None:
    loop = VirtualLoop()
    try:
        kinds = {type(world_for(plan_from_seed(seed), loop)) for seed in REPLAYED}
    finally:
        loop.close()
    assert kinds == {World, ChannelWorld, RelayWorld, WebhookWorld}


@pytest.mark.parametrize("seed", REPLAYED)
def test_a_seed_replays_exactly(seed: int) -> None:
    first, second = simulate(plan_from_seed(seed)), simulate(plan_from_seed(seed))
    assert first.trace_hash == second.trace_hash
    assert (first.steps, first.deliveries, first.simulated_seconds) == (
        second.steps,
        second.deliveries,
        second.simulated_seconds,
    )


def test_the_trace_tells_runs_apart() -> None:
    """The hash the replay test compares is a fingerprint: another seed or one more fault moves it."""
    base = plan_from_seed(3)
    hashes = {
        simulate(base).trace_hash,
        simulate(plan_from_seed(4)).trace_hash,
        simulate(Plan(base.seed, (*base.faults, Fault(5, Kind.CRASH, 0, 0.5)))).trace_hash,
    }
    assert len(hashes) == 3


def test_a_plan_round_trips_through_its_replay_command() -> None:
    plan = Plan(9, (Fault(3, Kind.PAUSE, 1, 0.75), Fault(8, Kind.SEND_MAYBE, 0, 0.25)))
    assert Plan.from_json(plan.to_json()) == plan
    assert "--plan" in replay_command(plan)
    assert replay_command(plan_from_seed(12)) == "python -m tests.simulation --seed 12"


@settings(max_examples=int(os.environ.get("OUTBOX_SIM_EXAMPLES", "100")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(plan=faults_strategy())
def test_no_fault_plan_breaks_an_invariant(plan: Plan) -> None:
    """Hypothesis draws the faults; a failure shrinks to the fewest, earliest, mildest ones."""
    result = simulate(plan)
    assert not result.violations, describe(result)


# --- the virtual loop ------------------------------------------------------------------------------


def test_virtual_time_moves_only_when_every_task_waits() -> None:
    loop = VirtualLoop()
    seen: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        seen.append((name, loop.time()))

    async def main() -> None:
        async with asyncio.timeout(7200):  # budgets run on the virtual clock too
            await asyncio.gather(sleeper("hour", 3600), sleeper("minute", 60))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(30):
                await asyncio.sleep(31)
        seen.append(("timeout", loop.time()))

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert seen == [("minute", 60.0), ("hour", 3600.0), ("timeout", 3630.0)]


def test_a_loop_where_every_task_waits_for_ever_is_a_deadlock() -> None:
    loop = VirtualLoop()

    async def main() -> None:
        await asyncio.Event().wait()

    try:
        with pytest.raises(Deadlock):
            loop.run_until_complete(main())
    finally:
        loop.close()
