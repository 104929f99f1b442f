"""Health: when a worker beats, when its beat is stale, and what ``outbox healthcheck`` concludes.

A worker writes a heartbeat for its lane at most every :data:`HEARTBEAT_INTERVAL`, from its own
loop (:func:`heartbeat_due`), so a loop that stopped turning stops beating; a loop that ends cleanly
writes a last, stop beat (:attr:`Beat.stopped`), so a stopped worker is not counted live until its
beat ages out. The loop turns once per
claim: between two turns lie at most a batch (``batch_timeout``) and a pause (the poll interval),
so a live worker's beat is never older than :func:`stale_after` of its lane; the worker writes that
figure with its beat, and the healthcheck holds each beat to the bound its own worker stated.

:func:`assess` is the healthcheck's verdict from what the shell read (the database's clock and this
host's, the beats of the lane from this host, the lane's leader row): pure, so its tests prove the
rules the command applies. It never depends on SMTP, a webhook receiver or a broker: a worker whose
peer is down is healthy and retrying, and restarting it would help nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Final

import attrs

from outbox_core.timing import LaneTiming

__all__ = [
    "DEFAULT_MAX_SKEW",
    "HEARTBEAT_BUDGET",
    "HEARTBEAT_INTERVAL",
    "Beat",
    "Check",
    "LeaderSeen",
    "assess",
    "healthy",
    "heartbeat_due",
    "stale_after",
]

#: How often a worker writes its heartbeat (at most; its loop decides when it can).
HEARTBEAT_INTERVAL: Final = timedelta(seconds=10)
#: How long a heartbeat write may take before the loop goes on without it: short, so a database
#: that has gone silent (a partition) costs the loop this much, not a whole claim budget, and a
#: stop request waits for it no longer.
HEARTBEAT_BUDGET: Final = timedelta(seconds=2)
#: How far this host's clock may be from the database's: every lease and due time is stamped in
#: database time, but a host whose clock is far off writes logs and traces no one can line up, and
#: usually has NTP broken.
DEFAULT_MAX_SKEW: Final = timedelta(seconds=2)


def heartbeat_due(
    last_beat: float | None, now: float, interval: timedelta = HEARTBEAT_INTERVAL
) -> bool:
    """Whether a worker whose last beat was at monotonic ``last_beat`` (None: never) beats now."""
    return last_beat is None or now - last_beat >= interval.total_seconds()


def stale_after(
    timing: LaneTiming, poll_interval: float, interval: timedelta = HEARTBEAT_INTERVAL
) -> timedelta:
    """How old a live worker's beat can get: a beat interval, one batch, one pause, and one more
    interval of slack for the write itself."""
    return 2 * interval + timing.batch_timeout + timedelta(seconds=poll_interval)


@attrs.frozen
class Beat:
    """One worker's latest heartbeat on the lane, as the database holds it."""

    holder: str
    age: timedelta
    stale_after: timedelta
    #: Whether it led the lane when it beat (None: not leader-gated).
    leading: bool | None = None
    #: Whether this is a stop beat: the worker wrote it as its loop ended cleanly, so it is not
    #: live however young the beat is.
    stopped: bool = False

    @property
    def fresh(self) -> bool:
        """A live worker's beat: not a stop beat, and no older than the bound it stated."""
        return not self.stopped and self.age <= self.stale_after


@attrs.frozen
class LeaderSeen:
    """The lane's leader row: who, which term, and how long its term still runs (negative: over)."""

    holder: str
    term: int
    expires_in: timedelta


@attrs.frozen
class Check:
    name: str
    ok: bool
    detail: str


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():.1f}s"


def assess(  # noqa: PLR0913 - keyword-only, one argument per thing the shell read
    *,
    lane: str,
    host: str,
    skew: timedelta,
    beats: Sequence[Beat],
    leader: LeaderSeen | None,
    max_skew: timedelta = DEFAULT_MAX_SKEW,
    require_leader: bool = True,
) -> list[Check]:
    """The checks after the database answered (reaching it is the shell's first check)."""
    checks = [
        Check(
            "clock",
            abs(skew) <= max_skew,
            f"this host's clock is {_seconds(skew)} from the database's (bound {_seconds(max_skew)})",
        )
    ]
    fresh = [beat for beat in beats if beat.fresh]
    if fresh:
        newest = min(fresh, key=lambda beat: beat.age)
        detail = (
            f"{len(fresh)} live worker(s) of lane {lane} on {host}; newest beat {newest.holder}"
            f" {_seconds(newest.age)} ago"
        )
    elif beats:
        newest = min(beats, key=lambda beat: beat.age)
        if newest.stopped:
            detail = (
                f"no live worker of lane {lane} on {host}: the newest beat ({newest.holder}) says"
                f" it stopped cleanly {_seconds(newest.age)} ago"
            )
        else:
            detail = (
                f"no live worker of lane {lane} on {host}: the newest beat ({newest.holder}) is"
                f" {_seconds(newest.age)} old, over its bound of {_seconds(newest.stale_after)}"
            )
    else:
        detail = f"no worker of lane {lane} on {host} has ever beaten"
    checks.append(Check("heartbeat", bool(fresh), detail))
    if require_leader:
        if leader is not None and leader.expires_in > timedelta(0):
            checks.append(
                Check(
                    "leader",
                    ok=True,
                    detail=f"lane {lane} led by {leader.holder} (term {leader.term}, "
                    f"{_seconds(leader.expires_in)} left)",
                )
            )
        else:
            said = "no leader row" if leader is None else f"{leader.holder}'s term is over"
            checks.append(
                Check("leader", ok=False, detail=f"lane {lane} has no live leader ({said})")
            )
    return checks


def healthy(checks: Sequence[Check]) -> bool:
    return all(check.ok for check in checks)
