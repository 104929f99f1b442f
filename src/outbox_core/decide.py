# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""decide(): what an attempt's outcome means for the row (ADR 0003).

Theory of operation
-------------------
Adapters *report* an :class:`~outbox_core.outcomes.Outcome`; the core *decides* (h11's
``send_failed()`` split). :func:`decide` is the one place a send result becomes a
:class:`~outbox_core.messages.Mark`, and it is a pure function: the jitter draw, the schedule
and the scrub rules are all arguments.

A retry mark carries its *delay* (``Mark.retry_delay``), not a due time: the store stamps
``now() + delay`` in its own clock when it writes the mark (the database's on PostgreSQL), as it
stamps the claim's lease, so every due time in a table comes from one clock and a worker whose wall
clock is off can't schedule a retry early or late. decide() therefore needs no ``now``.

A claimed row is ``pending`` by definition (a claim is the only way to hold one), so every decision
is made from ``pending``. The outcome picks an *event*, and the state table in
:mod:`outbox_core.delivery` picks the status, so decide() can never produce a move the table
doesn't allow:

==========================  ========  ============  ==============================================
outcome                     event     status        payload / timing
==========================  ========  ============  ==============================================
sent                        succeed   dispatched    secret keys scrubbed
skipped (nothing to send)   skip      skipped       secret keys scrubbed
permanent                   fail      failed        kept whole; never retried
transient                   retry     pending       kept whole; due ``wait`` (below) after the mark
transient, schedule spent   fail      failed        kept whole; "retries exhausted after N ..."
deferred (not attempted)    retry     pending       kept whole; due ``retry_after`` after the
                                                    mark; the attempt refunded (``Mark.refund``)
==========================  ========  ============  ==============================================

A deferred outcome is not a failed attempt: a cap of ours (an endpoint's rate, ADR 0018) held the
send back, so nothing reached the peer. It never consults the schedule, so it can never exhaust
it, and its mark refunds the claim's attempt and keeps the row's last error (what endpoint health
reads) as the last real attempt left it.

An outcome's :attr:`~outbox_core.outcomes.Outcome.progress` (payload keys recording what the
attempt achieved, such as the recipients who already have the message) goes into the mark as its
``payload_patch`` whatever the status, so a retry, a requeue after a failure, or an exhausted
schedule never forgets it.

``wait = max(backoff delay, min(Retry-After, retry_after_cap))``: a peer that asks for a longer
pause (HTTP 429/503 ``Retry-After``, RFC 9110 section 10.2.3) gets it, but never more than the cap,
so a hostile or confused peer can't park a row for days; a shorter ``Retry-After`` never makes us
retry sooner than the schedule.

Attempts are *not* counted here: the claim is the only place they grow, so ``row.attempts``
already includes the attempt being decided, and a worker that claims and crashes has still used one.

A dispatched or skipped mark scrubs *every* configured secret key, not only those the worker saw in
``row.payload``. The store removes keys from the *stored* payload (``payload - keys``, where an
absent key costs nothing), and the mark shouldn't depend on the worker's view of it matching
storage (a handler may decode a projection, or a later version may keep a field encrypted or
elsewhere): with the full set a configured secret can never survive a mark, and the mark is a
function of configuration alone, which is what the security promise is stated in.
"""

from __future__ import annotations

from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import attrs

from outbox_core.backoff import check_jitter
from outbox_core.delivery import Event, Status, transition
from outbox_core.messages import Mark
from outbox_core.outcomes import OutcomeKind

if TYPE_CHECKING:
    from outbox_core.backoff import Backoff
    from outbox_core.messages import ClaimedRow
    from outbox_core.outcomes import Outcome
    from outbox_core.scrub import ScrubRules

__all__ = ["DEFAULT_RETRY_AFTER_CAP", "decide", "event_for"]

#: The longest ``Retry-After`` honoured by default; a longer one is cut to this.
DEFAULT_RETRY_AFTER_CAP: Final = timedelta(hours=1)

#: The event a store applies when it writes a mark; every mark is applied to a pending row.
_EVENT_FOR_STATUS: Final = MappingProxyType(
    {
        Status.DISPATCHED: Event.SUCCEED,
        Status.SKIPPED: Event.SKIP,
        Status.FAILED: Event.FAIL,
        Status.PENDING: Event.RETRY,
    }
)


@attrs.frozen
class _Decision:
    """What to do, before the state table turns the event into a status."""

    event: Event
    reason: str | None = None
    retry_delay: timedelta | None = None
    scrub_keys: frozenset[str] = frozenset()


def decide(  # noqa: PLR0913 -- a sans-IO decision: the clock, the jitter draw and the policy are inputs
    row: ClaimedRow,
    outcome: Outcome,
    *,
    backoff: Backoff,
    scrub: ScrubRules,
    jitter: float,
    retry_after_cap: timedelta = DEFAULT_RETRY_AFTER_CAP,
) -> Mark:
    """The mark to record for ``row`` after an attempt ended with ``outcome``.

    ``jitter`` is the caller's draw in [0, 1] (checked on every call, not only when a retry needs
    it, so a bad draw shows up at once); ``retry_after_cap`` is the longest ``Retry-After``
    honoured. Raises :class:`ValueError` for any of them out of range.
    """
    check_jitter(jitter)
    if retry_after_cap < timedelta(0):
        raise ValueError(f"retry_after_cap must not be negative, got {retry_after_cap!r}")
    decision = _decision(
        row, outcome, backoff=backoff, scrub=scrub, jitter=jitter, cap=retry_after_cap
    )
    return Mark(
        row.id,
        row.token,
        transition(Status.PENDING, decision.event),
        decision.reason,
        retry_delay=decision.retry_delay,
        scrub_keys=decision.scrub_keys,
        # What the attempt achieved (e.g. who already has the message) is recorded whatever the
        # status: a retry, a failure that an operator may requeue, and the sent record alike.
        payload_patch=outcome.progress,
        # A 410 Gone disables the endpoint in the mark's own transaction (the store writes both).
        disable_endpoint=outcome.disable_endpoint,
        recorded=outcome.recorded,
        refund=outcome.kind is OutcomeKind.DEFERRED,
    )


def event_for(mark: Mark) -> Event:
    """The state-machine event ``mark`` applies to its (pending) row.

    ``transition(Status.PENDING, event_for(mark)) == mark.status`` for every mark decide() makes,
    so a store (or a fake) can apply a mark through :func:`outbox_core.delivery.step`.
    """
    return _EVENT_FOR_STATUS[mark.status]


def _decision(  # noqa: PLR0913 -- decide()'s inputs, passed through unchanged
    row: ClaimedRow,
    outcome: Outcome,
    *,
    backoff: Backoff,
    scrub: ScrubRules,
    jitter: float,
    cap: timedelta,
) -> _Decision:
    kind = outcome.kind
    if kind is OutcomeKind.SENT:
        return _Decision(Event.SUCCEED, scrub_keys=scrub.keys)
    if kind is OutcomeKind.SKIPPED:
        return _Decision(Event.SKIP, outcome.reason, scrub_keys=scrub.keys)
    if kind is OutcomeKind.DEFERRED:
        # Not attempted: no schedule is consulted (it can never be spent by a deferral).
        return _Decision(Event.RETRY, outcome.reason, retry_delay=outcome.retry_after)
    if kind is OutcomeKind.PERMANENT:
        # Retrying can't help (bad payload, invalid or suppressed recipient, SMTP 5xx): fail now
        # rather than ride the three-day e-mail schedule (EMAIL_BACKOFF) to the same end.
        return _Decision(Event.FAIL, outcome.reason)
    wait = backoff.delay(row.attempts, jitter=jitter)
    if wait is None:
        plural = "" if row.attempts == 1 else "s"
        return _Decision(
            Event.FAIL,
            f"retries exhausted after {row.attempts} attempt{plural}: {outcome.reason}",
        )
    if outcome.retry_after is not None:
        wait = max(wait, min(outcome.retry_after, cap))
    return _Decision(Event.RETRY, outcome.reason, retry_delay=wait)
