"""The exact limits and refusals of outbox_core.messages, pinned where mutation testing found them
loose (docs/testing.md): each bound is tested on both sides, each refusal as its whole sentence."""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta

import pytest

from outbox_core.delivery import Status
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, NewMessage, check_lane_name

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TOKEN = ClaimToken.from_entropy(bytes(range(16)))
#: [A-Za-z0-9_-]: exactly 64 characters, so one token can use every one of them.
TOKEN_ALPHABET = string.ascii_letters + string.digits + "-_"
LANE_ALPHABET = string.ascii_lowercase + string.digits + "_.-"


def make_row() -> ClaimedRow:
    return ClaimedRow(
        id=7,
        lane="email",
        payload={"to": "a@example.org"},
        attempts=1,
        token=TOKEN,
        lease_expires_at=NOW + timedelta(minutes=6),
        created_at=NOW,
    )


@pytest.mark.parametrize("value", ["a" * 8, "a" * 64, TOKEN_ALPHABET])
def test_tokens_of_8_and_64_characters_and_the_whole_alphabet_are_accepted(value: str) -> None:
    assert ClaimToken(value).value == value


def test_eight_bytes_of_entropy_are_enough() -> None:
    assert str(ClaimToken.from_entropy(b"\x00" * 8)) == "00" * 8


@pytest.mark.parametrize("lane", ["e", "e" * 64, LANE_ALPHABET])
def test_lanes_of_1_and_64_characters_and_the_whole_alphabet_are_accepted(lane: str) -> None:
    assert check_lane_name(lane) == lane
    assert NewMessage(lane, {}).lane == lane


@pytest.mark.parametrize("key", ["k", "k" * 200])
def test_idempotency_keys_of_1_and_200_characters_are_accepted(key: str) -> None:
    assert NewMessage("email", {}, key).idempotency_key == key


def test_a_payload_that_is_no_mapping_is_refused_naming_its_type() -> None:
    with pytest.raises(TypeError) as refused:
        NewMessage("email", [])  # type: ignore[arg-type]
    assert str(refused.value) == "a payload is a mapping (a JSON object), got list"


def test_a_pending_mark_without_a_due_time_is_refused_in_a_whole_sentence() -> None:
    with pytest.raises(ValueError) as refused:
        Mark(7, TOKEN, Status.PENDING, "451")
    assert str(refused.value) == (
        "a retry mark (status pending) needs retry_delay, and only it has one"
    )


def test_every_named_mark_is_fenced_by_the_rows_id_and_token() -> None:
    row = make_row()
    keys = frozenset({"password_reset_url"})
    marks = [
        Mark.dispatched(row, scrub_keys=keys),
        Mark.skipped(row, "opted out", scrub_keys=keys),
        Mark.failed(row, "550"),
        Mark.retry(row, "451", delay=timedelta(0)),
    ]
    assert [(mark.row_id, mark.token) for mark in marks] == [(7, TOKEN)] * 4
