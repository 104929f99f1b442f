"""The exact refusals of outbox_core.payload, pinned where mutation testing found them loose
(docs/testing.md): whole sentences, the 120-character path limit on both sides, and a tree walk
that checks every value rather than stopping at the first scalar."""

from __future__ import annotations

import math

import pytest

from outbox_core.email_payload import EmailPayload
from outbox_core.errors import InvalidPayload
from outbox_core.payload import validate_payload


def refusal(payload: object) -> str:
    with pytest.raises(InvalidPayload) as refused:
        validate_payload(payload)
    return str(refused.value)


def test_a_path_of_120_characters_is_shown_whole() -> None:
    key = "k" * 109  # payload['kkk…'] is 11 + 109 = 120 characters
    assert refusal({key: math.nan}) == f"payload[{key!r}] is nan, which JSON cannot represent"


def test_a_path_past_120_characters_is_cut_to_117_and_an_ellipsis() -> None:
    key = "k" * 110
    shown = f"payload[{key!r}]"[:117] + "..."
    assert refusal({key: math.nan}) == f"{shown} is nan, which JSON cannot represent"


def test_every_value_is_checked_even_after_a_scalar() -> None:
    # The walk is a stack: "n" is popped before "x". A walk that stopped at the first scalar
    # would let the set through to json.dumps (a TypeError, not a refusal naming the path).
    assert refusal({"x": {1, 2}, "n": 1}) == (
        "payload['x'] is a set; a payload holds only dict, list, str, int, float, bool and None"
    )


def email(**fields: object) -> EmailPayload:
    return EmailPayload.from_payload(
        {"to": "ann@example.org", "subject": "s", "text": "t", **fields}
    )


def test_email_payload_refusals_are_whole_sentences() -> None:
    with pytest.raises(InvalidPayload) as no_recipient:
        email(to=[])
    assert str(no_recipient.value) == "payload field 'to' names no recipient"
    with pytest.raises(InvalidPayload) as missing:
        EmailPayload.from_payload({"to": "ann@example.org"})
    assert str(missing.value) == "the email payload has no 'subject', 'text' field"
    with pytest.raises(InvalidPayload) as unknown:
        email(text="Hi $name").render()
    assert str(unknown.value) == (
        "payload field 'text' uses $name, but the payload has no such string field (reserved"
        " keys and non-string values can't be used in templates)"
    )
