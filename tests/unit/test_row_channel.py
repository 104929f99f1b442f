"""A row channel's rechecks (ADR 0021): an event looked at again while its recipients are being sent
is settled from its rows without its recipients' messages being built again; an event the channel
does not remember (another process, settled, or forgotten past the bound) is built anew, and the
insert-or-nothing keeps its rows one per kind."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import cast

import attrs
import pytest

from outbox_adapters.lanes import row_channel
from outbox_adapters.lanes.row_channel import Recipient, RowChannel
from outbox_adapters.memory import MemoryStore
from outbox_adapters.memory.channels import MemoryRecipientRows
from outbox_adapters.postgres.channels import RecipientRow
from outbox_core.delivery import Status
from outbox_core.events import EventEnvelope
from outbox_core.messages import ClaimToken, Mark, NewMessage
from outbox_core.ports import ClaimRequest, ReceivedMessage

LANE = "sms"
T = datetime(2031, 1, 1, tzinfo=UTC)


@attrs.frozen
class _Delivery:
    """What a channel reads of a broker delivery: how many times it was delivered."""

    deliveries: int


def Delivery(deliveries: int) -> ReceivedMessage:  # noqa: N802 - reads as the record it makes
    return cast("ReceivedMessage", _Delivery(deliveries))


class Counted:
    """Two recipients per event; counts how often they are built."""

    def __init__(self) -> None:
        self.built: list[str] = []

    def __call__(self, event: EventEnvelope) -> list[Recipient]:
        self.built.append(event.id)
        return [
            Recipient("admin", message=NewMessage(LANE, {"to": "+100"})),
            Recipient("legal", refusal="no legal number configured"),
        ]


def event(n: int) -> EventEnvelope:
    return EventEnvelope(id=f"evt-{n}", type="t.x", source="app", key="k", time=T, data={})


async def send_all(store: MemoryStore) -> None:
    """The lane's worker, by hand: every due row claimed and marked sent."""
    token = ClaimToken.from_entropy(secrets.token_bytes(16))
    for row in await store.claim_due(ClaimRequest(LANE, 100, timedelta(minutes=1), token)):
        await store.mark_if_pending(Mark(row.id, row.token, Status.DISPATCHED))


async def test_a_recheck_settles_from_the_rows_without_building_the_recipients_again() -> None:
    store = MemoryStore()
    recipients = Counted()
    channel = RowChannel("host-sms", MemoryRecipientRows(store, lane=LANE), recipients)

    first = await channel.deliver(event(1), Delivery(1))
    assert not first.terminal
    assert [p.kind for p in first.parked] == ["legal"]
    again = await channel.deliver(event(1), Delivery(2))
    assert not again.terminal
    assert [p.kind for p in again.parked] == ["legal"]  # the refusal is remembered too
    assert recipients.built == ["evt-1"]

    await send_all(store)
    done = await channel.deliver(event(1), Delivery(3))
    assert done.terminal
    assert recipients.built == ["evt-1"]
    # Settled, so forgotten: a later copy (its ack lost) is built again and finds its row sent.
    late = await channel.deliver(event(1), Delivery(4))
    assert late.terminal
    assert recipients.built == ["evt-1", "evt-1"]
    assert len(store.rows_by_key(LANE, ["evt-1:admin"])) == 1


async def test_another_channel_builds_the_recipients_anew_and_writes_no_second_row() -> None:
    store = MemoryStore()
    rows = MemoryRecipientRows(store, lane=LANE)
    first, second = Counted(), Counted()
    await RowChannel("host-sms", rows, first).deliver(event(1), Delivery(1))
    settled = await RowChannel("host-sms", rows, second).deliver(event(1), Delivery(2))
    assert not settled.terminal
    assert (first.built, second.built) == (["evt-1"], ["evt-1"])
    assert len(store.rows(LANE)) == 1


async def test_the_events_remembered_are_bounded_the_oldest_forgotten_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(row_channel, "REMEMBERED", 2)
    recipients = Counted()
    channel = RowChannel("host-sms", MemoryRecipientRows(MemoryStore(), lane=LANE), recipients)
    for n in (1, 2, 3):
        await channel.deliver(event(n), Delivery(1))
    for n in (3, 2, 1):
        await channel.deliver(event(n), Delivery(2))
    assert recipients.built == ["evt-1", "evt-2", "evt-3", "evt-1"]


class Recording(MemoryRecipientRows):
    """The memory rows, recording what each ``ensure`` was told about the event."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, lane=LANE)
        self.told: list[bool] = []

    async def ensure(
        self, messages: Sequence[NewMessage], *, new: bool = False
    ) -> dict[str, RecipientRow]:
        self.told.append(new)
        return await super().ensure(messages, new=new)


async def test_only_a_first_delivery_the_channel_has_not_rendered_is_written_as_new() -> None:
    """The store may skip looking for the rows of a new event; a recheck, a redelivery after a
    restart and an event this process rendered before are never new."""
    rows = Recording(MemoryStore())
    channel = RowChannel("host-sms", rows, Counted())
    await channel.deliver(event(1), Delivery(1))  # first sight
    await channel.deliver(event(1), Delivery(2))  # the recheck
    await channel.deliver(event(2), Delivery(3))  # redelivered to a fresh process
    await channel.deliver(event(1), Delivery(1))  # delivered once more, still remembered
    assert rows.told == [True, False, False, False]


class Older(MemoryRecipientRows):
    """A row store written before ``ensure`` took ``new``."""

    async def ensure(self, messages: Sequence[NewMessage]) -> dict[str, RecipientRow]:  # type: ignore[override]
        return await super().ensure(messages)


async def test_a_row_store_whose_ensure_takes_no_new_is_called_as_before() -> None:
    store = MemoryStore()
    older = Older(store, lane=LANE)
    channel = RowChannel("host-sms", older, Counted())  # type: ignore[arg-type]  # the old protocol
    assert not (await channel.deliver(event(1), Delivery(1))).terminal
    await send_all(store)
    assert (await channel.deliver(event(1), Delivery(2))).terminal
