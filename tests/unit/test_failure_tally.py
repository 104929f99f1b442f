"""outbox_core.failures: the count of failed handlings per message and its bound."""

from __future__ import annotations

import pytest

from outbox_core.errors import ConfigurationError
from outbox_core.failures import MAX_FAILURES, FailureTally


def test_the_bound_is_reached_at_the_bound_th_failure_of_one_message() -> None:
    tally = FailureTally(bound=3)
    assert [tally.failed("a") for _ in range(4)] == [False, False, True, True]
    assert tally.count("a") == 4
    assert tally.failed("b") is False  # another message counts on its own


def test_a_settled_message_starts_again_from_zero() -> None:
    tally = FailureTally(bound=2)
    assert tally.failed("a") is False
    tally.settled("a")
    assert tally.count("a") == 0
    assert tally.failed("a") is False
    tally.settled("never-seen")  # forgetting an unknown id is no error


def test_the_tally_forgets_the_least_recently_failed_message_past_its_size() -> None:
    tally = FailureTally(bound=5, size=2)
    tally.failed("old")
    tally.failed("mid")
    tally.failed("old")  # "old" failed again: now "mid" is the least recent
    tally.failed("new")
    assert len(tally) == 2
    assert (tally.count("old"), tally.count("mid"), tally.count("new")) == (2, 0, 1)


def test_the_default_bound_is_the_documented_one() -> None:
    assert FailureTally().bound == MAX_FAILURES == 20


@pytest.mark.parametrize("field", ["bound", "size"])
def test_a_bound_or_size_below_one_is_refused_at_construction(field: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{field} must be at least 1, got 0"):
        FailureTally(**{field: 0})
