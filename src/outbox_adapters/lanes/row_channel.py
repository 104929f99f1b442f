"""A channel whose recipients are rows of a lane (ADR 0021): the e-mail channel, and any host
channel that sends through a lane of its own (SMS, push, ...).

For each event, the channel asks its ``recipients`` function for one :class:`Recipient` per kind:
a message for the lane, or a refusal (an invalid address: terminal, parked with the reason). Its
row store writes every message with the idempotency key ``"{event_id}:{kind}"``
(:func:`recipient_key`), insert-or-nothing, all of an event's rows or none (on PostgreSQL one
statement), and learns each row's state: a row it created is pending and due now, a row that was
there already is read back (an event's first delivery writes at once; a recheck reads first and
writes nothing when every row is there):

=================  ==========================================================================
row                the recipient is
=================  ==========================================================================
``dispatched``     sent (terminal)
``skipped``        done (terminal)
``failed``         parked: the raw event goes to the DLQ with the kind, the row's last error and
                   its attempts (terminal)
``pending``        in progress: the lane's ``Worker`` sends it, retries it on the lane's backoff
                   (the attempts are the row's, so they carry across redeliveries) and, when its
                   worker crashed, claims it again once the lease runs out
=================  ==========================================================================

A redelivered event finds its rows (the key exists: nothing new is written). The channel remembers
what it rendered for the events it is waiting on (:data:`REMEMBERED` at most, dropped once an
event is terminal), so a recheck in the same process reads the rows back without building its
recipients' messages again; another process, or one that forgot, builds them anew, and the
insert-or-nothing makes that the same. A failed row whose
park ``outbox dlq redrive`` lifted is put back to pending once, audited
(:meth:`RecipientRowStore.rearm`), so a redrive sends what failed. The channel never
sends anything itself: every guarantee of the lane's handler (for e-mail: strict TLS, scrub,
suppression, fenced marks) applies because the row is sent by that lane's runtime.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Final, Protocol

import attrs

from outbox_adapters.lanes.consumer import Parked, Settlement
from outbox_adapters.postgres.channels import RecipientRow
from outbox_core.backoff import doubling
from outbox_core.delivery import Status
from outbox_core.events import EventEnvelope
from outbox_core.messages import NewMessage
from outbox_core.ports import ReceivedMessage

__all__ = [
    "RECHECK",
    "RECHECK_CAP",
    "REMEMBERED",
    "Recipient",
    "RecipientRowStore",
    "RowChannel",
    "recipient_key",
]

#: How soon an event is looked at again after its first delivery while a row is due or being
#: sent; each later delivery waits twice as long (``outbox_core.backoff.doubling``): 0.25 s, 0.5 s,
#: 1 s, ... up to :data:`RECHECK_CAP`. The e-mail lane usually sends a new row within the first.
RECHECK: Final = timedelta(seconds=0.25)
#: The longest a nak'd event waits before it is looked at again.
RECHECK_CAP: Final = timedelta(seconds=30)
#: Events in progress whose rendered recipients a channel keeps for their rechecks (the oldest
#: are forgotten first; a forgotten event's recipients are built again on its next delivery).
REMEMBERED: Final = 1024


class RecipientRowStore(Protocol):
    """Where a channel writes its per-recipient rows (``postgres.channels.RecipientRows``; in
    memory, ``memory.channels.MemoryRecipientRows``): insert-or-nothing on (lane, idempotency key),
    then every row's state by key, in one step."""

    @property
    def lane(self) -> str: ...

    async def ensure(
        self, messages: Sequence[NewMessage], *, new: bool = False
    ) -> dict[str, RecipientRow]:
        """Insert-or-nothing, then every row by key; ``new``: the event's first delivery to this
        channel (the rows are most likely not there yet: a store may skip looking first)."""
        ...

    async def rearm(self, channel: str, event_id: str) -> frozenset[str]:
        """Put back to pending the failed rows of ``event_id`` whose park an operator lifted
        (``outbox dlq redrive``), audited, and drop those parks; the kinds re-armed."""
        ...


def recipient_key(event_id: str, kind: str) -> str:
    """The per-recipient idempotency key: one row per (event, kind)."""
    return f"{event_id}:{kind}"


@attrs.frozen
class Recipient:
    """One recipient kind of an event: the row to write, or why there is none."""

    kind: str
    message: NewMessage | None = None
    #: Set when the recipient is refused before any row is written (terminal, parked).
    refusal: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.message is None) == (self.refusal is None):
            raise ValueError("a Recipient has a message or a refusal, not both and not neither")


#: ``recipients(event)``: the event's recipients (empty: the channel has nothing to do with it).
Recipients = Callable[[EventEnvelope], Sequence[Recipient]]


class RowChannel:
    """``lanes.consumer.Channel`` over per-recipient rows of one lane. See the module docstring."""

    def __init__(
        self,
        name: str,
        rows: RecipientRowStore,
        recipients: Recipients,
        *,
        recheck: timedelta = RECHECK,
        recheck_cap: timedelta = RECHECK_CAP,
    ) -> None:
        self._name = name
        self.rows = rows
        self.recipients = recipients
        self.recheck = recheck
        self.recheck_cap = recheck_cap
        #: Whether ``rows.ensure`` takes ``new`` (a row store written before it joined the
        #: protocol is called as before).
        self._tells_new = "new" in inspect.signature(rows.ensure).parameters
        #: The rendered recipients of the events in progress, by event id (oldest first).
        self._rendered: OrderedDict[str, tuple[dict[str, NewMessage], tuple[Parked, ...]]] = (
            OrderedDict()
        )

    @property
    def name(self) -> str:
        return self._name

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
        # A first delivery this process has not rendered before: its rows are most likely new.
        new = message.deliveries <= 1 and event.id not in self._rendered
        messages, refused = self._recipients_of(event)
        parked = list(refused)
        rows = await self._ensure(list(messages.values()), new=new) if messages else {}
        if any(row.status is Status.FAILED for row in rows.values()) and await self._rearm(event):
            # A redriven event: the rows whose park was lifted are pending again; read them back.
            rows = await self._ensure(list(messages.values()), new=False)
        waits: list[timedelta] = []
        for kind, written in messages.items():
            row = rows.get(str(written.idempotency_key))
            if row is None:  # pragma: no cover - the store answers every key it was given
                waits.append(timedelta(0))
                continue
            if row.status is Status.FAILED:
                parked.append(Parked(kind, _reason(row), attempts=row.attempts))
            elif row.status is Status.PENDING:
                waits.append(row.wait)
        if not waits:
            self._rendered.pop(event.id, None)
            return Settlement.done(*parked)
        recheck = doubling(max(message.deliveries, 1), first=self.recheck, cap=self.recheck_cap)
        return Settlement.later(min(min(waits) + recheck, self.recheck_cap), *parked)

    async def _ensure(self, messages: list[NewMessage], *, new: bool) -> dict[str, RecipientRow]:
        if self._tells_new:
            return await self.rows.ensure(messages, new=new)
        return await self.rows.ensure(messages)

    def _recipients_of(
        self, event: EventEnvelope
    ) -> tuple[dict[str, NewMessage], tuple[Parked, ...]]:
        """The event's row messages by kind (each with its per-recipient key) and its refused
        kinds: remembered from an earlier delivery of the event, else built by ``recipients``."""
        remembered = self._rendered.get(event.id)
        if remembered is not None:
            self._rendered.move_to_end(event.id)
            return remembered
        refused: list[Parked] = []
        messages: dict[str, NewMessage] = {}
        for recipient in self.recipients(event):
            if recipient.message is None:
                refused.append(Parked(recipient.kind, str(recipient.refusal), attempts=0))
                continue
            key = recipient_key(event.id, recipient.kind)
            messages[recipient.kind] = attrs.evolve(recipient.message, idempotency_key=key)
        made = (messages, tuple(refused))
        self._rendered[event.id] = made
        while len(self._rendered) > REMEMBERED:
            self._rendered.popitem(last=False)
        return made

    async def _rearm(self, event: EventEnvelope) -> frozenset[str]:
        # A row store written before ``rearm`` joined the protocol cannot re-arm: nothing to do.
        rearm = getattr(self.rows, "rearm", None)
        return frozenset() if rearm is None else frozenset(await rearm(self.name, event.id))


def _reason(row: RecipientRow) -> str:
    return row.last_error or "failed"
