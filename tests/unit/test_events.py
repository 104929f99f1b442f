"""The domain-event envelope (outbox_core.events): CloudEvents 1.0, structured JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_core.errors import InvalidPayload
from outbox_core.events import MAX_EVENT_BYTES, EventEnvelope, decode_event

T0 = datetime(2030, 1, 1, 9, 30, tzinfo=UTC)


def event(**changes: object) -> EventEnvelope:
    fields: dict[str, object] = {
        "id": "3f2b9c1e-7a51-4c1e-9b0e-1f2d3c4b5a69",
        "type": "tenant.provisioned",
        "source": "auth",
        "key": "tenant-42",
        "time": T0,
        "data": {"tenant_id": "tenant-42", "admin_email": "ann@example.org"},
    }
    fields.update(changes)
    return EventEnvelope(**fields)  # type: ignore[arg-type]


def test_the_envelope_is_cloudevents_structured_json_and_round_trips() -> None:
    original = event()
    document = json.loads(original.encode())
    assert document == {
        "specversion": "1.0",
        "id": "3f2b9c1e-7a51-4c1e-9b0e-1f2d3c4b5a69",
        "source": "auth",
        "type": "tenant.provisioned",
        "subject": "tenant-42",
        "time": "2030-01-01T09:30:00+00:00",
        "datacontenttype": "application/json",
        "data": {"tenant_id": "tenant-42", "admin_email": "ann@example.org"},
    }
    assert decode_event(original.encode()) == original


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"specversion": "0.3"}', "not a CloudEvents 1.0"),
        (b'{"specversion": "1.0", "id": "x"}', "lacks source, type, subject, time, data"),
        (
            (
                b'{"specversion":"1.0","id":"x","source":"a","type":"t","subject":"k",'
                b'"time":"yesterday","data":{}}'
            ),
            "not an ISO 8601 time",
        ),
        (
            (
                b'{"specversion":"1.0","id":"x","source":"a","type":"t","subject":"k",'
                b'"time":"2030-01-01T00:00:00","data":{}}'
            ),
            "no time zone",
        ),
        (
            (
                b'{"specversion":"1.0","id":"x","source":"a","type":"t\\nBcc","subject":"k",'
                b'"time":"2030-01-01T00:00:00Z","data":{}}'
            ),
            "event type must be a dotted name",
        ),
        (
            (
                b'{"specversion":"1.0","id":"x","source":"a","type":"t","subject":"k",'
                b'"time":"2030-01-01T00:00:00Z","data":[]}'
            ),
            "data must be a JSON object",
        ),
        (b"[" * 5000, "not JSON"),
    ],
)
def test_anything_but_a_well_formed_envelope_is_refused_naming_the_problem(body, why) -> None:
    with pytest.raises(InvalidPayload, match=why):
        decode_event(body)


def test_an_envelope_past_the_size_limit_is_refused_at_encode() -> None:
    with pytest.raises(InvalidPayload, match="more than"):
        event(data={"blob": "x" * MAX_EVENT_BYTES}).encode()


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=10))
def test_any_string_data_round_trips(data: dict[str, str]) -> None:
    assert decode_event(event(data=data).encode()).data == data


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("id", "", "event id must be 1 to 200 printable"),
        ("id", "a\nb", "event id must be 1 to 200 printable"),
        ("key", "k" * 201, "partition key must be 1 to 200 printable"),
        ("source", "bad source", "event source must be a dotted name"),
    ],
)
def test_ids_keys_and_sources_are_checked_when_the_envelope_is_made(field, value, why) -> None:
    with pytest.raises(InvalidPayload, match=why):
        event(**{field: value})


def test_a_body_over_the_limit_or_not_bytes_is_refused_before_parsing() -> None:
    with pytest.raises(InvalidPayload, match="at most"):
        decode_event(b" " * (MAX_EVENT_BYTES + 1))
    with pytest.raises(InvalidPayload, match="at most"):
        decode_event("{}")  # type: ignore[arg-type]
