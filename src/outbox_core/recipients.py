"""Per-recipient rules of an e-mail row: suppression and partial acceptance (ADR 0015).

Theory of operation
-------------------
One row may name several recipients; SMTP accepts or refuses each at ``RCPT``, and the message
reaches exactly the accepted ones. Three rules follow, all decided here, over plain data:

* **Suppression is per recipient.** A suppressed recipient fails the whole row at once, before
  any SMTP traffic, with a reason naming every suppressed address
  (:func:`suppression_outcome`). The design record makes a suppressed recipient a permanent
  error; sending to the others would deliver a message the producer addressed to someone who
  asked not to get mail, and hide the fact in a sent row.
* **Nobody gets a message twice because somebody else was refused.** When some recipients are
  accepted and others refused, the accepted ones are recorded in the row's payload under
  :data:`DELIVERED_KEY` by the same fenced mark that records the outcome (:attr:`Outcome.progress`),
  and every later attempt (a retry, or an operator's requeue) sends only to the recipients not
  recorded there (:func:`still_to_send`).
* **4xx refusals are retried, 5xx refusals fail the row.** :func:`settle` makes one attempt's
  per-recipient results the row's outcome: any transient refusal keeps the row pending (those
  recipients are tried again; a permanently refused one rides along and is refused again, which
  delivers nothing); otherwise a permanent refusal fails the row, with the refused addresses and
  the server's words in the reason, so ``outbox failed`` shows them.

A crash after the server accepted the message and before the mark is still the one duplicate per
crash of the lease model: the progress is written by the mark, or not at all.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from outbox_core.outcomes import Outcome, OutcomeKind, Refusal

__all__ = ["DELIVERED_KEY", "delivered_before", "settle", "still_to_send", "suppression_outcome"]

#: The payload key that lists the recipients who already have the message (written by marks).
DELIVERED_KEY: Final = "outbox_delivered_to"
#: The longest reason these rules write (it is stored as the row's last error and logged).
MAX_REASON: Final = 500


def _capped(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1].rstrip() + "…"


def delivered_before(payload: Mapping[str, Any]) -> frozenset[str]:
    """The recipients an earlier attempt of this row delivered to (none if the key is absent or
    not a list: a producer can't make the worker skip a recipient by writing garbage there)."""
    value = payload.get(DELIVERED_KEY)
    if not isinstance(value, list):
        return frozenset()
    return frozenset(item for item in value if isinstance(item, str))


def still_to_send(recipients: Sequence[str], payload: Mapping[str, Any]) -> tuple[str, ...]:
    """``recipients`` without those an earlier attempt delivered to, in their order."""
    done = delivered_before(payload)
    return tuple(address for address in recipients if address not in done)


def suppression_outcome(recipients: Sequence[str], suppressed: Collection[str]) -> Outcome | None:
    """A permanent failure naming every suppressed recipient, or ``None`` if none is.

    Checked per recipient: one suppressed recipient among several fails the row. Addresses are
    compared without regard to case (suppression lists rarely keep the case a producer wrote).
    """
    blocked = {address.casefold() for address in suppressed}
    named = [address for address in recipients if address.casefold() in blocked]
    if not named:
        return None
    if len(named) == 1:
        return Outcome.permanent(f"recipient {named[0]} is suppressed")
    return Outcome.permanent(_capped(f"recipients {', '.join(named)} are suppressed"))


def _refusals(refusals: Sequence[Refusal]) -> str:
    if len(refusals) == 1:
        return f"recipient {refusals[0].address} refused: {refusals[0].outcome.reason}"
    listed = "; ".join(f"{r.address}: {r.outcome.reason}" for r in refusals)
    return f"{len(refusals)} recipients refused: {listed}"


def settle(attempt: Outcome, *, delivered_before: Collection[str]) -> Outcome:
    """The row's outcome after an attempt whose recipients may have fared differently.

    An attempt without refusals is the row's outcome as it is. Otherwise the accepted recipients
    (``attempt.delivered_to``, added to ``delivered_before``) become the outcome's
    :attr:`~Outcome.progress`, and the refusals decide: any transient one → transient (the row is
    retried for the recipients still to send), else → permanent (the row fails, naming them).
    """
    refused = attempt.refused
    if not refused:
        return attempt
    progress = None
    if attempt.delivered_to:
        done = sorted({*delivered_before, *attempt.delivered_to})
        progress = {DELIVERED_KEY: done}
    delivered = len(attempt.delivered_to)
    total = delivered + len(refused)
    said = ""
    if total > 1:
        said = f"delivered to {delivered} of {total}" if delivered else f"none of {total} delivered"
    transient = [r for r in refused if r.outcome.kind is OutcomeKind.TRANSIENT]
    if transient:
        retried = "the rest are retried" if delivered else "retried"
        reason = _capped(f"{_refusals(refused)} ({'; '.join(filter(None, (said, retried)))})")
        return Outcome.transient(reason).with_progress(progress)
    reason = _capped(f"{_refusals(refused)} ({said})" if said else _refusals(refused))
    return Outcome.permanent(reason).with_progress(progress)
