# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Scrub rules (catalogue C6): the secret keys leave, everything else stays exactly as it was."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.strategies import json_objects_of, json_values_of

from outbox_core.errors import ConfigurationError
from outbox_core.mail import ATTACHMENTS_KEY
from outbox_core.scrub import DEFAULT_SECRET_KEYS, REDACTED, ScrubRules

RULES = ScrubRules()

json_values = json_values_of(text=st.text(max_size=16), keys=st.text(max_size=8), max_leaves=6)
# Keys mix the default secret names, near misses of them, and arbitrary text.
payload_keys = (
    st.sampled_from(sorted(DEFAULT_SECRET_KEYS))
    | st.sampled_from(["to", "invoice_number", "PDF", "pdf ", "setup_url_2", "attempt_number"])
    | st.text(max_size=12)
)
payloads = json_objects_of(payload_keys, json_values, max_size=10)
key_sets = st.frozensets(st.text(min_size=1, max_size=12) | st.sampled_from(["to", "pdf"]))


def _dumps(value: object) -> str:
    return json.dumps(value, sort_keys=False, ensure_ascii=False)


def test_default_keys_are_the_records_six_and_attachments() -> None:
    assert RULES.keys == {
        "setup_url",
        "update_url",
        "password_reset_url",
        "invite_url",
        "public_token",
        "pdf",
        "attachments",
    }
    assert ATTACHMENTS_KEY in RULES.keys  # where e-mail_message stores files


def test_scrub_removes_the_secrets_and_keeps_the_delivery_record() -> None:
    payload = {
        "to": "alice@example.org",
        "setup_url": "https://app.example/setup?t=CANARY",
        "invoice_number": "INV-7",
        "pdf": "JVBERi0xLjQK",
        "meta": {"pdf": "nested stays"},
        "public_token": "CANARY-2",
    }
    scrubbed = RULES.scrub(payload)
    assert list(scrubbed) == ["to", "invoice_number", "meta"]
    assert scrubbed["meta"] is payload["meta"]
    assert "CANARY" not in _dumps(scrubbed)
    assert "setup_url" in payload  # the caller's payload is not touched


@given(payload=payloads)
def test_scrub_removes_exactly_the_secret_keys(payload: dict[str, Any]) -> None:
    before = _dumps(payload)
    expected = copy.deepcopy(payload)
    for key in DEFAULT_SECRET_KEYS:
        expected.pop(key, None)

    scrubbed = RULES.scrub(payload)

    assert set(scrubbed) == set(payload) - DEFAULT_SECRET_KEYS
    assert _dumps(scrubbed) == _dumps(expected)  # same keys, same order, byte-identical values
    assert all(scrubbed[key] is payload[key] for key in scrubbed)
    assert _dumps(payload) == before
    assert RULES.scrub(scrubbed) == scrubbed  # idempotent
    assert RULES.secret_keys_in(scrubbed) == frozenset()


@given(payload=payloads, keys=key_sets)
def test_configured_keys_are_the_ones_scrubbed(
    payload: dict[str, Any], keys: frozenset[str]
) -> None:
    rules = ScrubRules(keys)
    scrubbed = rules.scrub(payload)
    removed = set(payload) - set(scrubbed)
    assert removed == keys & set(payload)
    assert rules.secret_keys_in(payload) == removed
    assert [key for key in payload if key not in keys] == list(scrubbed)
    assert rules.scrub(scrubbed) == scrubbed


def test_empty_rules_scrub_nothing() -> None:
    payload = {"setup_url": "https://x.example/s", "to": "a@example.org"}
    assert ScrubRules(frozenset()).scrub(payload) == payload


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({}, frozenset()),
        ({"to": "a@example.org"}, frozenset()),
        ({"to": "a", "pdf": "x", "invite_url": None}, frozenset({"pdf", "invite_url"})),
        ({"PDF": "x", "meta": {"pdf": "x"}}, frozenset()),  # exact, top-level names only
    ],
)
def test_secret_keys_in(payload: dict[str, Any], expected: frozenset[str]) -> None:
    assert RULES.secret_keys_in(payload) == expected


def test_redact_hides_values_but_shows_which_keys_were_there() -> None:
    payload = {"to": "a@example.org", "password_reset_url": "https://x.example/r?t=CANARY", "n": 1}
    redacted = RULES.redact(payload)
    assert redacted == {"to": "a@example.org", "password_reset_url": REDACTED, "n": 1}
    assert list(redacted) == list(payload)
    assert payload["password_reset_url"] == "https://x.example/r?t=CANARY"
    assert REDACTED == "[scrubbed]"


@given(payload=payloads)
def test_redact_never_shows_a_secret_value(payload: dict[str, Any]) -> None:
    redacted = RULES.redact(payload)
    assert list(redacted) == list(payload)
    for key, value in redacted.items():
        if key in DEFAULT_SECRET_KEYS:
            assert value == REDACTED
        else:
            assert value is payload[key]


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"pdf"}, r"ScrubRules.keys must be a frozenset of key names, got set"),
        ("pdf", r"got str 'pdf'"),
        (["pdf"], r"got list"),
        (frozenset({"pdf", ""}), r"non-empty strings .* got ''"),
        (frozenset({"pdf", 7}), r"non-empty strings .* got 7"),
    ],
)
def test_bad_key_sets_are_refused(keys: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ScrubRules(keys)  # type: ignore[arg-type]
