"""What an adapter reports after trying to send one row (the core decides what it means).

Adapters never retry and never pick a status: a mailer or webhook sender returns an
:class:`Outcome`, and :func:`outbox_core.decide.decide` turns it into a mark. Like h11's
``send_failed()``, the I/O shell *reports*; the core *decides*.
"""

from __future__ import annotations

import enum
from datetime import timedelta

import attrs

__all__ = ["Outcome", "OutcomeKind"]


class OutcomeKind(enum.StrEnum):
    SENT = "sent"
    SKIPPED = "skipped"
    PERMANENT = "permanent"
    TRANSIENT = "transient"


def _check(inst: Outcome, _attribute: object, _value: object) -> None:
    kind = inst.kind
    if kind is not OutcomeKind.SENT and not inst.reason:
        raise ValueError(f"a {kind} outcome needs a reason")
    if inst.retry_after is not None:
        if kind is not OutcomeKind.TRANSIENT:
            raise ValueError(f"retry_after only makes sense for a transient outcome, not {kind}")
        if inst.retry_after < timedelta(0):
            raise ValueError(f"retry_after must not be negative, got {inst.retry_after!r}")
    if inst.disable_endpoint and kind is not OutcomeKind.PERMANENT:
        raise ValueError("only a permanent outcome can disable an endpoint")
    if inst.maybe_delivered and kind is not OutcomeKind.TRANSIENT:
        raise ValueError("maybe_delivered describes a transient failure only")


@attrs.frozen
class Outcome:
    """The result of one attempt. Build it with the named constructors."""

    #: What happened.
    kind: OutcomeKind
    #: Why, in words safe to store and log (never a payload value, URL token or secret).
    reason: str = ""
    #: The peer asked us to wait at least this long (HTTP ``Retry-After``).
    retry_after: timedelta | None = None
    #: The peer may have processed the message before the failure (a retry may duplicate it).
    maybe_delivered: bool = False
    #: The endpoint told us it is gone for good (HTTP 410): stop sending to it.
    disable_endpoint: bool = attrs.field(default=False, validator=_check)

    @classmethod
    def sent(cls) -> Outcome:
        return cls(OutcomeKind.SENT)

    @classmethod
    def skipped(cls, reason: str) -> Outcome:
        """The handler decided there is nothing to send (e.g. the recipient opted out)."""
        return cls(OutcomeKind.SKIPPED, reason)

    @classmethod
    def permanent(cls, reason: str, *, disable_endpoint: bool = False) -> Outcome:
        """Retrying cannot help: bad payload, invalid or suppressed recipient, SMTP 5xx, ..."""
        return cls(OutcomeKind.PERMANENT, reason, disable_endpoint=disable_endpoint)

    @classmethod
    def transient(
        cls,
        reason: str,
        *,
        retry_after: timedelta | None = None,
        maybe_delivered: bool = False,
    ) -> Outcome:
        """It may work later: SMTP 4xx, a timeout, a refused connection, HTTP 5xx or 429, ..."""
        return cls(
            OutcomeKind.TRANSIENT,
            reason,
            retry_after=retry_after,
            maybe_delivered=maybe_delivered,
        )
