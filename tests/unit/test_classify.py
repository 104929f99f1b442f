"""Catalogue C5: SMTP replies and HTTP results classified into outcomes (outbox_core.classify)."""

from __future__ import annotations

import enum
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_core import classify
from outbox_core.classify import (
    HttpAttempt,
    HttpFailure,
    SmtpStage,
    classify_http,
    classify_smtp_failure,
    classify_smtp_reply,
    parse_retry_after,
)
from outbox_core.outcomes import Outcome, OutcomeKind

NOW = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
SENT = OutcomeKind.SENT
TRANSIENT = OutcomeKind.TRANSIENT
PERMANENT = OutcomeKind.PERMANENT
UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def assert_safe_reason(reason: str) -> None:
    assert len(reason) <= 200
    assert "\r" not in reason
    assert "\n" not in reason
    assert not [char for char in reason if unicodedata.category(char) in UNSAFE]


def test_public_surface() -> None:
    assert sorted(classify.__all__) == [
        "FAILURES_BEFORE_SENDING",
        "HttpAttempt",
        "HttpFailure",
        "SmtpStage",
        "classify_http",
        "classify_smtp_failure",
        "classify_smtp_reply",
        "parse_retry_after",
    ]


# --- SMTP replies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "message", "kind", "reason"),
    [
        # 2xx: accepted.
        (250, "2.0.0 Ok: queued as 4F2A", SENT, ""),
        (250, "", SENT, ""),
        (251, "User not local; will forward", SENT, ""),
        (299, "", SENT, ""),
        # 4xx: try again later.
        (421, "4.3.2 Service shutting down", TRANSIENT, "SMTP 421 4.3.2: Service shutting down"),
        (450, "Mailbox busy", TRANSIENT, "SMTP 450: Mailbox busy"),
        (451, "", TRANSIENT, "SMTP 451"),
        (452, "4.2.2 Mailbox full", TRANSIENT, "SMTP 452 4.2.2: Mailbox full"),
        # 5xx: fail at once.
        (550, "5.1.1 User unknown", PERMANENT, "SMTP 550 5.1.1: User unknown"),
        (554, "Transaction failed", PERMANENT, "SMTP 554: Transaction failed"),
        (554, "5.7.1", PERMANENT, "SMTP 554 5.7.1"),
        (552, "5.3.4 Message too big", PERMANENT, "SMTP 552 5.3.4: Message too big"),
        (599, "", PERMANENT, "SMTP 599"),
        # A bad password is a 535 reply: failed at once, not retried against the server.
        (
            535,
            "5.7.8 Authentication credentials invalid",
            PERMANENT,
            "SMTP 535 5.7.8: Authentication credentials invalid",
        ),
    ],
)
def test_reply_code_class_decides(code: int, message: str, kind: OutcomeKind, reason: str) -> None:
    outcome = classify_smtp_reply(code, message)
    assert outcome.kind is kind
    assert outcome.reason == reason
    assert not outcome.maybe_delivered
    assert outcome.retry_after is None


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        # Leading and repeated whitespace does not hide the code.
        (550, "  5.1.1   User  unknown ", "SMTP 550 5.1.1: User unknown"),
        # Up to three digits per sub-code (RFC 3463 §2).
        (550, "5.123.456 odd", "SMTP 550 5.123.456: odd"),
        # Not an enhanced code: the text is kept whole.
        (550, "5.1.1User unknown", "SMTP 550: 5.1.1User unknown"),
        (550, "3.1.1 no such class", "SMTP 550: 3.1.1 no such class"),
        (550, "5.1234.1 too long", "SMTP 550: 5.1234.1 too long"),
        (550, "5.1 too short", "SMTP 550: 5.1 too short"),
        (550, "5.1.1.1 too many", "SMTP 550: 5.1.1.1 too many"),
        (550, "Error 5.1.1 not at the start", "SMTP 550: Error 5.1.1 not at the start"),
        (550, "\u0665.\u0661.\u0661 not ASCII", "SMTP 550: \u0665.\u0661.\u0661 not ASCII"),
        # Multi-line replies: the code repeated on each line is said once.
        (
            550,
            "5.1.1 The email account does not exist.\r\n5.1.1 Please double-check.\r\n5.1.1",
            "SMTP 550 5.1.1: The email account does not exist. Please double-check.",
        ),
        (550, "\r\n5.1.1 first line was blank", "SMTP 550 5.1.1: first line was blank"),
        # Only the same code is dropped from later lines.
        (550, "5.1.1 a\n5.7.1 b\n5.1.10 c", "SMTP 550 5.1.1: a 5.7.1 b 5.1.10 c"),
    ],
)
def test_enhanced_status_code_goes_into_the_reason(code: int, message: str, reason: str) -> None:
    assert classify_smtp_reply(code, message).reason == reason


@pytest.mark.parametrize(
    ("code", "message", "kind", "reason"),
    [
        (
            450,
            "5.1.1 User unknown",
            TRANSIENT,
            "SMTP 450 5.1.1 (enhanced code disagrees, reply code wins): User unknown",
        ),
        (
            550,
            "4.2.2 Mailbox full",
            PERMANENT,
            "SMTP 550 4.2.2 (enhanced code disagrees, reply code wins): Mailbox full",
        ),
        (
            550,
            "2.0.0 Ok",
            PERMANENT,
            "SMTP 550 2.0.0 (enhanced code disagrees, reply code wins): Ok",
        ),
        (250, "5.0.0 not really", SENT, ""),
    ],
)
def test_reply_code_wins_over_a_disagreeing_enhanced_code(
    code: int, message: str, kind: OutcomeKind, reason: str
) -> None:
    outcome = classify_smtp_reply(code, message)
    assert outcome.kind is kind
    assert outcome.reason == reason


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (354, "SMTP unexpected reply 354: Start mail input"),
        (334, "SMTP unexpected reply 334: Start mail input"),
        (300, "SMTP unexpected reply 300: Start mail input"),
        (199, "SMTP unexpected reply 199: Start mail input"),
        (100, "SMTP unexpected reply 100: Start mail input"),
        (600, "SMTP unexpected reply 600: Start mail input"),
        (999, "SMTP unexpected reply 999: Start mail input"),
        (0, "SMTP unexpected reply 0: Start mail input"),
        (-250, "SMTP unexpected reply (code out of range): Start mail input"),
        (1000, "SMTP unexpected reply (code out of range): Start mail input"),
        pytest.param(
            10**5000, "SMTP unexpected reply (code out of range): Start mail input", id="huge"
        ),
    ],
)
def test_a_non_final_or_invalid_reply_is_transient(code: int, reason: str) -> None:
    outcome = classify_smtp_reply(code, "Start mail input")
    assert outcome == Outcome.transient(reason, maybe_delivered=False)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("User\r\nBcc: x@example.org", "SMTP 550: User Bcc: x@example.org"),
        ("5.1.1 User\x00un\x1bknown\x7f!", "SMTP 550 5.1.1: User un known !"),
        ("5.1.1 bidi\u202eevil\u200b zero-width", "SMTP 550 5.1.1: bidi evil zero-width"),
        ("line\u2028separator\u2029para\x85nel", "SMTP 550: line separator para nel"),
        ("5.1.1 \ud800 lone surrogate", "SMTP 550 5.1.1: lone surrogate"),
        ("\t\v\f", "SMTP 550"),
    ],
)
def test_peer_text_is_made_plain(message: str, reason: str) -> None:
    assert classify_smtp_reply(550, message).reason == reason


def test_a_long_reply_is_truncated_to_200_characters() -> None:
    reason = classify_smtp_reply(550, "5.1.1 " + "x" * 5000).reason
    assert len(reason) == 200
    assert reason.startswith("SMTP 550 5.1.1: xxx")
    assert reason.endswith("x…")
    assert classify_smtp_reply(550, "y" * 190).reason == "SMTP 550: " + "y" * 190


def test_a_truncated_reason_drops_the_space_before_the_ellipsis() -> None:
    # The cut lands just after a space: the reason ends "word…", never "word …".
    reason = classify_smtp_reply(550, "y" * 188 + " " + "z" * 50).reason
    assert reason == "SMTP 550: " + "y" * 188 + "…"


@pytest.mark.parametrize(
    ("code", "kind"), [(451, TRANSIENT), (550, PERMANENT), (354, TRANSIENT), (999, TRANSIENT)]
)
def test_a_reply_without_text_has_a_reason_of_the_code_alone(code: int, kind: OutcomeKind) -> None:
    outcome = classify_smtp_reply(code)
    assert outcome.kind is kind
    assert outcome.reason in {f"SMTP {code}", f"SMTP unexpected reply {code}"}
    assert ":" not in outcome.reason


@given(code=st.integers(200, 599), message=st.text())
def test_the_outcome_class_follows_the_first_digit(code: int, message: str) -> None:
    expected = {2: SENT, 3: TRANSIENT, 4: TRANSIENT, 5: PERMANENT}[code // 100]
    assert classify_smtp_reply(code, message).kind is expected


@given(
    code=st.one_of(st.integers(), st.integers(100, 999)),
    message=st.text(alphabet=st.characters(exclude_categories=()), max_size=1000)
    | st.text(alphabet="\r\n\x00\x1b\u2028 5.1x", max_size=600),
)
def test_smtp_reasons_are_plain_and_short_whatever_the_reply(code: int, message: str) -> None:
    outcome = classify_smtp_reply(code, message)
    assert_safe_reason(outcome.reason)
    assert not outcome.maybe_delivered


# --- SMTP connection failures -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "maybe_delivered", "reason"),
    [
        (SmtpStage.CONNECT, False, "SMTP failure at connect: timed out"),
        (SmtpStage.TLS, False, "SMTP failure at tls: timed out"),
        (SmtpStage.EHLO, False, "SMTP failure at ehlo: timed out"),
        (SmtpStage.AUTH, False, "SMTP failure at auth: timed out"),
        (SmtpStage.MAIL_FROM, False, "SMTP failure at mail_from: timed out"),
        (SmtpStage.RCPT_TO, False, "SMTP failure at rcpt_to: timed out"),
        # Before the terminating dot the server cancels the transaction: nothing delivered.
        (SmtpStage.DATA, False, "SMTP failure at data: timed out"),
        # After it, the server may have queued the message and lost only the reply.
        (
            SmtpStage.AWAITING_DATA_REPLY,
            True,
            "SMTP no reply after the message was sent (may be delivered): timed out",
        ),
    ],
)
def test_a_connection_failure_is_transient_and_maybe_delivered_only_after_the_dot(
    stage: SmtpStage, maybe_delivered: bool, reason: str
) -> None:
    assert classify_smtp_failure(stage, "timed out") == Outcome.transient(
        reason, maybe_delivered=maybe_delivered
    )


def test_every_smtp_stage_is_in_the_failure_table() -> None:
    assert {stage for stage in SmtpStage if classify_smtp_failure(stage, "x").maybe_delivered} == {
        SmtpStage.AWAITING_DATA_REPLY
    }


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("", "SMTP failure at tls"),
        (
            "STARTTLS not advertised\r\nEHLO evil",
            "SMTP failure at tls: STARTTLS not advertised EHLO evil",
        ),
        (
            "certificate verify failed: hostname mismatch",
            "SMTP failure at tls: certificate verify failed: hostname mismatch",
        ),
    ],
)
def test_failure_text_is_made_plain(error: str, reason: str) -> None:
    assert classify_smtp_failure(SmtpStage.TLS, error).reason == reason


@given(stage=st.sampled_from(SmtpStage), error=st.text(max_size=1000))
def test_smtp_failure_reasons_are_plain_and_short(stage: SmtpStage, error: str) -> None:
    outcome = classify_smtp_failure(stage, error)
    assert outcome.kind is TRANSIENT
    assert_safe_reason(outcome.reason)


# --- HTTP statuses ------------------------------------------------------------------------------

SECONDS_120 = timedelta(seconds=120)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, Outcome.sent()),
        (201, Outcome.sent()),
        (204, Outcome.sent()),
        (299, Outcome.sent()),
        # Redirects are never followed; the receiver may fix its URL within the retry budget.
        (301, Outcome.transient("redirect not followed (status 301)")),
        (302, Outcome.transient("redirect not followed (status 302)")),
        (307, Outcome.transient("redirect not followed (status 307)")),
        (308, Outcome.transient("redirect not followed (status 308)")),
        # 4xx: the receiver refused this request; sending it again won't change its mind ...
        (400, Outcome.permanent("receiver rejected the request: 400")),
        (401, Outcome.permanent("receiver rejected the request: 401")),
        (403, Outcome.permanent("receiver rejected the request: 403")),
        (404, Outcome.permanent("receiver rejected the request: 404")),
        (413, Outcome.permanent("receiver rejected the request: 413")),
        (422, Outcome.permanent("receiver rejected the request: 422")),
        (499, Outcome.permanent("receiver rejected the request: 499")),
        # ... except these, which say "not now" ...
        (408, Outcome.transient("receiver did not process the request (status 408)")),
        (425, Outcome.transient("receiver did not process the request (status 425)")),
        (429, Outcome.transient("rate limited (status 429)", retry_after=SECONDS_120)),
        # ... and 410, which says "never again" for the whole endpoint.
        (410, Outcome.permanent("endpoint gone (status 410)", disable_endpoint=True)),
        # 5xx: the receiver failed while handling the request, so it may have acted on it.
        (500, Outcome.transient("receiver error: 500", maybe_delivered=True)),
        (502, Outcome.transient("receiver error: 502", maybe_delivered=True)),
        (504, Outcome.transient("receiver error: 504", maybe_delivered=True)),
        (599, Outcome.transient("receiver error: 599", maybe_delivered=True)),
        (503, Outcome.transient("receiver unavailable (status 503)", retry_after=SECONDS_120)),
        (501, Outcome.permanent("receiver cannot handle the request: 501")),
        (505, Outcome.permanent("receiver cannot handle the request: 505")),
        # Codes with no meaning as a final answer.
        (100, Outcome.transient("unexpected status 100", maybe_delivered=True)),
        (101, Outcome.transient("unexpected status 101", maybe_delivered=True)),
        (199, Outcome.transient("unexpected status 199", maybe_delivered=True)),
        (600, Outcome.transient("unexpected status 600", maybe_delivered=True)),
        (999, Outcome.transient("unexpected status 999", maybe_delivered=True)),
        (0, Outcome.transient("unexpected status 0", maybe_delivered=True)),
        (-1, Outcome.transient("unexpected status (code out of range)", maybe_delivered=True)),
        (10**6, Outcome.transient("unexpected status (code out of range)", maybe_delivered=True)),
    ],
)
def test_http_status_table(status: int, expected: Outcome) -> None:
    # Every response carries a Retry-After here: only 429 and 503 may use it.
    attempt = HttpAttempt.response(status, retry_after="120")
    assert classify_http(attempt, now=NOW) == expected


@pytest.mark.parametrize("status", [500, 502, 504, 100, 600])
def test_an_error_answered_before_the_request_went_out_was_not_processed(status: int) -> None:
    outcome = classify_http(HttpAttempt.response(status, request_sent=False), now=NOW)
    assert outcome.kind is TRANSIENT
    assert not outcome.maybe_delivered


@pytest.mark.parametrize(("status", "header"), [(429, None), (503, None), (429, "soon")])
def test_a_missing_or_garbled_retry_after_leaves_the_wait_to_backoff(
    status: int, header: str | None
) -> None:
    outcome = classify_http(HttpAttempt.response(status, retry_after=header), now=NOW)
    assert outcome.kind is TRANSIENT
    assert outcome.retry_after is None


def test_retry_after_as_a_date_is_measured_from_now() -> None:
    attempt = HttpAttempt.response(503, retry_after="Mon, 01 Jan 2024 12:05:00 GMT")
    assert classify_http(attempt, now=NOW).retry_after == timedelta(minutes=5)


class Status(enum.IntEnum):
    OK = 200


def test_an_int_enum_status_is_accepted() -> None:
    assert classify_http(HttpAttempt.response(Status.OK), now=NOW) == Outcome.sent()


@given(
    status=st.integers(100, 599) | st.integers(),
    request_sent=st.booleans(),
    header=st.none() | st.text(max_size=40),
)
def test_every_status_classifies_and_only_2xx_is_sent(
    status: int, request_sent: bool, header: str | None
) -> None:
    attempt = HttpAttempt.response(status, retry_after=header, request_sent=request_sent)
    outcome = classify_http(attempt, now=NOW)
    assert (outcome.kind is SENT) == (200 <= status <= 299)
    assert_safe_reason(outcome.reason)


# --- HTTP failures ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "request_sent", "expected"),
    [
        # Before any byte could leave: surely not sent.
        (HttpFailure.DNS, False, Outcome.transient("DNS lookup failed")),
        (HttpFailure.CONNECT_REFUSED, False, Outcome.transient("connection refused")),
        (HttpFailure.CONNECT_TIMEOUT, False, Outcome.transient("connect timed out")),
        (HttpFailure.TLS, False, Outcome.transient("TLS handshake failed")),
        # Mid-exchange: maybe processed exactly when the peer got part of the request.
        (HttpFailure.WRITE_TIMEOUT, False, Outcome.transient("timed out sending the request")),
        (
            HttpFailure.WRITE_TIMEOUT,
            True,
            Outcome.transient("timed out sending the request", maybe_delivered=True),
        ),
        (
            HttpFailure.READ_TIMEOUT,
            False,
            Outcome.transient("timed out waiting for the response"),
        ),
        (
            HttpFailure.READ_TIMEOUT,
            True,
            Outcome.transient("timed out waiting for the response", maybe_delivered=True),
        ),
        (HttpFailure.RESET, False, Outcome.transient("connection reset")),
        (HttpFailure.RESET, True, Outcome.transient("connection reset", maybe_delivered=True)),
        (HttpFailure.DEADLINE, False, Outcome.transient("attempt deadline reached")),
        (
            HttpFailure.DEADLINE,
            True,
            Outcome.transient("attempt deadline reached", maybe_delivered=True),
        ),
        # A response came but was too big to read: the status is unknown, the request was seen.
        (
            HttpFailure.BODY_TOO_LARGE,
            True,
            Outcome.transient("response too large to read (status unknown)", maybe_delivered=True),
        ),
        (
            HttpFailure.BODY_TOO_LARGE,
            False,
            Outcome.transient("response too large to read (status unknown)", maybe_delivered=True),
        ),
        # The outbound guard said no: it will say no again.
        (
            HttpFailure.BLOCKED_DESTINATION,
            False,
            Outcome.permanent("destination address not allowed"),
        ),
    ],
)
def test_http_failure_table(failure: HttpFailure, request_sent: bool, expected: Outcome) -> None:
    attempt = HttpAttempt.failed(failure, request_sent=request_sent)
    assert classify_http(attempt, now=NOW) == expected


@pytest.mark.parametrize(
    "failure",
    [
        HttpFailure.DNS,
        HttpFailure.CONNECT_REFUSED,
        HttpFailure.CONNECT_TIMEOUT,
        HttpFailure.TLS,
        HttpFailure.BLOCKED_DESTINATION,
    ],
)
def test_a_failure_before_sending_cannot_claim_the_request_was_sent(failure: HttpFailure) -> None:
    with pytest.raises(ValueError, match=f"failure {failure} happens before any request byte"):
        HttpAttempt.failed(failure, request_sent=True)


@given(failure=st.sampled_from(HttpFailure), request_sent=st.booleans())
def test_every_failure_classifies_with_a_fixed_reason(
    failure: HttpFailure, request_sent: bool
) -> None:
    try:
        attempt = HttpAttempt.failed(failure, request_sent=request_sent)
    except ValueError:
        return
    outcome = classify_http(attempt, now=NOW)
    assert outcome.kind is not SENT
    assert outcome.reason
    assert not outcome.maybe_delivered or request_sent or failure is HttpFailure.BODY_TOO_LARGE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"request_sent": True}, "exactly one of a status or a failure"),
        (
            {"status": 500, "failure": HttpFailure.RESET, "request_sent": True},
            "exactly one of a status or a failure",
        ),
        ({"status": True, "request_sent": True}, "must be an int, got True"),
        ({"status": "200", "request_sent": True}, "must be an int, got '200'"),
        (
            {"failure": HttpFailure.RESET, "request_sent": True, "retry_after": "5"},
            "comes with a status, not with failure reset",
        ),
    ],
)
def test_impossible_attempts_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HttpAttempt(**kwargs)  # type: ignore[arg-type]


def test_a_response_assumes_the_request_was_sent() -> None:
    assert HttpAttempt.response(200).request_sent


@pytest.mark.parametrize(
    "now", [NOW.replace(tzinfo=None), "2024-01-01T12:00:00Z"], ids=["naive", "string"]
)
def test_now_must_be_an_aware_datetime(now: object) -> None:
    with pytest.raises(ValueError, match="now must be a timezone-aware datetime"):
        classify_http(HttpAttempt.response(200), now=now)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="now must be a timezone-aware datetime"):
        parse_retry_after("5", now=now)  # type: ignore[arg-type]


# --- Retry-After --------------------------------------------------------------------------------

YEAR = timedelta(days=365)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        # delta-seconds: ASCII digits only.
        ("120", timedelta(seconds=120)),
        ("0", timedelta(0)),
        (" 120\t", timedelta(seconds=120)),
        ("000120", timedelta(seconds=120)),
        ("0" * 30 + "7", timedelta(seconds=7)),
        ("31536000", YEAR),
        ("-5", None),
        ("+5", None),
        ("5.5", None),
        ("1e3", None),
        ("1_000", None),
        ("120 seconds", None),
        # Only OWS (space, tab) is trimmed: other whitespace or junk around the digits is garbage.
        ("120\n", None),
        ("\r\n120", None),
        ("\u00a0120", None),
        ("\x0b120", None),
        ("X120X", None),
        ("\u0663", None),  # ARABIC-INDIC DIGIT THREE
        ("\u00b2", None),  # SUPERSCRIPT TWO
        ("", None),
        ("soon", None),
        # Absurd: over a year, or too many digits to mean anything.
        ("31536001", None),
        ("9" * 20, None),
        ("9" * 5000, None),
        # HTTP-date (IMF-fixdate, RFC 850, asctime), measured from NOW.
        ("Mon, 01 Jan 2024 12:01:00 GMT", timedelta(seconds=60)),
        ("Monday, 01-Jan-24 12:01:00 GMT", timedelta(seconds=60)),
        ("Mon Jan  1 12:01:00 2024", timedelta(seconds=60)),
        ("Mon, 01 Jan 2024 13:01:00 +0100", timedelta(seconds=60)),
        ("Mon, 01 Jan 2024 12:00:00 GMT", timedelta(0)),
        # A date in the past means "now".
        ("Mon, 01 Jan 2024 11:00:00 GMT", timedelta(0)),
        ("Thu, 01 Jan 1970 00:00:00 GMT", timedelta(0)),
        # A date too far ahead is absurd.
        ("Fri, 31 Dec 9999 23:59:59 GMT", None),
        ("Wed, 01 Jan 2025 12:00:01 GMT", None),
        # Dates that don't parse.
        ("Mon, 32 Jan 2024 12:00:00 GMT", None),
        ("Mon, 01 Jan 2024 12:00:00 +9999", None),
        ("Mon, 01 Jan 2024 12:00:00 +99999999999999999999", None),
        ("1 Jan 99999999999999999999 0:0", None),
        ("Mon, 01 Foo 2024 12:00:00 GMT", None),
    ],
)
def test_parse_retry_after(value: str | None, expected: timedelta | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected


def test_retry_after_dates_are_measured_in_any_zone() -> None:
    tokyo = NOW.astimezone(timezone(timedelta(hours=9)))
    assert parse_retry_after("Mon, 01 Jan 2024 12:01:00 GMT", now=tokyo) == timedelta(seconds=60)


@given(seconds=st.integers(0, 365 * 86400))
def test_delta_seconds_round_trip(seconds: int) -> None:
    assert parse_retry_after(str(seconds), now=NOW) == timedelta(seconds=seconds)


@given(seconds=st.integers(-(10**9), 365 * 86400))
def test_http_dates_round_trip(seconds: int) -> None:
    header = format_datetime(NOW + timedelta(seconds=seconds), usegmt=True)
    assert parse_retry_after(header, now=NOW) == timedelta(seconds=max(seconds, 0))


@given(value=st.text(max_size=60) | st.text(alphabet="0123456789 ,:+-JanMonGMT", max_size=60))
def test_retry_after_never_raises_and_stays_within_a_year(value: str) -> None:
    delay = parse_retry_after(value, now=NOW)
    assert delay is None or timedelta(0) <= delay <= YEAR
