"""The leader-lease contract (catalogue A2), run against the memory lease AND PostgreSQL.

One leader per lane: a live lease is renewed by its holder under the same term and refused to
everyone else; an expired one goes to the next asker under a new term; a release frees the lane at
once, but only the term it names. The leader trusts itself until the monotonic time at the *start*
of its attempt + ttl. Every call injects ``now``, so the same instants drive both implementations.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outbox_core.ports import LeaderTerm

LANE = "email"
TTL = timedelta(seconds=30)
#: Injected on every call; the table's real-time rows never matter.
T = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


async def test_the_first_candidate_wins_term_one_and_trusts_itself_for_the_ttl(leader):
    started = leader.clock.monotonic()
    term = await leader.lease.try_acquire(LANE, "a", ttl=TTL, now=at(0))
    assert term == LeaderTerm(
        lane=LANE, holder="a", term=1, trusted_until=started + TTL.total_seconds()
    )


async def test_trust_is_counted_from_the_start_of_the_attempt_on_the_monotonic_clock(leader):
    leader.clock.advance(7)
    leader.clock.set(T - timedelta(days=3))  # a wall-clock step does not move trust
    term = await leader.lease.try_acquire(LANE, "a", ttl=TTL, now=at(0))
    assert term is not None
    assert term.trusted_until == leader.clock.monotonic() + TTL.total_seconds()


async def test_another_candidate_is_refused_while_the_lease_is_live(leader):
    assert await leader.lease.try_acquire(LANE, "a", ttl=TTL, now=at(0)) is not None
    assert await leader.lease.try_acquire(LANE, "b", ttl=TTL, now=at(29.999)) is None


async def test_the_holder_renews_under_the_same_term_and_pushes_the_expiry(leader):
    lease = leader.lease
    first = await lease.try_acquire(LANE, "a", ttl=TTL, now=at(0))
    renewed = await lease.try_acquire(LANE, "a", ttl=TTL, now=at(20))
    assert first is not None
    assert renewed is not None
    assert renewed.term == first.term == 1
    # Without the renewal the lease would have ended at 30 s; it now ends at 50 s.
    assert await lease.try_acquire(LANE, "b", ttl=TTL, now=at(49)) is None
    taken = await lease.try_acquire(LANE, "b", ttl=TTL, now=at(50))
    assert taken is not None
    assert (taken.holder, taken.term) == ("b", 2)


async def test_an_expired_lease_goes_to_the_next_candidate_under_a_new_term(leader):
    lease = leader.lease
    await lease.try_acquire(LANE, "a", ttl=TTL, now=at(0))
    taken = await lease.try_acquire(LANE, "b", ttl=TTL, now=at(30))
    assert taken is not None
    assert (taken.holder, taken.term) == ("b", 2)
    assert await lease.try_acquire(LANE, "a", ttl=TTL, now=at(31)) is None


async def test_the_holder_itself_starts_a_new_term_after_its_lease_expired(leader):
    lease = leader.lease
    await lease.try_acquire(LANE, "a", ttl=TTL, now=at(0))
    again = await lease.try_acquire(LANE, "a", ttl=TTL, now=at(30))
    assert again is not None
    assert again.term == 2


async def test_release_frees_the_lane_at_once(leader):
    lease = leader.lease
    term = await lease.try_acquire(LANE, "a", ttl=TTL, now=at(0))
    assert term is not None
    await lease.release(term, now=at(1))
    taken = await lease.try_acquire(LANE, "b", ttl=TTL, now=at(1))
    assert taken is not None
    assert (taken.holder, taken.term) == ("b", 2)


async def test_releasing_a_lost_term_leaves_the_new_leader_alone(leader):
    lease = leader.lease
    old = await lease.try_acquire(LANE, "a", ttl=TTL, now=at(0))
    new = await lease.try_acquire(LANE, "b", ttl=TTL, now=at(30))
    assert old is not None
    assert new is not None

    await lease.release(old, now=at(31))

    assert await lease.try_acquire(LANE, "a", ttl=TTL, now=at(31)) is None
    renewed = await lease.try_acquire(LANE, "b", ttl=TTL, now=at(31))
    assert renewed is not None
    assert renewed.term == new.term == 2


async def test_lanes_are_led_independently(leader):
    lease = leader.lease
    email = await lease.try_acquire("email", "a", ttl=TTL, now=at(0))
    webhook = await lease.try_acquire("webhook", "b", ttl=TTL, now=at(0))
    assert email is not None
    assert webhook is not None
    assert (email.holder, email.term, webhook.holder, webhook.term) == ("a", 1, "b", 1)


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=-1)])
async def test_a_lease_needs_a_positive_ttl(leader, ttl):
    with pytest.raises(ValueError, match="positive ttl"):
        await leader.lease.try_acquire(LANE, "a", ttl=ttl, now=at(0))
