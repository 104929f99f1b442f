"""The event relay: the lane that publishes the event outbox to a broker (ADR 0020).

The relay is the one runtime (``runtime.Worker``) over ``PostgresStore(pool, table=outbox_event)``
with :class:`RelayHandler` and :func:`relay_lane`; leader-gated by whoever runs it (lane
:data:`RELAY_LANE` is its leader key). It has no loop, claim or mark of its own:

- the claim hands out rows in per-key order (``queue_table(..., ordered_by="partition_key")``:
  never a row while an earlier row of its key is pending outside the claim);
- :class:`RelayHandler` turns a row into a :class:`~outbox_core.ports.BrokerMessage` (body = the
  CloudEvents envelope, message id = the event id, key = the partition key, subject = the topic)
  and publishes it within the row's budget, with the row's trace context as the W3C
  ``traceparent``/``tracestate`` headers (ADR 0028). It answers what the broker said: ``sent`` only on the
  broker's positive acknowledgement of a stored message, broker trouble a transient failure. Within
  one claimed batch, once a row of a key did not go out, the later rows of that key are not
  published (transient: "an earlier event of this key is unpublished");
- after a full claim the runtime claims the next batch beside the publishes (its claim may take
  the rows that follow this batch's rows of a key) and publishes it only if every row of this
  batch ended recorded terminal, else gives it back unsent;
- the runtime's fenced marks record it, one grouped mark per window of rows published at once
  (:attr:`~outbox_core.timing.RelayTiming.window`, 500 by default; 1 is the strict relay):
  ``dispatched`` (``published_at`` is then the row's ``resolved_at``), or the attempt and the
  error with the next try a second or so later.

Broker trouble never fails a row: :data:`RELAY_BACKOFF` retries it after 1 s, 2 s, 4 s ... at most
30 s apart, for as long as it takes (a failed row would let the later events of its key overtake
it). A row that can never be published — its stored payload is not an event, the broker refuses
it for good — fails permanently at once, with the reason, and does not hold its key back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final

import attrs

from outbox_adapters.postgres.events import RELAY_LANE
from outbox_adapters.runtime import LaneConfig
from outbox_adapters.telemetry.context import to_headers
from outbox_core.backoff import ExponentialBackoff
from outbox_core.errors import ConfigurationError, InvalidPayload
from outbox_core.events import CONTENT_TYPE, EventEnvelope, check_event_name, event_from_document
from outbox_core.messages import ClaimedRow, ClaimToken
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import BrokerMessage, Publisher
from outbox_core.scrub import ScrubRules
from outbox_core.timing import DEFAULT_RELAY_TIMING

__all__ = [
    "EARLIER_UNPUBLISHED",
    "RELAY_BACKOFF",
    "RELAY_LANE",
    "RelayHandler",
    "event_key",
    "event_message",
    "held_back",
    "key_turn",
    "publish_acknowledged",
    "relay_disabled_warning",
    "relay_lane",
    "relay_message",
]

#: ``attempts`` is a 32-bit column: a row retried every 30 s reaches this after ~2,000 years.
_NEVER: Final = 2**31 - 1
#: Broker trouble: the next try a second later, doubling to at most 30 s apart, never given up.
RELAY_BACKOFF: Final = ExponentialBackoff(
    max_attempts=_NEVER,
    base=timedelta(seconds=1),
    factor=2.0,
    cap=timedelta(seconds=30),
    jitter_ratio=0.2,
)
#: The reason a row is not published because an earlier row of its key in the batch was not.
EARLIER_UNPUBLISHED: Final = "an earlier event of this key is unpublished"
#: Event rows keep their whole envelope after publishing (the record of what was published).
_NO_SCRUB: Final = ScrubRules(keys=frozenset())


def relay_lane(**settings: Any) -> LaneConfig:  # noqa: ANN401 - LaneConfig's own keywords
    """The relay's :class:`LaneConfig`: lane ``events``, :class:`~outbox_core.timing.RelayTiming`
    (publish 5 s + mark 5 s, batch 500 in one window of 500, lease 70 s), :data:`RELAY_BACKOFF`,
    nothing scrubbed; ``settings`` override.

    The rows in flight and the grouped marks follow the timing's window (ADR 0023): a window of N
    rows is published at once and recorded by one grouped mark, ``RelayTiming(window=1)`` is the
    strict relay. They are not set apart from it: the claim lease counts windows, so fewer rows
    in flight than the window would run a batch past its timeout (its rest given back unsent).

    The relay claims ahead (``claim_ahead``, ADR 0023): after a full claim, the next claim runs
    beside the batch's publishes, and its rows are published only once every row of the batch
    before it is recorded terminal; otherwise they are given back unsent.

    In a window, the rows of one partition key are sent by one task, one after another in claim
    order (``key_of``: :func:`event_key`), and the keys at the same time; the handler's own turn
    per key (:func:`key_turn`) keeps that order under a config without ``key_of`` too.
    """
    timing = settings.get("timing", DEFAULT_RELAY_TIMING)
    window = getattr(timing, "window", 1)
    for name, derived in (("rows_in_flight", window), ("group_marks", window > 1)):
        if name in settings and settings[name] != derived:
            raise ConfigurationError(
                f"relay_lane: {name} follows the timing's window ({window} rows): set"
                f" RelayTiming(window=...) instead of {name}={settings[name]!r}"
            )
    stated: dict[str, Any] = {
        "lane": RELAY_LANE,
        "timing": DEFAULT_RELAY_TIMING,
        "backoff": RELAY_BACKOFF,
        "scrub": _NO_SCRUB,
        "rows_in_flight": window,
        "group_marks": window > 1,
        "claim_ahead": True,
        "key_of": event_key if window > 1 else None,
    }
    return LaneConfig(**{**stated, **settings})


def event_key(row: ClaimedRow) -> str | None:
    """The partition key of an event-outbox row (its envelope's ``subject``), ``None`` when the
    stored payload has none (the row is then sent on its own, and fails as not an event)."""
    payload = row.payload
    key = payload.get("subject") if isinstance(payload, Mapping) else None
    return key if isinstance(key, str) else None


def relay_disabled_warning() -> str:
    """What a process that would run the relay says at start when no broker is configured."""
    return (
        "event relay disabled: no broker configured. Events published with publish() are still"
        " written to outbox_event with the host's transaction (writes are unaffected) and wait"
        " there, in order, until a relay with a broker (nats://HOST:PORT or kafka://HOST:PORT)"
        " runs."
    )


def relay_message(row: ClaimedRow) -> BrokerMessage:
    """The broker message of an event-outbox row; :class:`InvalidPayload` (the row fails at once,
    with the reason) for a payload that is not an event the relay can publish."""
    payload = row.payload
    if not isinstance(payload, Mapping):
        raise InvalidPayload("the stored payload is not a JSON object")
    topic = check_event_name(payload.get("topic"), "the stored topic")
    # The stored envelope beside its topic; the envelope reads its own fields and no other.
    event = event_from_document(payload)
    if row.trace_context is None:
        return event_message(topic, event)
    # The enqueue's W3C context travels in the headers, so a consumer channel's delivery links to
    # the original enqueue (ADR 0028).
    return event_message(topic, event, to_headers(row.trace_context))


def event_message(
    topic: str, event: EventEnvelope, headers: Mapping[str, str] | None = None
) -> BrokerMessage:
    """The broker message of ``event`` on ``topic``: its CloudEvents body, the event id as the
    message id, the partition key as the key, and the ``ce-*`` headers (then ``headers``)."""
    return BrokerMessage(
        subject=topic,
        key=event.key,
        message_id=event.id,
        body=event.encode(),
        headers={
            "content-type": CONTENT_TYPE,
            "ce-id": event.id,
            "ce-type": event.type,
            "ce-source": event.source,
            **(headers or {}),
        },
    )


async def publish_acknowledged(
    publisher: Publisher, message: BrokerMessage, budget: timedelta
) -> Outcome:
    """Publish ``message`` and wait for what the broker says: the publisher's outcome, ``sent``
    only on a positive acknowledgement. (The matrix's "mark before the ack" mutant replaces this
    with a publish that is not waited for.)"""
    return await publisher.publish(message, budget=budget)


@attrs.define
class _Batch:
    """What the handler remembers of the batch it is working: the keys that did not go out."""

    token: ClaimToken | None = None
    failed: set[str] = attrs.Factory(set)
    locks: dict[str, asyncio.Lock] = attrs.Factory(dict)


def key_turn(batch: _Batch, key: str) -> asyncio.Lock:
    """The lock that puts ``key``'s rows of ``batch`` one after the other: a row takes it before
    its publish and gives it back after the broker answered, so a key's later event is never on
    the wire while its earlier one is unacknowledged. (The matrix's "key not awaited" mutant hands
    out a fresh lock each time.)"""
    lock = batch.locks.get(key)
    if lock is None:
        lock = batch.locks[key] = asyncio.Lock()
    return lock


def held_back(batch: _Batch, key: str) -> bool:
    """Whether an earlier row of ``key`` in ``batch`` did not go out (its later rows then wait for
    the next claim). (The matrix's "past a failed event" mutant answers no.)"""
    return key in batch.failed


class RelayHandler:
    """Publishes one event-outbox row (``ports.RowHandler``).

    Order inside a window (ADR 0023): the runtime starts a window's rows at once, so rows of
    different keys are on the wire together, while a key's rows take their turn (:func:`key_turn`)
    in claim order, each published only once the previous one was acknowledged. A row that does not
    go out — a transient answer, a publish that raised or was cut off by its deadline (it may have
    been stored: the retry's ``Nats-Msg-Id`` makes the broker drop the copy) — marks its key
    failed for the batch (:func:`held_back`): the key's later rows are answered transient
    (:data:`EARLIER_UNPUBLISHED`) without being offered to the broker. They wait, with the failed
    row, for the next claim, which hands the key's rows out again in id order once the failed row
    is due: the key's events reach the broker in their outbox order.
    """

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._batch = _Batch()

    def _batch_of(self, token: ClaimToken) -> _Batch:
        # Every row of one claim carries its token; a new token is a new batch.
        if self._batch.token != token:
            self._batch = _Batch(token)
        return self._batch

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        message = relay_message(row)  # InvalidPayload: the runtime fails the row at once
        batch = self._batch_of(row.token)
        # The turn is taken in the order the runtime starts the rows: claim (id) order.
        async with key_turn(batch, message.key):
            if held_back(batch, message.key):
                return Outcome.transient(EARLIER_UNPUBLISHED)
            try:
                outcome = await publish_acknowledged(self._publisher, message, budget)
            except BaseException:
                batch.failed.add(message.key)  # cut off or crashed: not known to be stored
                raise
            if outcome.kind is OutcomeKind.TRANSIENT:
                batch.failed.add(message.key)
            return outcome
