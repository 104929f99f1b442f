"""What an adapter reports after trying to send one row (the core decides what it means).

Adapters never retry and never pick a status: a mailer or webhook sender returns an
:class:`Outcome`, and :func:`outbox_core.decide.decide` turns it into a mark. Like h11's
``send_failed()``, the I/O shell *reports*; the core *decides*.

A message with several recipients can be accepted for some and refused for others (SMTP refuses
per recipient, at RCPT). Such an attempt's outcome says who got the message
(:attr:`Outcome.delivered_to`) and who was refused and why (:attr:`Outcome.refused`);
:func:`outbox_core.recipients.settle` turns that into the row's outcome, with the
:attr:`Outcome.progress` the mark records so no later attempt sends to a recipient twice.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any

import attrs

__all__ = ["Outcome", "OutcomeKind", "Refusal"]


class OutcomeKind(enum.StrEnum):
    SENT = "sent"
    SKIPPED = "skipped"
    PERMANENT = "permanent"
    TRANSIENT = "transient"
    #: Not attempted: a cap of ours held the send back (nothing reached the peer). The row is
    #: handed back with its attempt refunded, due again after ``retry_after``.
    DEFERRED = "deferred"


def _check(inst: Outcome, _attribute: object, _value: object) -> None:
    kind = inst.kind
    if kind is not OutcomeKind.SENT and not inst.reason:
        raise ValueError(f"a {kind} outcome needs a reason")
    if inst.retry_after is not None:
        if kind not in (OutcomeKind.TRANSIENT, OutcomeKind.DEFERRED):
            raise ValueError(
                f"retry_after only makes sense for a transient or deferred outcome, not {kind}"
            )
        if inst.retry_after < timedelta(0):
            raise ValueError(f"retry_after must not be negative, got {inst.retry_after!r}")
    if inst.disable_endpoint and kind is not OutcomeKind.PERMANENT:
        raise ValueError("only a permanent outcome can disable an endpoint")
    if inst.maybe_delivered and kind is not OutcomeKind.TRANSIENT:
        raise ValueError("maybe_delivered describes a transient failure only")
    if inst.delivered_to and kind is not OutcomeKind.SENT:
        raise ValueError(f"delivered_to describes a sent outcome only, not {kind}")
    if inst.recorded and kind is not OutcomeKind.SENT:
        raise ValueError(f"only a sent outcome can have been recorded by its handler, not {kind}")
    if inst.refused and kind in (OutcomeKind.SKIPPED, OutcomeKind.DEFERRED):
        raise ValueError(f"a {kind} outcome sent nothing, so nobody refused it")


def _refusals(value: object) -> tuple[Refusal, ...]:
    refusals = tuple(value) if isinstance(value, list | tuple) else value
    if not isinstance(refusals, tuple) or not all(isinstance(r, Refusal) for r in refusals):
        raise TypeError(f"refused must be a sequence of Refusal, got {value!r:.80}")
    return refusals


def _addresses(value: object) -> tuple[str, ...]:
    addresses = tuple(value) if isinstance(value, list | tuple) else value
    if not isinstance(addresses, tuple) or not all(isinstance(a, str) for a in addresses):
        raise TypeError(f"delivered_to must be a sequence of addresses, got {value!r:.80}")
    return addresses


def _progress(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise TypeError(f"progress must be a mapping of payload keys, got {value!r:.80}")
    return MappingProxyType(dict(value))


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
    # attrs runs every validator after every field is set: _check sees the fields below too.
    disable_endpoint: bool = attrs.field(default=False, validator=_check)
    #: The recipients this attempt delivered the message to, when some others were refused.
    delivered_to: tuple[str, ...] = attrs.field(default=(), converter=_addresses)
    #: The recipients the peer refused in this attempt, each with what its refusal means.
    refused: tuple[Refusal, ...] = attrs.field(default=(), converter=_refusals)
    #: Payload keys the mark writes into the row in the same fenced UPDATE (e.g. who already has
    #: the message), so a later attempt or a requeue knows what this attempt achieved.
    progress: Mapping[str, Any] | None = attrs.field(default=None, converter=_progress, hash=False)
    #: The handler already wrote the row's dispatched mark in its own transaction, fenced by the
    #: row's claim token (handler-owns-mark, e.g. the webhook fan-out): nothing is left to write.
    recorded: bool = False

    @classmethod
    def sent(
        cls, *, delivered_to: tuple[str, ...] = (), refused: tuple[Refusal, ...] = ()
    ) -> Outcome:
        """Sent; with ``delivered_to`` and ``refused`` when only some recipients accepted it."""
        return cls(OutcomeKind.SENT, delivered_to=delivered_to, refused=refused)

    @classmethod
    def recorded_by_handler(cls) -> Outcome:
        """Done, and the handler already recorded the row's dispatched mark itself, in its own
        transaction, fenced by the row's claim token (the webhook fan-out)."""
        return cls(OutcomeKind.SENT, recorded=True)

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

    @classmethod
    def deferred(cls, reason: str, *, retry_after: timedelta = timedelta(0)) -> Outcome:
        """Not attempted: a cap of ours (an endpoint's rate, ADR 0018) would not admit the send
        before the row's deadline, so nothing was sent. Not a failure: the row goes back with its
        attempt refunded, due again after ``retry_after`` (when the cap next admits), and never
        moves toward ``failed``."""
        return cls(OutcomeKind.DEFERRED, reason, retry_after=retry_after)

    def with_progress(self, progress: Mapping[str, Any] | None) -> Outcome:
        """This outcome, with payload keys for its mark to write (unchanged when ``None``)."""
        return self if progress is None else attrs.evolve(self, progress=progress)


@attrs.frozen
class Refusal:
    """One recipient the peer refused (an SMTP reply to RCPT), and what that refusal means."""

    #: The recipient's address, as it was sent.
    address: str
    #: The refusal, classified: transient (4xx: try this recipient again) or permanent (5xx).
    outcome: Outcome

    def __attrs_post_init__(self) -> None:
        if self.outcome.kind not in (OutcomeKind.TRANSIENT, OutcomeKind.PERMANENT):
            raise ValueError(f"a refusal is transient or permanent, not {self.outcome.kind}")
