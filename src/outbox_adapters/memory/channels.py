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
from outbox_adapters.store_rules import RecipientRow
from outbox_core.messages import NewMessage

__all__ = ["MemoryParkLedger", "MemoryRecipientRows", "ParkEntry"]


class MemoryRecipientRows:
    """``lanes.row_channel.RecipientRowStore`` over the rows of one lane of a :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, *, lane: str) -> None:
        self.store = store
        self.lane = lane

    async def ensure(self, messages: Sequence[NewMessage]) -> dict[str, RecipientRow]:
        """Write each message unless a row with its key exists, then return every row by key.
        Each message carries this lane and a key (``ValueError`` otherwise, before any write)."""
        keys = []
        for message in messages:
            if message.lane != self.lane or not message.idempotency_key:
                raise ValueError(f"a recipient row needs lane {self.lane!r} and an idempotency key")
            keys.append(message.idempotency_key)
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


@attrs.frozen
class ParkEntry:
    """One parked kind of one event."""

    reason: str
    attempts: int


class MemoryParkLedger:
    """``lanes.consumer.ParkLedger`` in memory; ``available`` follows the store's, if given one."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store
        #: (channel, event id) -> kind -> what was recorded first.
        self.entries: dict[tuple[str, str], dict[str, ParkEntry]] = {}

    async def parked(self, channel: str, event_id: str) -> frozenset[str]:
        await asyncio.sleep(0)
        self._check("parked")
        return frozenset(self.entries.get((channel, event_id), {}))

    async def record(
        self, channel: str, event_id: str, kind: str, *, reason: str, attempts: int
    ) -> None:
        await asyncio.sleep(0)
        self._check("record")
        self.entries.setdefault((channel, event_id), {}).setdefault(
            kind, ParkEntry(reason, attempts)
        )

    def _check(self, doing: str) -> None:
        if self.store is not None:
            self.store._check_available(f"park ledger {doing}")  # noqa: SLF001 - same package
