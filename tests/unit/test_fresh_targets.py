"""The targets a fan-out round reads for its first attempts (lanes/fresh_targets.py): each used
once, and only while fresh; anything else is read from the repository again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import attrs
import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.fresh_targets import FreshTargets
from outbox_core.errors import ConfigurationError


@attrs.frozen
class Target:
    #: Where it was read: ``round-N`` or ``attempt-N``.
    read: str
    endpoint_id: int = 7


class Repository:
    """Targets name where they were read; delivery 13's can't be read by the round."""

    def __init__(self) -> None:
        self.single: list[int] = []
        self.many: list[list[int]] = []

    async def delivery_target(self, delivery_id: int) -> Target:
        self.single.append(delivery_id)
        return Target(f"attempt-{delivery_id}", endpoint_id=delivery_id % 2)

    async def delivery_targets(self, delivery_ids: Sequence[int]) -> Mapping[int, Target]:
        self.many.append(list(delivery_ids))
        return {d: Target(f"round-{d}", endpoint_id=d % 2) for d in delivery_ids if d != 13}


def targets(
    max_age: timedelta = timedelta(seconds=1),
) -> tuple[FreshTargets, Repository, FakeClock]:
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    repository = Repository()
    return FreshTargets(repository, clock=clock, max_age=max_age), repository, clock


async def test_a_first_attempt_uses_the_round_s_target_once_and_then_reads_its_own() -> None:
    fresh, repository, _clock = targets()
    await fresh.prime([1, 2, 13])
    assert repository.many == [[1, 2, 13]]
    assert (await fresh.delivery_target(1)).read == "round-1"
    assert (await fresh.delivery_target(2)).read == "round-2"
    assert repository.single == []
    assert (await fresh.delivery_target(1)).read == "attempt-1"  # used once: a retry reads its own
    assert (await fresh.delivery_target(13)).read == "attempt-13"  # the round could not read it
    assert repository.single == [1, 13]
    assert fresh.held == 0


async def test_a_target_older_than_max_age_is_read_again() -> None:
    fresh, repository, clock = targets()
    await fresh.prime([1, 2])
    clock.advance(timedelta(seconds=1))
    assert (await fresh.delivery_target(1)).read == "round-1"  # exactly max_age old: still fresh
    clock.advance(timedelta(milliseconds=1))
    assert (await fresh.delivery_target(2)).read == "attempt-2"
    assert repository.single == [2]


async def test_targets_no_attempt_took_are_dropped_by_the_next_round() -> None:
    fresh, _repository, clock = targets()
    await fresh.prime([1, 2])
    clock.advance(timedelta(seconds=5))
    await fresh.prime([3])
    assert fresh.held == 1
    await fresh.prime([])
    assert fresh.held == 1


async def test_an_endpoint_that_answered_410_has_its_held_targets_dropped() -> None:
    fresh, repository, _clock = targets()
    await fresh.prime([1, 2, 3, 4])
    fresh.endpoint_gone(1)  # deliveries 1 and 3 go to endpoint 1
    assert fresh.held == 2
    assert (await fresh.delivery_target(3)).read == "attempt-3"
    assert (await fresh.delivery_target(4)).read == "round-4"
    assert repository.single == [3]


def test_max_age_must_be_a_duration_of_zero_or_more() -> None:
    for bad in (timedelta(seconds=-1), 1.0):
        with pytest.raises(ConfigurationError, match="max_age"):
            targets(bad)  # type: ignore[arg-type]
