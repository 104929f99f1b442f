from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from outbox_core.delivery import Status
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, NewMessage, check_lane_name

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TOKEN = ClaimToken.from_entropy(bytes(range(16)))
NAIVE = datetime(2026, 1, 1)  # noqa: DTZ001 - a naive value, to be refused


def make_row(**overrides: object) -> ClaimedRow:
    fields: dict[str, object] = {
        "id": 7,
        "lane": "email",
        "payload": {"to": "a@example.org"},
        "attempts": 1,
        "token": TOKEN,
        "lease_expires_at": NOW + timedelta(minutes=6),
        "created_at": NOW,
    }
    fields.update(overrides)
    return ClaimedRow(**fields)  # type: ignore[arg-type]


def test_token_from_entropy_is_hex_and_printable() -> None:
    assert str(TOKEN) == "000102030405060708090a0b0c0d0e0f"
    with pytest.raises(ValueError, match="at least 8 bytes"):
        ClaimToken.from_entropy(b"short")


@pytest.mark.parametrize("bad", ["", "short", "x" * 65, "has space!", "semi;colon", 12345678])
def test_token_shape_is_enforced(bad: object) -> None:
    with pytest.raises(ValueError, match="claim token"):
        ClaimToken(bad)  # type: ignore[arg-type]


def test_claimed_row_needs_aware_times_and_a_counted_attempt() -> None:
    assert make_row().attempts == 1
    with pytest.raises(ValueError, match="timezone-aware"):
        make_row(created_at=datetime(2026, 1, 1))  # noqa: DTZ001 - the naive value under test
    with pytest.raises(ValueError, match="attempts"):
        make_row(attempts=0)


def test_named_mark_constructors_carry_the_claim_token() -> None:
    row = make_row()
    keys = frozenset({"password_reset_url"})
    assert Mark.dispatched(row, scrub_keys=keys) == Mark(
        7, TOKEN, Status.DISPATCHED, None, None, keys
    )
    assert Mark.skipped(row, "opted out", scrub_keys=keys).scrub_keys == keys
    assert Mark.failed(row, "550").status is Status.FAILED
    retry = Mark.retry(row, "451", delay=timedelta(minutes=1))
    assert retry.status is Status.PENDING
    assert retry.retry_delay == timedelta(minutes=1)
    assert retry.token is TOKEN


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"status": Status.PENDING, "reason": "x"}, "needs retry_delay"),
        (
            {"status": Status.FAILED, "reason": "x", "retry_delay": timedelta(0)},
            "needs retry_delay",
        ),
        ({"status": Status.FAILED, "reason": "x", "scrub_keys": {"pdf"}}, "keeps it whole"),
        ({"status": Status.FAILED}, "needs a reason"),
        ({"status": Status.SKIPPED}, "needs a reason"),
        (
            {"status": Status.PENDING, "reason": "x", "retry_delay": timedelta(seconds=-1)},
            "must not be negative",
        ),
    ],
)
def test_marks_that_cannot_exist_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Mark(row_id=1, token=TOKEN, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", ["email", "a", "x" * 64, "billing.v2_eu-1"])
def test_a_lane_name_is_lower_case_letters_digits_and_dot_dash_underscore(good: str) -> None:
    assert check_lane_name(good) == good


@pytest.mark.parametrize("bad", ["", "Email", "email ", "x" * 65, "e/mail", None, 7])
def test_a_lane_name_outside_the_rule_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(
        ValueError, match=r"^a lane name is 1 to 64 characters of \[a-z0-9_.-\], got"
    ):
        check_lane_name(bad)


def test_a_refused_lane_name_is_shown_short() -> None:
    with pytest.raises(ValueError, match="lane name") as caught:
        check_lane_name("X" * 1000)
    assert str(caught.value).endswith("got '" + "X" * 79)  # the repr, cut at 80 characters


def test_a_claimed_row_may_carry_the_stored_text_of_an_undecodable_payload() -> None:
    assert make_row(payload='{"to": 99999}').payload == '{"to": 99999}'


def test_new_message_validates_lane_payload_and_key() -> None:
    message = NewMessage("email", {"to": "a@example.org"}, idempotency_key="order-42/receipt")
    assert message.not_before is None
    with pytest.raises(ValueError, match="lane name"):
        NewMessage("Email Lane", {})
    with pytest.raises(TypeError, match="a payload is a mapping"):
        NewMessage("email", ["not", "an", "object"])  # type: ignore[arg-type]
    for key in ("", "x" * 201, "tab\there"):
        with pytest.raises(ValueError, match="idempotency key"):
            NewMessage("email", {}, idempotency_key=key)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"status": Status.DISPATCHED, "disable_endpoint": True},
            "only a failed mark disables an endpoint (HTTP 410 Gone)",
        ),
        (
            {"status": Status.SKIPPED, "reason": "opted out", "recorded": True},
            "only a dispatched mark can have been recorded by its handler",
        ),
    ],
)
def test_a_mark_refused_for_its_status_says_exactly_why(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        Mark(row_id=1, token=TOKEN, **kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == message
