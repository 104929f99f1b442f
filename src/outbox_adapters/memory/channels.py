"""The consumer channels' PostgreSQL parts in memory (ADR 0021), for tests and the simulator.

- :class:`MemoryRecipientRows` is ``postgres.channels.RecipientRows`` over a :class:`MemoryStore`:
  each message is written through the store's one ``enqueue`` (insert-or-nothing on the lane's
  idempotency key), then every row is read back with its state, in one step (no ``await`` between
  the writes and the read, as one transaction on PostgreSQL). The rows are the store's own, so the
  lane's ``Worker`` on that store sends them.
- :class:`MemoryParkLedger` is ``postgres.channels.PostgresParkLedger``: which kinds of which event
  a channel parked, insert-or-nothing on (channel, event, kind).

Both raise :class:`~outbox_core.errors.StoreUnavailable` while the store is unavailable, as the
PostgreSQL ones do when the database can't be reached. ``tests/contract`` runs the same cases
against both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import attrs

from outbox_adapters.memory.store import MemoryStore
from outbox_adapters.store_rules import RecipientRow, payload_json
from outbox_core.delivery import Status
from outbox_core.messages import NewMessage

__all__ = ["MemoryParkLedger", "MemoryRecipientRows", "ParkEntry"]


class MemoryRecipientRows:
    """``lanes.row_channel.RecipientRowStore`` over the rows of one lane of a :class:`MemoryStore`."""

    def __init__(
        self, store: MemoryStore, *, lane: str, ledger: MemoryParkLedger | None = None
    ) -> None:
        self.store = store
        self.lane = lane
        #: The parks :meth:`rearm` reads (PostgreSQL's rows and ledger share one database).
        self.ledger = ledger

    async def ensure(
        self, messages: Sequence[NewMessage], *, new: bool = False
    ) -> dict[str, RecipientRow]:
        """Write each message unless a row with its key exists, then return every row by key.
        Each message carries this lane and a key (``ValueError`` otherwise, before any write) and
        a payload the enqueue accepts (``InvalidPayload`` otherwise, before any write).
        ``new`` (the event's first delivery) changes nothing here: the store's write is
        insert-or-nothing and reading costs nothing."""
        del new
        keys = []
        for message in messages:
            if message.lane != self.lane or not message.idempotency_key:
                raise ValueError(f"a recipient row needs lane {self.lane!r} and an idempotency key")
            keys.append(message.idempotency_key)
            payload_json(message.payload)  # as PostgreSQL's one statement: all rows or none
        await asyncio.sleep(0)
        for message in messages:
            self.store.enqueue(message)  # raises StoreUnavailable in an outage, before writing
        now = self.store._clock.now()  # noqa: SLF001 - the store's own package
        found = {}
        for key, row in self.store.rows_by_key(self.lane, keys).items():
            # As PostgreSQL: 0 while a claim is on the row or it is due, else until it is due.
            waiting = row.next_attempt_at - now if row.claim_token is None else timedelta(0)
            found[key] = RecipientRow(
                key=key,
                status=row.status,
                attempts=row.attempts,
                last_error=row.last_error,
                wait=max(waiting, timedelta(0)),
            )
        return found

    async def rearm(self, channel: str, event_id: str) -> frozenset[str]:
        """``postgres.channels.RecipientRows.rearm``: the failed rows of the kinds whose park was
        lifted go back to pending (audited), and those parks are dropped, in one step."""
        await asyncio.sleep(0)
        if self.ledger is None:
            return frozenset()
        self.store._check_available("rearm")  # noqa: SLF001 - the store's own package
        lifted = self.ledger.lift(channel, event_id)
        keys = {f"{event_id}:{kind}": entry for kind, entry in lifted.items()}
        rearmed = set()
        for key, row in self.store.rows_by_key(self.lane, list(keys)).items():
            if row.status is Status.FAILED:
                entry = keys[key]
                why = "dlq redrive" + (f": {entry.redrive_reason}" if entry.redrive_reason else "")
                self.store._requeue(row, entry.redriven_by or "outbox dlq redrive", why)  # noqa: SLF001
                rearmed.add(key.rpartition(":")[2])
        return frozenset(rearmed)


@attrs.frozen
class ParkEntry:
    """One parked kind of one event; ``redriven_by`` set once ``outbox dlq redrive`` lifted it."""

    reason: str
    attempts: int
    redriven_by: str | None = None
    redrive_reason: str | None = None


class MemoryParkLedger:
    """``lanes.consumer.ParkLedger`` in memory; ``available`` follows the store's, if given one."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store
        #: (channel, event id) -> kind -> what was recorded first.
        self.entries: dict[tuple[str, str], dict[str, ParkEntry]] = {}

    async def parked(self, channel: str, event_id: str) -> frozenset[str]:
        await asyncio.sleep(0)
        self._check("parked")
        entries = self.entries.get((channel, event_id), {})
        return frozenset(kind for kind, entry in entries.items() if entry.redriven_by is None)

    async def record(
        self, channel: str, event_id: str, kind: str, *, reason: str, attempts: int
    ) -> None:
        await asyncio.sleep(0)
        self._check("record")
        entries = self.entries.setdefault((channel, event_id), {})
        if kind not in entries or entries[kind].redriven_by is not None:
            entries[kind] = ParkEntry(reason, attempts)

    async def redriven(
        self, event_ids: Sequence[str], *, actor: str, reason: str | None = None
    ) -> int:
        """Lift the parks of ``event_ids`` in every channel; how many were lifted."""
        await asyncio.sleep(0)
        self._check("redriven")
        lifted = 0
        for (_, event_id), entries in self.entries.items():
            if event_id not in event_ids:
                continue
            for kind, entry in entries.items():
                if entry.redriven_by is None:
                    entries[kind] = attrs.evolve(entry, redriven_by=actor, redrive_reason=reason)
                    lifted += 1
        return lifted

    def lift(self, channel: str, event_id: str) -> dict[str, ParkEntry]:
        """Remove and return the lifted parks of ``event_id`` in ``channel``."""
        entries = self.entries.get((channel, event_id), {})
        lifted = {kind: e for kind, e in entries.items() if e.redriven_by is not None}
        for kind in lifted:
            del entries[kind]
        return lifted

    def _check(self, doing: str) -> None:
        if self.store is not None:
            self.store._check_available(f"park ledger {doing}")  # noqa: SLF001 - same package
