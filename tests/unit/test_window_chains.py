"""A window's rows of one key sent one after another (``LaneConfig.key_of``, the relay's).

The runtime groups a window's rows by the lane's ``key_of``: the rows of one key are sent by one
task, in claim order, each only after the one before it ended; the keys at the same time; a row
whose key is ``None`` alone. The handler here keeps no order of its own, so what it sees is the
runtime's doing. ``test_a_key_s_rows_are_never_in_flight_together_and_keep_claim_order`` is the
matrix's test for ``window-key-chain-ignored`` (tests/mutations/matrix.py).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.memory import MemoryStore
from outbox_adapters.runtime import Worker
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError
from outbox_core.messages import ClaimedRow, NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.timing import EmailTiming

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
#: Three keys' rows interleaved, and one row with no key.
KEYS = ["a", "b", "a", "c", "b", "a", None, "c"]


def key_of(row: ClaimedRow) -> str | None:
    payload = row.payload
    return payload.get("k") if isinstance(payload, dict) else None


class Recorder:
    """A handler that yields to the loop mid-send and records what was in flight."""

    def __init__(self) -> None:
        self.in_flight: dict[int, str | None] = {}
        self.started: list[int] = []
        self.overlaps: list[tuple[int, int]] = []
        self.most_at_once = 0

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        del budget
        key = key_of(row)
        row_id = int(row.id)
        if key is not None:
            self.overlaps += [(other, row_id) for other, k in self.in_flight.items() if k == key]
        self.in_flight[row_id] = key
        self.started.append(row_id)
        self.most_at_once = max(self.most_at_once, len(self.in_flight))
        for _ in range(3):
            await asyncio.sleep(0)
        del self.in_flight[row_id]
        return Outcome.sent()


def setup() -> tuple[MemoryStore, FakeClock, list[int]]:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    ids = [
        int(store.enqueue(NewMessage("email", {"k": k} if k else {"n": n})).row_id)
        for n, k in enumerate(KEYS)
    ]
    return store, clock, ids


def worker(store: MemoryStore, handler: Recorder, clock: FakeClock, **settings: object) -> Worker:
    config = email_lane(
        timing=EmailTiming(batch_size=len(KEYS)),
        poll_interval=0.01,
        rows_in_flight=len(KEYS),
        group_marks=True,
        **settings,
    )
    return Worker(store, handler, config, clock=clock, jitter=lambda: 0.5)


async def test_a_key_s_rows_are_never_in_flight_together_and_keep_claim_order() -> None:
    store, clock, ids = setup()
    handler = Recorder()
    report = await worker(store, handler, clock, key_of=key_of).run_once()
    assert report.dispatched == len(KEYS)
    assert handler.overlaps == []
    for key in ("a", "b", "c"):
        mine = [row_id for row_id, k in zip(ids, KEYS, strict=True) if k == key]
        assert [row_id for row_id in handler.started if row_id in mine] == mine
    # The keys (and the row with none) were on the wire at the same time: one per key at once.
    assert handler.most_at_once == 4
    assert {row.status for row in store.rows()} == {Status.DISPATCHED}


async def test_without_key_of_every_row_of_a_window_is_in_flight_at_once() -> None:
    store, clock, _ = setup()
    handler = Recorder()
    await worker(store, handler, clock).run_once()
    assert handler.most_at_once == len(KEYS)
    assert handler.overlaps  # the same key's rows overlapped: nothing ordered them


def test_key_of_needs_grouped_marks_and_a_function() -> None:
    with pytest.raises(ConfigurationError, match="key_of needs group_marks"):
        email_lane(rows_in_flight=4, key_of=key_of)
    with pytest.raises(ConfigurationError, match="key_of must be a function"):
        email_lane(rows_in_flight=4, group_marks=True, key_of="k")
