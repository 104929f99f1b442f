# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Backoff schedules: how long a row waits after a transient failure.

Theory of operation
-------------------
A schedule answers one question: the row has been claimed ``attempts`` times (the claim is the
only place that count grows) and the latest attempt failed transiently; how long until the next
one? It returns ``None`` when the schedule is used up, and :func:`outbox_core.decide.decide` then
fails the row.

Jitter is an *argument*, a float in [0, 1] the caller draws (the core never makes randomness). It
spreads a delay evenly over ``delay * [1 - ratio, 1 + ratio]``, so rows that failed together (a
mail server that was down for a minute) don't all come back in the same instant::

    jittered = delay * (1 + ratio * (2 * jitter - 1))   # jitter 0: -ratio, 0.5: exact, 1: +ratio

Two schedules ship:

- :data:`EMAIL_BACKOFF` — 15 backoff slots over about 72 hours: a row gets its first attempt plus
  15 retries, 16 attempts in all, over about three days: long enough to ride out a receiving mail
  server's outage without hammering it.
- :data:`CONSUMER_BACKOFF` — consumer channels make 5 attempts with exponential backoff before the
  event is parked on the dead-letter destination.
- :data:`WEBHOOK_BACKOFF` — webhook deliveries: 8 attempts over about 27.6 hours (at once, 5 s,
  5 min, 30 min, 2 h, 5 h, 10 h, 10 h).
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

import attrs

from outbox_core.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "CLAIM_RETRY",
    "CONSUMER_BACKOFF",
    "EMAIL_BACKOFF",
    "LISTEN_RETRY",
    "MARK_RETRY",
    "WEBHOOK_BACKOFF",
    "Backoff",
    "ExponentialBackoff",
    "RetryPause",
    "SlotSchedule",
    "check_jitter",
    "doubling",
    "jittered",
]


@runtime_checkable
class Backoff(Protocol):
    """A retry schedule. Satisfied structurally: any object with this method is a backoff."""

    def delay(self, attempts: int, *, jitter: float) -> timedelta | None:
        """The wait before the next attempt after ``attempts`` claims (>= 1).

        ``None`` means the schedule is used up: the row must fail. ``jitter`` is a float in [0, 1]
        drawn by the caller; anything else raises :class:`ValueError`.
        """
        ...


def check_jitter(jitter: float) -> None:
    """Refuse a jitter draw outside [0, 1] (NaN included: it fails both comparisons)."""
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be a float in [0, 1] drawn by the caller, got {jitter!r}")


def jittered(delay: timedelta, *, ratio: float, jitter: float) -> timedelta:
    """``delay`` spread by +/- ``ratio``: jitter 0 is the shortest wait, 1 the longest."""
    check_jitter(jitter)
    return delay * (1.0 + ratio * (2.0 * jitter - 1.0))


def doubling(step: int, *, first: timedelta, cap: timedelta) -> timedelta:
    """``first`` doubled for each step after the first, never more than ``cap``: the wait before
    a consumer channel looks again at an event whose recipients are still being sent, after its
    ``step``-th delivery (a recheck is no failure and has no end: it only grows sparser)."""
    if step < 1:
        raise ValueError(f"step counts the deliveries so far, at least 1; got {step!r}")
    wait = first
    for _ in range(step - 1):
        if wait >= cap or wait <= timedelta(0):  # at the cap, or nothing to double: done
            break
        wait *= 2
    return min(wait, cap)


def _check_attempts(attempts: int) -> None:
    if attempts < 1:
        raise ValueError(
            f"attempts counts the claims so far, and a claimed row has at least one; "
            f"got {attempts!r}"
        )


def _jitter_ratio(inst: object, _attribute: object, value: float) -> None:
    # NaN fails both comparisons, so it is refused too. A ratio of 1 or more could make a delay zero
    # or negative, which would retry a row at once: the storm the jitter is there to prevent.
    if not 0.0 <= value < 1.0:
        raise ConfigurationError(
            f"{type(inst).__name__}.jitter_ratio must be at least 0 and below 1, got {value!r}"
        )


def _to_tuple(delays: Iterable[timedelta]) -> tuple[timedelta, ...]:
    # A frozen schedule must not share a list its caller could still change.
    return tuple(delays)


def _slot_delays(_inst: object, _attribute: object, value: tuple[timedelta, ...]) -> None:
    if not value:
        raise ConfigurationError("SlotSchedule.delays must hold at least one slot, got none")
    for number, delay in enumerate(value, start=1):
        if not isinstance(delay, timedelta) or delay <= timedelta(0):
            raise ConfigurationError(
                f"SlotSchedule.delays must be positive timedeltas; slot {number} is {delay!r}"
            )


@attrs.frozen
class SlotSchedule:
    """A fixed table of waits: failed attempt ``n`` waits ``delays[n - 1]``; then give up."""

    #: The wait after the 1st, 2nd, ... failed attempt; ``len(delays) + 1`` attempts in all.
    delays: tuple[timedelta, ...] = attrs.field(converter=_to_tuple, validator=_slot_delays)
    #: How far jitter may move a wait, as a fraction of it (0 <= ratio < 1).
    jitter_ratio: float = attrs.field(default=0.1, validator=_jitter_ratio)

    @property
    def max_attempts(self) -> int:
        """Attempts a row gets before the schedule is used up (the first one plus one per slot)."""
        return len(self.delays) + 1

    def delay(self, attempts: int, *, jitter: float) -> timedelta | None:
        _check_attempts(attempts)
        check_jitter(jitter)
        if attempts > len(self.delays):
            return None
        return jittered(self.delays[attempts - 1], ratio=self.jitter_ratio, jitter=jitter)


def _positive(inst: object, attribute: attrs.Attribute[timedelta], value: timedelta) -> None:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ConfigurationError(
            f"{type(inst).__name__}.{attribute.name} must be a positive timedelta, got {value!r}"
        )


def _max_attempts(_inst: object, _attribute: object, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"ExponentialBackoff.max_attempts must be a whole number of at least 1, got {value!r}"
        )


def _factor(_inst: object, _attribute: object, value: float) -> None:
    # A factor below 1 would shrink the waits (retrying faster the longer a peer is down); infinity
    # and NaN are not growth rates.
    if not (math.isfinite(value) and value >= 1.0):
        raise ConfigurationError(
            f"ExponentialBackoff.factor must be a finite number of at least 1, got {value!r}"
        )


def _cap(inst: ExponentialBackoff, attribute: attrs.Attribute[timedelta], value: timedelta) -> None:
    _positive(inst, attribute, value)
    if value < inst.base:
        raise ConfigurationError(
            f"ExponentialBackoff.cap ({value}) must not be below base ({inst.base}): "
            "every wait would be the cap and base would mean nothing"
        )


@attrs.frozen
class ExponentialBackoff:
    """Waits growing by ``factor`` from ``base`` up to ``cap``; ``max_attempts`` attempts in all."""

    #: Attempts a row gets in all; the last failing one is final.
    max_attempts: int = attrs.field(default=5, validator=_max_attempts)
    #: The wait after the first failed attempt.
    base: timedelta = attrs.field(default=timedelta(seconds=2), validator=_positive)
    #: How much each wait grows over the one before (>= 1).
    factor: float = attrs.field(default=2.0, validator=_factor)
    #: The longest wait, before jitter.
    cap: timedelta = attrs.field(default=timedelta(minutes=5), validator=_cap)
    #: How far jitter may move a wait, as a fraction of it (0 <= ratio < 1).
    jitter_ratio: float = attrs.field(default=0.1, validator=_jitter_ratio)

    def delay(self, attempts: int, *, jitter: float) -> timedelta | None:
        _check_attempts(attempts)
        check_jitter(jitter)
        if attempts >= self.max_attempts:
            return None
        try:
            grown = min(self.cap, self.base * self.factor ** (attempts - 1))
        except OverflowError:
            # factor ** n outgrows a float (or the product a timedelta) long after it passed cap.
            grown = self.cap
        return jittered(grown, ratio=self.jitter_ratio, jitter=jitter)


#: Email lanes: 15 slots over about 72 hours. The waits grow fast at first (most outages are
#: short), then stretch out; they add up to 72 h 18 min.
EMAIL_BACKOFF: Final = SlotSchedule(
    tuple(
        timedelta(minutes=m)
        for m in (1, 2, 5, 10, 20, 40, 60, 120, 180, 240, 360, 480, 720, 900, 1200)
    )
)

#: Consumer channels: 5 attempts, exponential: waits of about 2 s, 4 s, 8 s, 16 s.
CONSUMER_BACKOFF: Final = ExponentialBackoff()

#: Webhook deliveries: the first attempt at once (in-process, right after the fan-out), then waits
#: of 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h (each jittered by up to 20 %, so receivers
#: that came back are not hit by every sender at once): 8 attempts over about 27.6 hours, then
#: failed. A 429/503 Retry-After lengthens a wait (capped), never shortens it.
WEBHOOK_BACKOFF: Final = SlotSchedule(
    (
        timedelta(seconds=5),
        timedelta(minutes=5),
        timedelta(minutes=30),
        timedelta(hours=2),
        timedelta(hours=5),
        timedelta(hours=10),
        timedelta(hours=10),
    ),
    jitter_ratio=0.2,
)


def _pause_cap(inst: RetryPause, attribute: attrs.Attribute[timedelta], value: timedelta) -> None:
    _positive(inst, attribute, value)
    if value < inst.base:
        raise ConfigurationError(f"RetryPause.cap ({value}) must not be below base ({inst.base})")


def _pause_ratio(_inst: object, _attribute: object, value: float) -> None:
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise ConfigurationError(f"RetryPause.jitter_ratio must be in (0, 1], got {value!r}")


@attrs.frozen
class RetryPause:
    """How long a worker waits before it tries an unavailable store or listener again.

    Not a row's schedule (that is :class:`Backoff`): this is the pause after a failed claim, a failed
    mark write or a lost LISTEN connection. It doubles from ``base`` up to ``cap`` and never ends,
    and it is jittered by +/- ``jitter_ratio`` (half by default), so that the replicas which all lost
    the database at the same instant do not all come back to a recovering server in lockstep.
    """

    #: The pause after the first failure.
    base: timedelta = attrs.field(validator=_positive)
    #: The longest pause, before jitter.
    cap: timedelta = attrs.field(validator=_pause_cap)
    #: How far jitter moves a pause, as a fraction of it.
    jitter_ratio: float = attrs.field(default=0.5, validator=_pause_ratio)

    def after(self, failures: int, *, jitter: float) -> timedelta:
        """The pause after ``failures`` failures in a row (>= 1); ``jitter`` in [0, 1]."""
        _check_attempts(failures)
        # In float seconds: base * 2 ** n outgrows a timedelta long before it outgrows a float,
        # and it passed any cap long before that.
        doubled = self.base.total_seconds() * 2.0 ** min(failures - 1, 1_000)
        grown = timedelta(seconds=min(doubled, self.cap.total_seconds()))
        return jittered(grown, ratio=self.jitter_ratio, jitter=jitter)


#: After a failed claim: 1 s, 2 s, 4 s ... up to 30 s, each +/- 50%.
CLAIM_RETRY: Final = RetryPause(base=timedelta(seconds=1), cap=timedelta(seconds=30))
#: Between tries of one mark write within its budget: 50 ms doubling up to 1 s, +/- 50%.
MARK_RETRY: Final = RetryPause(base=timedelta(milliseconds=50), cap=timedelta(seconds=1))
#: Before re-opening a lost LISTEN connection: 100 ms doubling up to 5 s, +/- 50%.
LISTEN_RETRY: Final = RetryPause(base=timedelta(milliseconds=100), cap=timedelta(seconds=5))
