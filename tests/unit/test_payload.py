# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Payload rules (RELIABILITY "Payloads"): refused at enqueue with a reason, decoded or failed at send."""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import html
import json
import math
import types
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.strategies import json_objects_of, json_values_of, storable_text

from outbox_core.email_payload import EmailPayload
from outbox_core.errors import ConfigurationError, InvalidPayload, InvalidRecipient, UnsafeHeader
from outbox_core.mail import MAX_RECIPIENTS, clean_line, clean_text
from outbox_core.payload import (
    DEFAULT_MAX_BYTES,
    MAX_DEPTH,
    MAX_MESSAGE_BYTES,
    RESERVED_KEYS,
    decode_payload,
    validate_payload,
)

json_values = json_values_of(text=storable_text, max_size=4, max_leaves=20)
json_objects = json_objects_of(storable_text, json_values)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# --------------------------------------------------------------------------- validate_payload


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ([1, 2], "must be a JSON object (a dict), not list"),
        ("{}", "not str"),
        (None, "not NoneType"),
        (3, "not int"),
        ((("a", 1),), "not tuple"),
        (types.MappingProxyType({"a": 1}), "not mappingproxy"),
        ({"a": math.nan}, "payload['a'] is nan, which JSON cannot represent"),
        ({"a": [1, math.inf]}, "payload['a'][1] is inf"),
        ({"a": {"b": -math.inf}}, "payload['a']['b'] is -inf"),
        ({"a": (1, 2)}, "payload['a'] is a tuple"),
        ({"a": {1, 2}}, "payload['a'] is a set"),
        ({"a": b"bytes"}, "payload['a'] is a bytes"),
        ({"a": dt.date(2026, 1, 1)}, "payload['a'] is a date"),
        ({"a": decimal.Decimal("1.5")}, "payload['a'] is a Decimal"),
        ({"a": [{"b": object()}]}, "payload['a'][0]['b'] is a object"),
        ({1: "x"}, "payload has a int key; JSON keys are strings"),
        ({"a": {None: "x"}}, "payload['a'] has a NoneType key"),
        ({"a": "x\x00y"}, "payload['a'] contains U+0000, which PostgreSQL jsonb cannot store"),
        ({"a\x00": "x"}, "a key of payload contains U+0000"),
        ({"a": ["\ud800"]}, "payload['a'][0] contains U+D800"),
        ({"a": 10**5000}, "cannot be written as JSON"),
        (nested(MAX_DEPTH), f"nests deeper than {MAX_DEPTH} levels"),
    ],
)
def test_what_is_not_a_json_object_is_refused_with_the_reason(obj: object, reason: str) -> None:
    with pytest.raises(InvalidPayload) as caught:
        validate_payload(obj)
    assert reason in str(caught.value)


def test_a_payload_that_contains_itself_is_refused() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(InvalidPayload, match="contains itself"):
        validate_payload(loop)


def test_the_deepest_allowed_nesting_is_accepted() -> None:
    # nested(n) is n + 1 dicts deep, the payload itself included.
    assert validate_payload(nested(MAX_DEPTH - 1)) == nested(MAX_DEPTH - 1)


def test_the_path_in_a_message_stays_short() -> None:
    with pytest.raises(InvalidPayload) as caught:
        validate_payload({"k" * 10_000: math.nan})
    assert len(str(caught.value)) < 200


def test_refusals_do_not_repeat_payload_values() -> None:
    with pytest.raises(InvalidPayload) as caught:
        validate_payload({"password_reset_url": "https://app.example/reset?t=CANARY\x00"})
    assert "CANARY" not in str(caught.value)
    assert "password_reset_url" in str(caught.value)


def test_the_size_limit_counts_utf8_bytes_of_the_compact_encoding() -> None:
    # '{"a":"' + body + '"}' is 8 bytes plus the body.
    assert validate_payload({"a": "x" * 92}, max_bytes=100) == {"a": "x" * 92}
    with pytest.raises(InvalidPayload, match="is 101 bytes as JSON; the limit is 100 bytes"):
        validate_payload({"a": "x" * 93}, max_bytes=100)
    with pytest.raises(InvalidPayload, match="is 102 bytes"):
        validate_payload({"a": "é" * 47}, max_bytes=100)


def test_the_default_limit_is_the_message_limit_plus_room_for_sealed_attachments() -> None:
    # 256 KiB of message, and 7 MB of files as base64 (9.4 MB) then sealed (12.5 MB):
    # tests/unit/test_attachments.py checks the largest attachments, sealed, do fit.
    assert MAX_MESSAGE_BYTES == 256 * 1024
    assert DEFAULT_MAX_BYTES == 12_734_244
    validate_payload({"pdf": "x" * (DEFAULT_MAX_BYTES - 12)})
    with pytest.raises(InvalidPayload, match="the limit is 12,734,244 bytes"):
        validate_payload({"pdf": "x" * DEFAULT_MAX_BYTES})


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, None])
def test_an_impossible_limit_is_a_configuration_error(limit: object) -> None:
    with pytest.raises(ConfigurationError, match="max_bytes"):
        validate_payload({}, max_bytes=limit)  # type: ignore[arg-type]


def test_json_types_come_back_with_their_types() -> None:
    obj = {"t": True, "i": 1, "f": 1.0, "n": None, "s": "é", "l": [0, False], "d": {"x": -0.0}}
    out = validate_payload(obj)
    assert out == obj
    assert [type(out[k]) for k in "tifnsld"] == [bool, int, float, type(None), str, list, dict]


@given(json_objects)
def test_any_json_object_round_trips(obj: dict[str, Any]) -> None:
    assert validate_payload(obj) == obj
    assert decode_payload(json.dumps(obj)) == obj
    assert decode_payload(json.dumps(obj).encode("utf-8")) == obj
    assert decode_payload(obj) == obj


def _mutate_everything(value: object) -> None:
    if isinstance(value, dict):
        for item in list(value.values()):
            _mutate_everything(item)
        value["mutated"] = True
    elif isinstance(value, list):
        for item in value:
            _mutate_everything(item)
        value.append("mutated")


@given(json_objects)
def test_mutating_the_input_afterwards_does_not_change_the_validated_copy(
    obj: dict[str, Any],
) -> None:
    before = copy.deepcopy(obj)
    out = validate_payload(obj)
    _mutate_everything(obj)
    assert out == before
    assert obj != before


@given(json_values.filter(lambda v: not isinstance(v, dict)))
def test_anything_but_an_object_is_refused(value: object) -> None:
    with pytest.raises(InvalidPayload, match="must be a JSON object"):
        validate_payload(value)


@given(json_objects, st.sampled_from([math.nan, math.inf, -math.inf]), storable_text)
def test_a_non_finite_float_anywhere_is_refused(obj: dict[str, Any], bad: float, key: str) -> None:
    obj = {"wrapper": [obj, {key: bad}]}
    with pytest.raises(InvalidPayload) as caught:
        validate_payload(obj)
    assert f"payload['wrapper'][1][{key!r}]"[:100] in str(caught.value)


@given(json_objects, st.integers(min_value=1, max_value=4096))
def test_the_size_limit_is_exact(obj: dict[str, Any], limit: int) -> None:
    size = len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size <= limit:
        assert validate_payload(obj, max_bytes=limit) == obj
    else:
        with pytest.raises(InvalidPayload, match=f"is {size:,} bytes as JSON"):
            validate_payload(obj, max_bytes=limit)


# --------------------------------------------------------------------------- decode_payload


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("not json", "not valid JSON"),
        ('{"a": 1', "not valid JSON"),
        ('{"a": NaN}', "NaN is not JSON"),
        ('{"a": Infinity}', "Infinity is not JSON"),
        ('{"a": -Infinity}', "-Infinity is not JSON"),
        ("[1, 2]", "the stored payload is a JSON array, not a JSON object"),
        ('"text"', "the stored payload is a JSON string, not a JSON object"),
        ("null", "the stored payload is a JSON null, not"),
        ("42", "the stored payload is a JSON number, not"),
        ("-1.5e3", "the stored payload is a JSON number, not"),
        ("true", "the stored payload is a JSON boolean, not"),
        ('{"a": "\\u0000"}', "contains U+0000"),
        ('{"a": "\\ud800"}', "contains U+D800"),
        (b'{"a": "\xff"}', "not UTF-8"),
        # What PostgreSQL stores but Python won't read back: too deep, too many digits.
        ("[" * 100_000 + "]" * 100_000, "the stored payload nests too deep to decode"),
        ('{"a": ' + "[" * 3000 + "]" * 3000 + "}", "nests too deep to decode (a payload may"),
        ('{"n": ' + "9" * 5000 + "}", "the stored payload cannot be decoded (Exceeds the limit"),
        (42, "JSON text or a mapping, not int"),
        ([("a", 1)], "JSON text or a mapping, not list"),
    ],
)
def test_an_undecodable_stored_payload_is_a_permanent_error(raw: object, reason: str) -> None:
    with pytest.raises(InvalidPayload) as caught:
        decode_payload(raw)  # type: ignore[arg-type]
    assert reason in str(caught.value)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"a": 1e999}', "payload['a'] is inf, which JSON cannot represent"),
        ('{"a": [-1e400]}', "payload['a'][0] is -inf"),
        ('{"a": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}", f"nests deeper than {MAX_DEPTH}"),
        ('{"a": "half \\ud800 a pair"}', "payload['a'] contains U+D800"),  # as an escape
        ('{"a": "half \ud800 a pair"}', "payload['a'] contains U+D800"),  # as itself
        ('{"k\\u0000": 1}', "a key of payload contains U+0000"),
    ],
)
def test_what_json_lets_through_is_still_refused_when_decoding(raw: str, reason: str) -> None:
    with pytest.raises(InvalidPayload) as caught:
        decode_payload(raw)
    assert reason in str(caught.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            '{"a": ["\\ud800"]}',
            "payload['a'][0] contains U+D800, which PostgreSQL jsonb cannot store",
        ),
        (
            '{"a": {"\\u0000k": 1}}',
            "a key of payload['a'] contains U+0000, which PostgreSQL jsonb cannot store",
        ),
    ],
)
def test_an_unstorable_character_is_named_as_a_value_or_as_a_key(raw: str, message: str) -> None:
    with pytest.raises(InvalidPayload) as caught:
        decode_payload(raw)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        # the deepest allowed: MAX_DEPTH containers, the payload itself included
        ('{"a": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}", None),
        # many brackets, little depth; an escape that is not U+0000 or a surrogate; a real pair
        ('{"a": [' + ", ".join(["[]"] * 100) + "]}", {"a": [[]] * 100}),
        ('{"a": "caf\\u00e9 \\ud83d\\ude00", "b": 1.5e300}', {"a": "café 😀", "b": 1.5e300}),
        ('{"brackets in text": "[[[{{{"}', {"brackets in text": "[[[{{{"}),
    ],
)
def test_what_the_rules_allow_decodes_whichever_way_it_is_checked(
    raw: str, decoded: object
) -> None:
    out = decode_payload(raw)
    assert out == (json.loads(raw) if decoded is None else decoded)


def test_decoding_has_no_size_limit() -> None:
    big = {"pdf": "x" * (2 * DEFAULT_MAX_BYTES)}
    assert decode_payload(json.dumps(big)) == big


def test_a_decoded_mapping_is_a_fresh_dict() -> None:
    stored = {"to": "a@example.org", "items": [1, 2]}
    out = decode_payload(types.MappingProxyType(stored))
    assert out == stored
    assert type(out) is dict
    out["items"].append(3)
    assert stored["items"] == [1, 2]


# --------------------------------------------------------------------------- EmailPayload

RESET = {
    "to": "Alice@Example.ORG",
    "subject": "Reset your password, $name",
    "text": "Hello $name,\nopen ${password_reset_url} within the hour.\nCosts $$0.\n",
    "html": '<p>Hello $name, <a href="$password_reset_url">reset</a></p>',
    "reply_to": "Help@Example.org",
    "sender_name": "ACME",
    "name": "Alice",
    "password_reset_url": "https://app.example/reset?t=abc&u=1",
    "attempt_number": 2,
}


def test_an_email_payload_is_read_and_rendered() -> None:
    email = EmailPayload.from_payload(RESET)
    assert email.to == ("Alice@example.org",)
    assert email.reply_to == "Help@example.org"
    assert email.sender_name == "ACME"
    assert dict(email.fields) == {
        "name": "Alice",
        "password_reset_url": RESET["password_reset_url"],
    }
    subject, text, body_html = email.render()
    assert subject == "Reset your password, Alice"
    assert text == (
        "Hello Alice,\nopen https://app.example/reset?t=abc&u=1 within the hour.\nCosts $0.\n"
    )
    assert body_html == (
        '<p>Hello Alice, <a href="https://app.example/reset?t=abc&amp;u=1">reset</a></p>'
    )


def test_to_may_be_a_list_and_repeats_are_dropped() -> None:
    payload = {**RESET, "to": ["b@bücher.example", "a@example.org", "b@xn--bcher-kva.EXAMPLE"]}
    assert EmailPayload.from_payload(payload).to == ("b@xn--bcher-kva.example", "a@example.org")


def test_the_recipient_limit_counts_distinct_addresses_and_is_refused_at_enqueue() -> None:
    # build_message refuses more than MAX_RECIPIENTS at send time; the payload must refuse them
    # at enqueue, where the caller can still catch it.
    hundred = [f"u{i}@example.org" for i in range(MAX_RECIPIENTS)]
    assert len(EmailPayload.from_payload({**RESET, "to": [*hundred, "u0@EXAMPLE.org"]}).to) == 100
    with pytest.raises(InvalidPayload) as caught:
        EmailPayload.from_payload({**RESET, "to": [*hundred, "one-more@example.org"]})
    assert str(caught.value) == (
        "payload field 'to' names 101 recipients; the limit is 100 (RFC 5321 §4.5.3.1.8)"
    )


def test_a_rendered_subject_is_refused_without_echoing_a_secret_field() -> None:
    for subject in ("$password_reset_url =?UTF-8?Q?=0A?=", "${password_reset_url}" + "x" * 1000):
        with pytest.raises(UnsafeHeader) as caught:
            EmailPayload.from_payload({**RESET, "subject": subject})
        assert "app.example" not in str(caught.value)
        assert str(caught.value).startswith("the subject ")


def test_optional_fields_may_be_missing_or_null() -> None:
    email = EmailPayload.from_payload(
        {"to": "a@example.org", "subject": "Hi", "text": "", "html": None}
    )
    assert (email.html, email.reply_to, email.sender_name) == (None, None, None)
    assert email.render() == ("Hi", "", None)


@pytest.mark.parametrize(
    ("changes", "error", "reason"),
    [
        ({"to": None}, InvalidPayload, "'to' must be an address or a list, not NoneType"),
        ({"to": 5}, InvalidPayload, "not int"),
        ({"to": []}, InvalidPayload, "names no recipient"),
        ({"to": ["a@example.org", "a@b\r\nRCPT TO:<x>"]}, InvalidRecipient, "U+000D"),
        ({"to": [7]}, InvalidRecipient, "not a string"),
        ({"to": '"quoted"@example.org'}, InvalidRecipient, "quoted local parts"),
        ({"reply_to": "nobody"}, InvalidRecipient, "no '@'"),
        ({"subject": 5}, InvalidPayload, "'subject' must be a string, not int"),
        ({"text": None}, InvalidPayload, "'text' must be a string, not NoneType"),
        ({"html": ["<p>"]}, InvalidPayload, "'html' must be a string, not list"),
        ({"sender_name": 1}, InvalidPayload, "'sender_name' must be a string"),
        ({"sender_name": "=?utf-8?q?=0A?=Bcc: x@y"}, UnsafeHeader, "the sender_name contains"),
        ({"subject": "Hi $who"}, InvalidPayload, "'subject' uses $who"),
        ({"text": "$a $b ${password_reset_url}"}, InvalidPayload, "'text' uses $a, $b, but"),
        ({"html": "<p>${missing}</p>"}, InvalidPayload, "'html' uses $missing"),
        ({"text": "sent to $to"}, InvalidPayload, "uses $to"),  # a reserved key
        ({"text": "attempt $attempt_number"}, InvalidPayload, "uses $attempt_number"),  # an int
        ({"subject": "Only $5"}, InvalidPayload, "write '$$' for a literal dollar sign"),
        ({"name": "=?UTF-8?Q?=0A?=Bcc: x@y"}, UnsafeHeader, "the subject contains an RFC 2047"),
        ({"name": "x" * 1000}, UnsafeHeader, "the limit is 998"),
        ({"to": [f"u{i}@example.org" for i in range(101)]}, InvalidPayload, "the limit is 100"),
    ],
)
def test_bad_email_payloads_are_refused_at_enqueue(
    changes: dict[str, object], error: type[Exception], reason: str
) -> None:
    with pytest.raises(error) as caught:
        EmailPayload.from_payload({**RESET, **changes})
    assert reason in str(caught.value)


@pytest.mark.parametrize("key", ["to", "subject", "text"])
def test_a_missing_required_field_is_named(key: str) -> None:
    payload = {k: v for k, v in RESET.items() if k != key}
    with pytest.raises(InvalidPayload, match=f"has no '{key}' field"):
        EmailPayload.from_payload(payload)


def test_from_payload_needs_a_mapping() -> None:
    with pytest.raises(InvalidPayload, match="must be a JSON object, not list"):
        EmailPayload.from_payload([("to", "a@example.org")])  # type: ignore[arg-type]


def test_a_scrubbed_row_cannot_be_rendered_again() -> None:
    # The scrub (C6) removes password_reset_url once the row is sent; the link is gone for good.
    scrubbed = {k: v for k, v in RESET.items() if k != "password_reset_url"}
    with pytest.raises(InvalidPayload, match="uses \\$password_reset_url"):
        EmailPayload.from_payload(scrubbed)


def test_field_values_are_cleaned_for_where_they_go() -> None:
    payload = {
        "to": "a@example.org",
        "subject": "Hi $name",
        "text": "Dear $name\n",
        "html": "<p>$name</p>",
        "name": 'Eve\r\nBcc: x@y <script>"\x00\x1b',
    }
    subject, text, body_html = EmailPayload.from_payload(payload).render()
    assert subject == 'Hi Eve  Bcc: x@y <script>"'
    assert text == 'Dear Eve\nBcc: x@y <script>"\n'
    assert body_html == "<p>Eve\nBcc: x@y &lt;script&gt;&quot;</p>"


def test_templates_themselves_are_cleaned() -> None:
    payload = {"to": "a@example.org", "subject": "Hi\r\nBcc: x@y", "text": "a\r\nb\x00"}
    assert EmailPayload.from_payload(payload).render() == ("Hi  Bcc: x@y", "a\nb", None)


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(InvalidPayload, match="template field 'to'"):
        EmailPayload(to="a@example.org", subject="s", text="t", fields={"to": "x"})
    with pytest.raises(InvalidPayload, match="template field 'n'"):
        EmailPayload(to="a@example.org", subject="s", text="t", fields={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidPayload, match="template field 1"):
        EmailPayload(to="a@example.org", subject="s", text="t", fields={1: "x"})  # type: ignore[dict-item]
    with pytest.raises(InvalidPayload, match="uses \\$n"):
        EmailPayload(to="a@example.org", subject="$n", text="t")


def test_fields_are_a_read_only_copy() -> None:
    values = {"name": "Alice"}
    email = EmailPayload(to="a@example.org", subject="Hi $name", text="", fields=values)
    values["name"] = "Mallory"
    assert email.render()[0] == "Hi Alice"
    with pytest.raises(TypeError):
        email.fields["name"] = "Mallory"  # type: ignore[index]
    assert email == attrs.evolve(email)
    assert hash(email) == hash(attrs.evolve(email))


def test_reserved_keys() -> None:
    parts = {"to", "subject", "text", "html", "reply_to", "sender_name", "attachments"}
    # The marks' record of who already has the message: no producer may write it as a field.
    assert frozenset({*parts, "outbox_delivered_to"}) == RESERVED_KEYS


@given(st.text(), st.text(), st.text())
def test_any_field_value_renders_safely(
    subject_value: str, text_value: str, html_value: str
) -> None:
    payload = {
        "to": "a@example.org",
        "subject": "[$s]",
        "text": "<$t>",
        "html": "<p>$h</p>",
        "s": subject_value,
        "t": text_value,
        "h": html_value,
    }
    try:
        email = EmailPayload.from_payload(payload)
    except UnsafeHeader:
        return  # the rendered subject is not a safe header value (an encoded word, too long)
    subject, text, body_html = email.render()
    assert subject == clean_line(f"[{clean_line(subject_value)}]")
    assert text == clean_text(f"<{text_value}>")
    assert body_html is not None
    assert body_html.startswith("<p>")
    assert body_html.endswith("</p>")
    inner = body_html[3:-4]
    assert "<" not in inner
    assert ">" not in inner
    assert html.unescape(inner) == clean_text(html_value)
