"""The delivery state machine (ADR 0003), as one literal table.

Theory of operation
-------------------
A row is born ``pending``. A claim keeps it ``pending`` but counts an attempt and stamps a lease; the
claim is the *only* place attempts grow, so a row whose worker crashes after claiming still advances
toward ``failed``. The worker reports what happened and :func:`outbox_core.decide.decide` turns that
into one of four events: ``succeed`` (→ ``dispatched``), ``skip`` (→ ``skipped``), ``fail``
(→ ``failed``) or ``retry`` (stays ``pending`` with a later due time). ``dispatched`` and ``skipped``
are terminal: nothing leaves them, because their secret fields are scrubbed and because resending a
delivered message is the failure this library exists to prevent. ``failed`` is terminal for the
machine; only an operator's ``requeue`` takes it back to ``pending``, with attempts reset.

A move that is not in :data:`TRANSITIONS` is a table miss and raises :class:`IllegalTransition`.
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Final

import attrs

from outbox_core.errors import IllegalTransition, RequeueRefused

__all__ = [
    "SCRUBBED_ON_MARK",
    "TERMINAL",
    "TRANSITIONS",
    "Event",
    "RowState",
    "Status",
    "check_requeue",
    "step",
    "transition",
]


class Status(enum.StrEnum):
    """Where a row stands. The string values are what the SQL store writes."""

    PENDING = "pending"
    DISPATCHED = "dispatched"
    SKIPPED = "skipped"
    FAILED = "failed"


class Event(enum.StrEnum):
    """What can happen to a row."""

    CLAIM = "claim"
    SUCCEED = "succeed"
    SKIP = "skip"
    FAIL = "fail"
    RETRY = "retry"
    REQUEUE = "requeue"


#: The whole state machine. A (state, event) pair that is missing here is illegal.
TRANSITIONS: Final = MappingProxyType(
    {
        (Status.PENDING, Event.CLAIM): Status.PENDING,
        (Status.PENDING, Event.SUCCEED): Status.DISPATCHED,
        (Status.PENDING, Event.SKIP): Status.SKIPPED,
        (Status.PENDING, Event.FAIL): Status.FAILED,
        (Status.PENDING, Event.RETRY): Status.PENDING,
        (Status.FAILED, Event.REQUEUE): Status.PENDING,
    }
)

#: States no event leaves except an operator's requeue (``failed``) or nothing at all.
TERMINAL: Final = frozenset({Status.DISPATCHED, Status.SKIPPED, Status.FAILED})

#: The statuses whose mark scrubs the row's secret payload keys in the same write (the scrub):
#: the row was sent or there was nothing to send, so its links and tokens go and it can never be
#: requeued. A ``failed`` row keeps its whole payload so a requeue sends a complete message.
SCRUBBED_ON_MARK: Final = frozenset({Status.DISPATCHED, Status.SKIPPED})


def transition(state: Status, event: Event) -> Status:
    """The state after ``event``; raises :class:`IllegalTransition` on a table miss."""
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(state, event) from None


def _scrubbed_only_when_sent(inst: RowState, _attribute: object, scrubbed: bool) -> None:  # noqa: FBT001
    if scrubbed and inst.status not in SCRUBBED_ON_MARK:
        raise ValueError(f"only a dispatched or skipped row is scrubbed, not a {inst.status} one")


@attrs.frozen
class RowState:
    """The parts of a row the state machine governs."""

    #: Where the row stands.
    status: Status = Status.PENDING
    #: How many times the row has been claimed since it was born or last requeued.
    attempts: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    #: True once a dispatched/skipped mark removed the secret-bearing payload keys.
    scrubbed: bool = attrs.field(default=False, validator=_scrubbed_only_when_sent)


def step(state: RowState, event: Event) -> RowState:
    """Apply ``event`` to a whole row state: attempts and scrubbing follow the status change."""
    if event is Event.REQUEUE:
        check_requeue(state.status, scrubbed=state.scrubbed)
    status = transition(state.status, event)
    if event is Event.CLAIM:
        return attrs.evolve(state, attempts=state.attempts + 1)
    if event is Event.REQUEUE:
        return attrs.evolve(state, status=status, attempts=0)
    # Only pending rows get here, and the mark that makes one dispatched/skipped scrubs it.
    return attrs.evolve(state, status=status, scrubbed=status in SCRUBBED_ON_MARK)


def check_requeue(status: Status, *, scrubbed: bool) -> None:
    """Refuse a requeue that would resend a sent row or send one whose secrets were scrubbed.

    Only ``failed`` rows can be requeued, and a failed row keeps its whole payload (the scrub spares
    it), so a requeue sends a complete message. The refusal says why, in words an operator can act
    on.
    """
    if status in SCRUBBED_ON_MARK or scrubbed:
        raise RequeueRefused(
            f"the row is {status!s} and its secret fields (links, tokens, attachments) were "
            "scrubbed when it was marked, so it cannot be sent again; send a new message instead"
        )
    if status is not Status.FAILED:
        raise RequeueRefused(
            f"only failed rows can be requeued; this row is {status!s}"
            " and will be (or is being) sent without help"
        )
