"""The in-memory store's per-key claim for the event outbox (``MemoryStore(ordered_by=
event_key)``), the model of PostgreSQL's ``claim_forms.per_key_order`` (whose own tests are
tests/integration/test_event_claim_order.py): a key's later row waits while an earlier one waits
for its retry or was left out of the claim; other keys go on; without it, due order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from outbox_adapters.clock import FakeClock
from outbox_adapters.memory import MemoryStore
from outbox_adapters.memory.ordering import event_key
from outbox_adapters.postgres.events import RELAY_LANE, event_message, new_event
from outbox_core.delivery import Status
from outbox_core.messages import ClaimToken, Mark, NewMessage
from outbox_core.ports import ClaimRequest

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)


def _store(*keys: str, ordered: bool = True) -> tuple[MemoryStore, FakeClock, list[int]]:
    clock = FakeClock(T0)
    store = MemoryStore(clock, ordered_by=event_key if ordered else None)
    ids = []
    for n, key in enumerate(keys):
        event = new_event(key=key, type="order.placed", data={"n": n})
        ids.append(int(store.enqueue(event_message("orders", event)).row_id))
    return store, clock, ids


async def _claim(store: MemoryStore, limit: int = 10) -> list[int]:
    token = ClaimToken.from_entropy(bytes(16))
    rows = await store.claim_due(ClaimRequest(RELAY_LANE, limit, LEASE, token))
    return [int(row.id) for row in rows]


async def test_a_keys_later_row_waits_while_its_earlier_row_waits_for_a_retry() -> None:
    store, clock, (a1, b1, a2) = _store("a", "b", "a")
    token = ClaimToken.from_entropy(bytes(16))
    [first] = await store.claim_due(ClaimRequest(RELAY_LANE, 1, LEASE, token))
    retry = Mark.retry(first, "broker unavailable", delay=timedelta(seconds=30))
    await store.mark_if_pending(retry)
    assert await _claim(store) == [b1]  # a2 waits behind a1's retry; b goes on
    clock.advance(timedelta(seconds=31))
    assert await _claim(store) == [a1, a2]


async def test_a_claim_cut_off_by_its_limit_leaves_the_keys_later_rows_out() -> None:
    store, _, (a1, _a2, b1) = _store("a", "a", "b")
    assert await _claim(store, limit=1) == [a1]
    # a1 is now leased (pending, not due): the second "a" waits for it; b1 is free.
    assert await _claim(store) == [b1]


async def test_a_payload_without_a_key_is_a_key_of_its_own() -> None:
    store, _, (a1,) = _store("a")
    odd = int(store.enqueue(NewMessage(RELAY_LANE, {"not": "an event"})).row_id)
    assert await _claim(store) == [a1, odd]
    assert {row.status for row in store.rows()} == {Status.PENDING}


async def test_without_ordered_by_the_claim_is_due_order() -> None:
    store, _, (a1, a2) = _store("a", "a", ordered=False)
    assert await _claim(store, limit=1) == [a1]
    assert await _claim(store) == [a2]  # no per-key hold


async def test_a_claim_ahead_takes_the_rows_after_its_own_batch_only() -> None:
    """The model of the relay's claim ahead: rows leased by the named batch hold no key back;
    rows leased by another claim, or waiting for a retry, still do."""
    store, _, (a1, b1, a2, b2, c1, c2) = _store("a", "b", "a", "b", "c", "c")
    mine = ClaimToken.from_entropy(b"m" * 16)
    assert [int(r.id) for r in await store.claim_due(ClaimRequest(RELAY_LANE, 2, LEASE, mine))] == [
        a1,
        b1,
    ]
    assert await _claim(store, limit=1) == [c1]  # another claim holds c1
    assert await _claim(store) == []
    ahead = ClaimRequest(RELAY_LANE, 10, LEASE, ClaimToken.from_entropy(b"n" * 16), ahead_of=mine)
    assert [int(r.id) for r in await store.claim_due(ahead)] == [a2, b2]
    assert c2 not in {int(r.id) for r in store.rows() if r.claim_token is not None}


async def test_a_claim_ahead_waits_behind_a_retry_of_its_own_batch() -> None:
    store, _, (a1, a2, b1) = _store("a", "a", "b")
    mine = ClaimToken.from_entropy(b"m" * 16)
    [first] = await store.claim_due(ClaimRequest(RELAY_LANE, 1, LEASE, mine))
    assert int(first.id) == a1
    await store.mark_if_pending(Mark.retry(first, "broker down", delay=timedelta(seconds=30)))
    ahead = ClaimRequest(RELAY_LANE, 10, LEASE, ClaimToken.from_entropy(b"n" * 16), ahead_of=mine)
    assert [int(r.id) for r in await store.claim_due(ahead)] == [b1]
    assert a2 not in {int(r.id) for r in store.rows() if r.claim_token is not None}
