"""Domain events: the envelope every event travels in, from the event outbox through the broker to
the consumer channels (ADR 0020, ADR 0021).

The envelope is a CloudEvents 1.0 event in its structured JSON form (``specversion``, ``id``,
``source``, ``type``, ``time``, ``subject``, ``datacontenttype``, ``data``), so any CloudEvents
tooling can read what the relay publishes. ``id`` is the event's stable id: the relay sets it as the
broker's message id (JetStream ``Nats-Msg-Id``; a Kafka header), so a replayed publish is dropped by
the broker, and the consumers key their de-duplication on it. ``subject`` carries the partition key
(per-key order: one tenant's events in the order they were written).

Pure: no clock, no I/O. The producer passes the time; :func:`decode_event` refuses anything that is
not a well-formed envelope with :class:`~outbox_core.errors.InvalidPayload`, naming the problem and
never the values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

import attrs

from outbox_core._validators import aware
from outbox_core.errors import InvalidPayload
from outbox_core.messages import JSONObject

__all__ = [
    "CONTENT_TYPE",
    "MAX_EVENT_BYTES",
    "SPEC_VERSION",
    "EventEnvelope",
    "check_event_name",
    "decode_event",
    "event_from_document",
]

SPEC_VERSION: Final = "1.0"
#: The CloudEvents structured-mode media type (the Kafka and NATS bindings' ``content-type``).
CONTENT_TYPE: Final = "application/cloudevents+json"
#: The largest encoded envelope (a broker message, not a file transfer).
MAX_EVENT_BYTES: Final = 256 * 1024
# Event types, sources, topics: dotted names of letters, digits, '_', '-' ('tenant.provisioned').
_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*")
_MAX_NAME: Final = 200
_MAX_KEY: Final = 200
_MAX_ID: Final = 200
#: Compact JSON, UTF-8 as is, no NaN or infinity: made once, not per event (the relay encodes every
#: event it publishes).
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def check_event_name(value: object, what: str) -> str:
    """``value`` if it is a dotted name (``tenant.provisioned``); else :class:`InvalidPayload`
    naming ``what``."""
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_NAME or not _NAME.fullmatch(value):
        raise InvalidPayload(
            f"{what} must be a dotted name of letters, digits, '_' and '-' (at most {_MAX_NAME}"
            " characters), such as 'tenant.provisioned'"
        )
    return value


def _text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= limit or not value.isprintable():
        raise InvalidPayload(f"{what} must be 1 to {limit} printable characters")
    return value


def _event_id(value: object) -> str:
    return _text(value, "the event id", _MAX_ID)


def _event_type(value: object) -> str:
    return check_event_name(value, "the event type")


def _event_source(value: object) -> str:
    return check_event_name(value, "the event source")


def _partition_key(value: object) -> str:
    return _text(value, "the partition key", _MAX_KEY)


def _data(value: object) -> JSONObject:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidPayload("an event's data must be a JSON object")
    return dict(value)


@attrs.frozen
class EventEnvelope:
    """One domain event as it is published and consumed."""

    #: The stable event id (broker message id, de-duplication key).
    id: str = attrs.field(converter=_event_id)
    #: What happened: ``tenant.provisioned``.
    type: str = attrs.field(converter=_event_type)
    #: Who says so: ``auth``.
    source: str = attrs.field(converter=_event_source)
    #: The partition key: events of one key are published and consumed in order.
    key: str = attrs.field(converter=_partition_key)
    #: When it happened (the business transaction's time).
    time: datetime = attrs.field(validator=aware)
    #: The event's own fields.
    data: JSONObject = attrs.field(converter=_data, hash=False)

    def to_json(self) -> dict[str, Any]:
        """The CloudEvents structured form (its ``data`` a copy of the envelope's)."""
        return {**self._document(), "data": dict(self.data)}

    def _document(self) -> dict[str, Any]:
        # The structured form sharing the envelope's data: only for encoding, which reads it.
        return {
            "specversion": SPEC_VERSION,
            "id": self.id,
            "source": self.source,
            "type": self.type,
            "subject": self.key,
            "time": self.time.isoformat(),
            "datacontenttype": "application/json",
            "data": self.data,
        }

    def encode(self) -> bytes:
        """The bytes the relay publishes (compact JSON, UTF-8); refused past
        :data:`MAX_EVENT_BYTES`."""
        body = _ENCODER.encode(self._document()).encode("utf-8")
        if len(body) > MAX_EVENT_BYTES:
            raise InvalidPayload(
                f"the event is {len(body)} bytes encoded, more than {MAX_EVENT_BYTES}"
            )
        return body


def decode_event(body: bytes) -> EventEnvelope:
    """The envelope in ``body``; :class:`InvalidPayload` for anything else (never echoing it)."""
    if not isinstance(body, bytes | bytearray) or len(body) > MAX_EVENT_BYTES:
        raise InvalidPayload(f"an event is at most {MAX_EVENT_BYTES} bytes of JSON")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise InvalidPayload("the event is not JSON") from None
    return event_from_document(document)


def event_from_document(document: object) -> EventEnvelope:
    """The envelope of an already parsed CloudEvents document (the relay's stored payload);
    :class:`InvalidPayload` for anything else, as :func:`decode_event`. Members other than the
    envelope's fields (the stored ``topic``, an extension) are not read."""
    if not isinstance(document, Mapping):
        raise InvalidPayload("the event is not a JSON object")
    if document.get("specversion") != SPEC_VERSION:
        raise InvalidPayload(f"the event is not a CloudEvents {SPEC_VERSION} envelope")
    missing = [k for k in ("id", "source", "type", "subject", "time", "data") if k not in document]
    if missing:
        raise InvalidPayload(f"the event lacks {', '.join(missing)}")
    try:
        when = datetime.fromisoformat(str(document["time"]))
    except ValueError:
        raise InvalidPayload("the event's time is not an ISO 8601 time") from None
    if when.utcoffset() is None:
        raise InvalidPayload("the event's time has no time zone")
    return EventEnvelope(
        id=document["id"],
        type=document["type"],
        source=document["source"],
        key=document["subject"],
        time=when,
        data=document["data"],
    )
