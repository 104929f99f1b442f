# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Standard Webhooks signing and verification (catalogue C9), checked against the spec's vector and
the `standardwebhooks` package as an oracle (tests only; the core never imports it)."""

from __future__ import annotations

import base64
import hmac
import re
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError as OracleVerificationError

from outbox_core.errors import ConfigurationError, InvalidMessage, WebhookVerificationError
from outbox_core.signing import (
    DEFAULT_TOLERANCE,
    WebhookSecret,
    sign,
    signature_header,
    verify,
    webhook_headers,
)

# The known-answer vector published with the Standard Webhooks reference libraries.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TS = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

OLD = WebhookSecret(b"o" * 32)
NEW = WebhookSecret(b"n" * 32)
OTHER = WebhookSecret(b"x" * 32)
TS = 1_700_000_000
BODY = b'{"type":"invoice.paid"}'

secret_keys = st.binary(min_size=24, max_size=64)
msg_ids = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters="."),
    min_size=1,
    max_size=40,
)


def headers_for(secrets, *, msg_id="msg_1", timestamp=TS, body=BODY):
    return webhook_headers(secrets, msg_id=msg_id, timestamp=timestamp, body=body)


def refused(headers, body=BODY, secrets=(OLD,), now=TS, **kwargs) -> str:
    with pytest.raises(WebhookVerificationError) as info:
        verify(headers, body, list(secrets), now=now, **kwargs)
    return str(info.value)


# --- the known-answer vector ----------------------------------------------------------------------


def test_known_answer_vector() -> None:
    secret = WebhookSecret.parse(VECTOR_SECRET)
    assert sign(secret, msg_id=VECTOR_ID, timestamp=VECTOR_TS, body=VECTOR_BODY) == VECTOR_SIGNATURE
    headers = webhook_headers([secret], msg_id=VECTOR_ID, timestamp=VECTOR_TS, body=VECTOR_BODY)
    assert headers == {
        "webhook-id": VECTOR_ID,
        "webhook-timestamp": str(VECTOR_TS),
        "webhook-signature": VECTOR_SIGNATURE,
    }
    verify(headers, VECTOR_BODY, [secret], now=VECTOR_TS)


# --- secrets --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        VECTOR_SECRET,
        VECTOR_SECRET.removeprefix("whsec_"),
        f"  {VECTOR_SECRET}\n",
        "whsec_" + base64.b64encode(b"k" * 25).decode().rstrip("="),  # unpadded
    ],
)
def test_parse_accepts_prefixed_bare_and_unpadded_base64(text: str) -> None:
    secret = WebhookSecret.parse(text)
    expected = base64.b64decode(text.strip().removeprefix("whsec_") + "==")
    assert secret.key == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("whsec_", "is empty"),
        ("whsec_ab!d" + "A" * 40, "not standard base64"),
        ("whsec_" + "A" * 33 + "=" * 3, "not standard base64"),
        ("whsec_" + "A" * 33, "cannot decode"),  # 33 characters: no base64 length
        ("whsec_" + base64.b64encode(b"k" * 16).decode(), "16 bytes is refused"),
        ("whsec_" + base64.b64encode(b"k" * 65).decode(), "65 bytes is refused"),
        (None, "must be text"),
    ],
)
def test_parse_refuses_bad_secrets_without_repeating_them(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        WebhookSecret.parse(text)
    if text and text.removeprefix("whsec_"):
        assert text.removeprefix("whsec_") not in str(info.value)


@pytest.mark.parametrize("size", [24, 32, 64])
def test_generate_from_accepts_the_spec_range_and_round_trips_as_text(size: int) -> None:
    secret = WebhookSecret.generate_from(bytes(range(size)))
    assert secret.to_text().startswith("whsec_")
    assert WebhookSecret.parse(secret.to_text()) == secret


@pytest.mark.parametrize(("entropy", "message"), [(b"k" * 23, "23 bytes"), ("k" * 32, "bytes")])
def test_generate_from_refuses_short_or_non_bytes_entropy(entropy: bytes, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        WebhookSecret.generate_from(entropy)


def test_repr_and_str_never_show_the_key() -> None:
    secret = WebhookSecret.parse(VECTOR_SECRET)
    for shown in (repr(secret), str(secret), f"{secret}", repr([secret])):
        assert "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" not in shown
        assert repr(secret.key) not in shown
        assert "redacted, 24 bytes" in shown


# --- signing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("msg_id", "message"),
    [
        ("", "is empty"),
        ("msg.1", "contains '.'"),
        ("msg 1", "whitespace"),
        ("msg_1\r\nX-Injected: 1", "control"),
        ("msg_\u00e9", "non-ASCII"),
    ],
)
def test_sign_refuses_unsafe_message_ids(msg_id: str, message: str) -> None:
    with pytest.raises(InvalidMessage, match=message):
        sign(OLD, msg_id=msg_id, timestamp=TS, body=BODY)


@pytest.mark.parametrize(
    ("timestamp", "message"),
    [(True, "must be an int"), ("1700000000", "must be an int"), (-1, "not Unix"), (10**12, "not")],
)
def test_sign_refuses_bad_timestamps(timestamp: int, message: str) -> None:
    with pytest.raises(InvalidMessage, match=message):
        sign(OLD, msg_id="msg_1", timestamp=timestamp, body=BODY)


def test_signature_header_needs_a_secret() -> None:
    with pytest.raises(ConfigurationError, match="at least one webhook secret"):
        signature_header([], msg_id="msg_1", timestamp=TS, body=BODY)


def test_rotation_sends_one_signature_per_secret_in_order() -> None:
    header = signature_header([NEW, OLD], msg_id="msg_1", timestamp=TS, body=BODY)
    assert header.split(" ") == [
        sign(NEW, msg_id="msg_1", timestamp=TS, body=BODY),
        sign(OLD, msg_id="msg_1", timestamp=TS, body=BODY),
    ]
    same_twice = signature_header([OLD, OLD], msg_id="msg_1", timestamp=TS, body=BODY)
    assert same_twice == sign(OLD, msg_id="msg_1", timestamp=TS, body=BODY)


@pytest.mark.parametrize(
    "receiver_knows",
    [[OLD], [NEW], [NEW, OLD], [OTHER, NEW]],
    ids=["old", "new", "both", "other+new"],
)
def test_rotation_a_receiver_knowing_either_secret_verifies(receiver_knows) -> None:
    headers = headers_for([OLD, NEW])
    verify(headers, BODY, receiver_knows, now=TS)


def test_rotation_a_receiver_knowing_neither_secret_refuses() -> None:
    assert "matches any of the 1 secrets" in refused(headers_for([OLD, NEW]), secrets=[OTHER])


def test_a_fresh_timestamp_gives_a_fresh_signature() -> None:
    first = headers_for([OLD], timestamp=TS)
    retry = headers_for([OLD], timestamp=TS + 600)
    assert first["webhook-id"] == retry["webhook-id"]
    assert first["webhook-signature"] != retry["webhook-signature"]
    # The first attempt's headers replayed 10 minutes later are refused; the retry's verify.
    assert "too old" in refused(first, now=TS + 600)
    verify(retry, BODY, [OLD], now=TS + 600)


# --- the oracle -----------------------------------------------------------------------------------


@given(key=secret_keys, msg_id=msg_ids, offset=st.integers(-200, 200), text=st.text(max_size=200))
def test_oracle_verifies_what_we_sign(key: bytes, msg_id: str, offset: int, text: str) -> None:
    # The oracle checks timestamps against its own clock, so the TEST reads the clock.
    body = text.encode()  # the oracle decodes bodies as UTF-8
    secret = WebhookSecret(key)
    timestamp = int(time.time()) + offset
    headers = webhook_headers([secret], msg_id=msg_id, timestamp=timestamp, body=body)
    Webhook(secret.to_text()).verify(body, headers, json_parse=False)
    # ...and refuses it when the body changed: the oracle really checks what we signed.
    with pytest.raises(OracleVerificationError):
        Webhook(secret.to_text()).verify(body + b"!", headers, json_parse=False)


@given(
    keys=st.lists(secret_keys, min_size=1, max_size=3, unique=True),
    msg_id=msg_ids,
    timestamp=st.integers(0, 4_000_000_000),
    text=st.text(max_size=200),
)
def test_we_verify_what_the_oracle_signs(
    keys: list[bytes], msg_id: str, timestamp: int, text: str
) -> None:
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    oracle_signatures = [Webhook(k).sign(msg_id, when, text) for k in keys]
    headers = {
        "Webhook-Id": msg_id,
        "Webhook-Timestamp": str(timestamp),
        "Webhook-Signature": " ".join(oracle_signatures),
    }
    body = text.encode()
    verify(headers, body, [WebhookSecret(keys[-1])], now=timestamp)
    assert signature_header(
        [WebhookSecret(k) for k in keys], msg_id=msg_id, timestamp=timestamp, body=body
    ) == " ".join(oracle_signatures)


# --- verification: what is refused, and why -------------------------------------------------------

GOOD = headers_for([OLD])
GOOD_SIG = GOOD["webhook-signature"]
OTHER_SIG = sign(OTHER, msg_id="msg_1", timestamp=TS, body=BODY)
#: A well-formed v1a entry (64 bytes) that no key of these tests made.
V1A_FORM = "v1a," + base64.b64encode(b"e" * 64).decode()


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "missing .*webhook-id, webhook-timestamp, webhook-signature"),
        (
            {**GOOD, "webhook-signature": ""},
            "missing \\(or has empty\\) headers: webhook-signature",
        ),
        ({**GOOD, "Webhook-Id": "msg_2"}, "webhook-id header is given more than once"),
        ({**GOOD, "webhook-timestamp": TS}, "webhook-timestamp header is not text"),
        ({1: "x", "webhook-timestamp": str(TS), "webhook-signature": GOOD_SIG}, "webhook-id$"),
        (
            {
                "webhoo\u212a-id": "msg_1",
                "webhook-timestamp": str(TS),
                "webhook-signature": GOOD_SIG,
            },
            "missing .*webhook-id$",
        ),
        ({**GOOD, "webhook-id": "msg.1"}, "webhook-id header contains '.'"),
        ({**GOOD, "webhook-id": "msg 1"}, "webhook-id header contains whitespace"),
        ({**GOOD, "webhook-timestamp": "17e8"}, "not Unix seconds"),
        ({**GOOD, "webhook-timestamp": "-1"}, "not Unix seconds"),
        ({**GOOD, "webhook-timestamp": f"{TS}.5"}, "not Unix seconds"),
        ({**GOOD, "webhook-timestamp": f" {TS}"}, "not Unix seconds"),
        ({**GOOD, "webhook-timestamp": "\u0661\u0667"}, "not Unix seconds"),  # Arabic-Indic digits
        ({**GOOD, "webhook-timestamp": "9" * 13}, "not Unix seconds"),
        ({**GOOD, "webhook-signature": f"{GOOD_SIG}  {OTHER_SIG}"}, "empty entry"),
        ({**GOOD, "webhook-signature": f"{GOOD_SIG} "}, "empty entry"),
        ({**GOOD, "webhook-signature": "v1"}, "no ',' between version and signature"),
        ({**GOOD, "webhook-signature": ",abc"}, "no version before"),
        ({**GOOD, "webhook-signature": "v1,not base64!"}, "not the base64 of a 32-byte"),
        ({**GOOD, "webhook-signature": "v1,"}, "not the base64 of a 32-byte"),
        ({**GOOD, "webhook-signature": "v1,AAAA"}, "not the base64 of a 32-byte"),
        ({**GOOD, "webhook-signature": f"{V1A_FORM} v2,BBBB"}, "no v1 signature \\(2 of other"),
        # A v1a entry is checked for form like a v1 entry, whichever keys the receiver holds.
        ({**GOOD, "webhook-signature": f"{GOOD_SIG} v1a,AAAA"}, "not the base64 of a 64-byte"),
        ({**GOOD, "webhook-signature": OTHER_SIG}, "no v1 signature in the webhook matches"),
        # A malformed entry refuses the header even beside a valid signature.
        ({**GOOD, "webhook-signature": f"{GOOD_SIG} v1,AAAA"}, "not the base64"),
    ],
)
def test_verify_refuses_with_a_message_naming_the_problem(headers, message: str) -> None:
    assert_refused_with(headers, message)


def assert_refused_with(headers, message) -> None:
    text = refused(headers)
    assert re.search(message, text), text
    assert base64.b64encode(OLD.key).decode() not in text
    assert GOOD_SIG.removeprefix("v1,") not in text


def test_other_versions_are_skipped_when_a_v1_matches() -> None:
    verify({**GOOD, "webhook-signature": f"{V1A_FORM} {GOOD_SIG} v2,xyz"}, BODY, [OLD], now=TS)


def test_header_names_are_case_insensitive() -> None:
    shouting = {name.upper(): value for name, value in GOOD.items()}
    verify(shouting, BODY, [OLD], now=TS)


@pytest.mark.parametrize("body", [bytearray(BODY), memoryview(BODY)])
def test_bytes_like_bodies_verify(body) -> None:
    verify(GOOD, body, [OLD], now=TS)


def test_a_text_body_is_refused() -> None:
    assert "raw request bytes" in refused(GOOD, body=BODY.decode())


@pytest.mark.parametrize(
    ("field", "value"),
    [("webhook-id", "msg_2"), ("webhook-timestamp", str(TS + 1)), ("body", BODY + b" ")],
)
def test_tampering_with_id_timestamp_or_body_is_refused(field: str, value) -> None:
    headers, body = dict(GOOD), BODY
    if field == "body":
        body = value
    else:
        headers[field] = value
    assert "no v1 signature in the webhook matches" in refused(headers, body=body)


def test_a_flipped_signature_bit_is_refused() -> None:
    raw = bytearray(base64.b64decode(GOOD_SIG.removeprefix("v1,")))
    raw[0] ^= 1
    flipped = "v1," + base64.b64encode(bytes(raw)).decode()
    assert "matches" in refused({**GOOD, "webhook-signature": flipped})


def test_signatures_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    verify(GOOD, BODY, [OLD], now=TS)
    assert calls


# --- the tolerance window -------------------------------------------------------------------------

TOLERANCE_SECONDS = int(DEFAULT_TOLERANCE.total_seconds())


@pytest.mark.parametrize(
    ("now", "problem"),
    [
        (TS, None),
        (TS + TOLERANCE_SECONDS, None),  # edges are inside
        (TS - TOLERANCE_SECONDS, None),
        (TS + TOLERANCE_SECONDS + 1, "too old"),
        (TS - TOLERANCE_SECONDS - 1, "too new"),
        (datetime.fromtimestamp(TS, tz=UTC) + DEFAULT_TOLERANCE, None),
        (datetime.fromtimestamp(TS, tz=UTC) + DEFAULT_TOLERANCE + timedelta(microseconds=1), "old"),
        (datetime.fromtimestamp(TS, tz=UTC) - DEFAULT_TOLERANCE - timedelta(microseconds=1), "new"),
        # Any timezone: the instant is what counts.
        (datetime.fromtimestamp(TS, tz=timezone(timedelta(hours=-7))), None),
    ],
)
def test_tolerance_window_edges(now, problem: str | None) -> None:
    if problem is None:
        verify(GOOD, BODY, [OLD], now=now)
    else:
        assert problem in refused(GOOD, now=now)


def test_tolerance_is_configurable_down_to_zero() -> None:
    verify(GOOD, BODY, [OLD], now=TS, tolerance=timedelta(0))
    assert "too old" in refused(GOOD, now=TS + 1, tolerance=timedelta(0))
    verify(GOOD, BODY, [OLD], now=TS + 3600, tolerance=timedelta(hours=1))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"secrets": []}, "at least one webhook secret"),
        ({"now": datetime(2024, 1, 1)}, "timezone-aware"),  # noqa: DTZ001 - naive on purpose
        ({"now": True}, "Unix seconds"),
        ({"now": "1700000000"}, "Unix seconds"),
        ({"tolerance": timedelta(seconds=-1)}, "non-negative timedelta"),
        ({"tolerance": 300}, "non-negative timedelta"),
    ],
)
def test_receiver_misconfiguration_is_a_configuration_error(kwargs, message: str) -> None:
    arguments = {"secrets": [OLD], "now": TS, **kwargs}
    with pytest.raises(ConfigurationError, match=message):
        verify(GOOD, BODY, **arguments)


# --- verify never raises anything else ------------------------------------------------------------

header_names = st.sampled_from(
    ["webhook-id", "Webhook-Id", "WEBHOOK-TIMESTAMP", "webhook-timestamp", "webhook-signature"]
) | st.text(max_size=20)
signature_entries = st.builds(
    "{},{}".format,
    st.sampled_from(["v1", "v1a", "", "v2"]) | st.text(max_size=4),
    st.sampled_from([GOOD_SIG.removeprefix("v1,"), "AAAA", ""]) | st.text(max_size=50),
)
header_values = (
    st.text(max_size=60)
    | st.integers(-(10**14), 10**14).map(str)
    | st.lists(signature_entries | st.text(max_size=10), max_size=4).map(" ".join)
    | st.sampled_from(list(GOOD.values()))
    | st.none()
    | st.integers()
    | st.binary(max_size=10)
)


@given(
    headers=st.dictionaries(header_names | st.integers(), header_values, max_size=6),
    body=st.binary(max_size=50) | st.text(max_size=20) | st.none(),
    now=st.integers(0, 10**13),
)
def test_verify_raises_only_webhook_verification_error(headers, body, now: int) -> None:
    message = ""
    try:
        verify(headers, body, [OLD], now=now)
    except WebhookVerificationError as error:
        message = str(error)
    assert base64.b64encode(OLD.key).decode() not in message
    assert GOOD_SIG.removeprefix("v1,") not in message


@given(
    msg_id=st.text(max_size=20),
    timestamp=st.text(max_size=14),
    signature=st.text(max_size=80),
)
def test_verify_never_accepts_what_it_did_not_sign(msg_id: str, timestamp: str, signature: str):
    headers = {"webhook-id": msg_id, "webhook-timestamp": timestamp, "webhook-signature": signature}
    with pytest.raises(WebhookVerificationError):
        verify(headers, BODY, [OLD], now=TS)


# --- found by mutation testing (docs/testing.md) -----------------------------------------------


def test_an_unpadded_32_byte_secret_parses() -> None:
    # 32 bytes are 43 base64 characters and one "=": the parser must add exactly that one.
    key = bytes(range(32))
    bare = base64.b64encode(key).decode().rstrip("=")
    assert len(bare) % 4 == 3
    assert WebhookSecret.parse("whsec_" + bare).key == key


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (" ", "the webhook secret is empty"),
        (
            "whsec_ab!d" + "A" * 40,
            "the webhook secret is not standard base64 (after the optional 'whsec_' prefix)",
        ),
        ("A" * 33, "the webhook secret's base64 has a length or padding that cannot decode"),
        (42, "a webhook secret must be text, got int"),
    ],
)
def test_secret_refusals_are_whole_sentences(text, message: str) -> None:
    with pytest.raises(ConfigurationError) as refused_:
        WebhookSecret.parse(text)
    assert str(refused_.value) == message


def test_a_key_that_is_not_bytes_is_refused_naming_its_type() -> None:
    with pytest.raises(ConfigurationError) as refused_:
        WebhookSecret("k" * 32)  # type: ignore[arg-type]
    assert str(refused_.value) == "a webhook secret's key must be bytes, got str"


def test_sign_and_verify_refusals_are_whole_sentences() -> None:
    with pytest.raises(InvalidMessage) as empty_id:
        sign(OLD, msg_id="", timestamp=TS, body=BODY)
    assert str(empty_id.value) == "the webhook message id '' is empty"
    with pytest.raises(ConfigurationError) as no_signer:
        signature_header([], msg_id="msg_1", timestamp=TS, body=BODY)
    assert str(no_signer.value) == "at least one webhook secret is needed to sign a webhook"
    with pytest.raises(ConfigurationError) as no_verifier:
        verify(GOOD, BODY, [], now=TS)
    assert str(no_verifier.value) == "at least one webhook secret is needed to verify a webhook"


@pytest.mark.parametrize(
    ("headers", "body", "now", "message"),
    [
        (
            {**GOOD, "webhook-timestamp": "17e8"},
            BODY,
            TS,
            "the webhook-timestamp header is not Unix seconds (1 to 12 ASCII digits)",
        ),
        (
            GOOD,
            BODY,
            TS + 400,
            (
                f"the webhook timestamp {TS} is 400 s before now, beyond the 300 s tolerance"
                " (too old: a replay?)"
            ),
        ),
        (
            GOOD,
            BODY,
            TS - 400,
            f"the webhook timestamp {TS} is 400 s after now, beyond the 300 s tolerance (too new)",
        ),
        (
            GOOD,
            BODY.decode(),
            TS,
            "the webhook body must be the raw request bytes, not decoded text",
        ),
        (
            {**GOOD, "webhook-signature": f"{GOOD_SIG}  {GOOD_SIG}"},
            BODY,
            TS,
            "the webhook-signature header has an empty entry (a doubled or edge space)",
        ),
        (
            {**GOOD, "webhook-signature": "v1"},
            BODY,
            TS,
            "a webhook-signature entry has no ',' between version and signature",
        ),
        (
            {**GOOD, "webhook-signature": ",abc"},
            BODY,
            TS,
            "a webhook-signature entry has no version before its ','",
        ),
        (
            {**GOOD, "webhook-signature": "v1,AAAA"},
            BODY,
            TS,
            "a v1 signature is not the base64 of a 32-byte HMAC-SHA256",
        ),
        (
            {**GOOD, "webhook-signature": OTHER_SIG},
            BODY,
            TS,
            (
                "no v1 signature in the webhook matches any of the 1 secrets (wrong secret, or the"
                " id, timestamp or body changed on the way)"
            ),
        ),
    ],
)
def test_verify_refusals_are_whole_sentences(headers, body, now: int, message: str) -> None:
    with pytest.raises(WebhookVerificationError) as refused_:
        verify(headers, body, [OLD], now=now, tolerance=timedelta(seconds=300))
    assert str(refused_.value) == message


def test_a_v1_entry_with_a_second_comma_is_malformed_not_skipped() -> None:
    # "v1,<sig>,x" is a v1 entry whose signature is not base64; it must not read as version
    # "v1,<sig>" (unknown, skipped) and let the valid signature beside it through.
    headers = {**GOOD, "webhook-signature": f"{GOOD_SIG} {GOOD_SIG},x"}
    assert_refused_with(headers, "^a v1 signature is not the base64 of a 32-byte HMAC-SHA256$")


def test_unrelated_headers_before_the_webhook_headers_are_ignored() -> None:
    headers = {"content-type": "application/json", "x-trace": "abc", **GOOD}
    verify(headers, BODY, [OLD], now=TS)
