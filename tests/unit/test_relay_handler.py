"""The relay's handler without a database (ADR 0020): a row becomes the CloudEvents broker message;
within one claimed batch a key whose row did not go out holds its later rows back; a permanent
failure does not; rows of one key are published one at a time, in order, even with several rows
in flight; a row that is not an event is refused with the reason."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from outbox_adapters.lanes.relay import EARLIER_UNPUBLISHED, RelayHandler, relay_message
from outbox_adapters.memory import MemoryBroker
from outbox_core.errors import InvalidPayload
from outbox_core.events import EventEnvelope
from outbox_core.messages import ClaimedRow, ClaimToken
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import BrokerMessage

T = datetime(2031, 1, 1, tzinfo=UTC)
BUDGET = timedelta(seconds=5)
TOKEN = ClaimToken("a" * 32)


def row(n: int, key: str, *, token: ClaimToken = TOKEN, payload: Any = None) -> ClaimedRow:
    if payload is None:
        event = EventEnvelope(id=f"evt-{n}", type="t.x", source="app", key=key, time=T, data={})
        payload = {**event.to_json(), "topic": "platform-events"}
    return ClaimedRow(n, "events", payload, 1, token, T + timedelta(minutes=9), T)


class Scripted:
    """A publisher answering from a script per message id (default: sent), recording the order."""

    def __init__(self, **answers: Outcome | type[BaseException]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        #: ("asked" | "answered", message id), in the order they happened.
        self.timeline: list[tuple[str, str]] = []

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        del budget
        self.asked.append(message.message_id)
        self.timeline.append(("asked", message.message_id))
        await asyncio.sleep(0.01)
        self.timeline.append(("answered", message.message_id))
        answer = self.answers.get(message.message_id.replace("-", "_"), Outcome.sent())
        if isinstance(answer, type):
            raise answer
        return answer


async def test_a_key_that_failed_in_the_batch_holds_its_later_rows_back() -> None:
    publisher = Scripted(evt_1=Outcome.transient("broker unavailable"))
    handler = RelayHandler(publisher)
    outcomes = [await handler(r, budget=BUDGET) for r in (row(1, "a"), row(2, "b"), row(3, "a"))]
    assert [o.kind for o in outcomes] == ["transient", "sent", "transient"]
    assert outcomes[2].reason == EARLIER_UNPUBLISHED
    assert publisher.asked == ["evt-1", "evt-2"]  # evt-3 never offered to the broker
    # The next claim (a new token) starts afresh.
    again = await handler(row(1, "a", token=ClaimToken("b" * 32)), budget=BUDGET)
    assert again.kind == OutcomeKind.TRANSIENT  # scripted to fail again, but it was offered
    assert publisher.asked == ["evt-1", "evt-2", "evt-1"]


async def test_a_permanent_failure_does_not_hold_its_key_back() -> None:
    publisher = Scripted(evt_1=Outcome.permanent("message too large for the stream"))
    handler = RelayHandler(publisher)
    first = await handler(row(1, "a"), budget=BUDGET)
    second = await handler(row(2, "a"), budget=BUDGET)
    assert (first.kind, second.kind) == ("permanent", "sent")


async def test_a_publish_that_raises_or_is_cut_off_holds_its_key_back() -> None:
    handler = RelayHandler(Scripted(evt_1=ConnectionResetError))
    with pytest.raises(ConnectionResetError):
        await handler(row(1, "a"), budget=BUDGET)
    assert (await handler(row(2, "a"), budget=BUDGET)).reason == EARLIER_UNPUBLISHED


async def test_rows_of_one_key_in_flight_together_are_published_in_order() -> None:
    publisher = Scripted()
    handler = RelayHandler(publisher)
    rows = [row(n, "a" if n % 2 else "b") for n in range(1, 9)]
    await asyncio.gather(*(handler(r, budget=BUDGET) for r in rows))
    assert [i for i in publisher.asked if int(i[4:]) % 2] == ["evt-1", "evt-3", "evt-5", "evt-7"]
    assert [i for i in publisher.asked if not int(i[4:]) % 2] == [
        "evt-2",
        "evt-4",
        "evt-6",
        "evt-8",
    ]
    # Each was offered only once its key's previous one was answered; the keys overlapped.
    for key_rows in (rows[0::2], rows[1::2]):
        ids = [f"evt-{r.id}" for r in key_rows]
        for earlier, later in itertools.pairwise(ids):
            answered = publisher.timeline.index(("answered", earlier))
            assert publisher.timeline.index(("asked", later)) > answered
    assert publisher.timeline[:2] == [("asked", "evt-1"), ("asked", "evt-2")]


async def test_the_memory_broker_stores_what_the_handler_sent() -> None:
    broker = MemoryBroker()
    assert (await RelayHandler(broker.publisher())(row(1, "a"), budget=BUDGET)).kind == "sent"
    (stored,) = broker.messages
    assert (stored.subject, stored.key, stored.message_id) == ("platform-events", "a", "evt-1")


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ("[1, 2]", "the stored payload is not a JSON object"),
        ({"id": "x"}, "the stored topic must be a dotted name"),
        ({"topic": "a b"}, "the stored topic must be a dotted name"),
        ({"topic": "t", "specversion": "0.3"}, "not a CloudEvents 1.0 envelope"),
        ({"topic": "t", "specversion": "1.0", "id": "x"}, "the event lacks source, type"),
    ],
)
def test_a_row_that_is_not_an_event_is_refused_with_the_reason(payload: Any, says: str) -> None:
    with pytest.raises(InvalidPayload, match=says):
        relay_message(row(1, "a", payload=payload))
