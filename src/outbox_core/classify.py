"""Classify SMTP replies and HTTP results into :class:`~outbox_core.outcomes.Outcome` values.

The adapters map their library's exceptions to the plain types here (an
:class:`SmtpStage` plus the error text, an :class:`HttpAttempt`); this module decides what they
mean. As in urllib3's retry, the question is what the peer may have seen: a failure before the
peer could act is *surely not sent* (a retry cannot duplicate), a failure after it may have acted
is *maybe processed* (``maybe_delivered=True``: a retry may duplicate).

The whole policy::

    SMTP reply          classify_smtp_reply(code, message)
      2xx                 sent
      4xx                 transient
      5xx                 permanent (535 to AUTH too: a bad password fails the row at once)
      1xx, 3xx, other     transient "unexpected reply" (protocol confusion; nothing was accepted)
      "X.Y.Z text"        the RFC 3463 enhanced code goes into the reason; when its class
                          disagrees with the reply code, the reply code wins and the reason says so

    SMTP failure        classify_smtp_failure(stage, error)      (timeout, reset, TLS, ...)
      CONNECT .. DATA     transient, surely not delivered (no final dot, no message)
      AWAITING_DATA_REPLY transient, maybe delivered (the whole message went out)

    HTTP status         classify_http(attempt, now=...)
      2xx                 sent
      3xx                 transient "redirect not followed (status 302)" (never followed)
      408, 425            transient
      429, 503            transient, retry_after from the Retry-After header
      410                 permanent, disable_endpoint=True
      other 4xx           permanent "receiver rejected the request: 400"
      501, 505            permanent
      other 5xx           transient, maybe delivered if the request was sent
      1xx, other codes    transient, maybe delivered if the request was sent

    HTTP failure
      DNS, CONNECT_REFUSED,               transient, surely not sent
        CONNECT_TIMEOUT, TLS
      WRITE_TIMEOUT, READ_TIMEOUT,        transient, maybe delivered = request_sent
        RESET, DEADLINE
      BODY_TOO_LARGE                      transient, maybe delivered
      BLOCKED_DESTINATION                 permanent "destination address not allowed"

    Retry-After         parse_retry_after(value, now=...)
      delta-seconds (ASCII digits only)   that many seconds
      HTTP-date                           the time left until it; a past date gives 0
      garbage, negative, over a year      None (our own backoff applies)

Reasons are stored and logged, so they are short (at most 200 characters) and plain: control,
format and line-separator characters in peer-supplied text become spaces.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Final

import attrs

from outbox_core.outcomes import Outcome

__all__ = [
    "FAILURES_BEFORE_SENDING",
    "HttpAttempt",
    "HttpFailure",
    "SmtpStage",
    "classify_http",
    "classify_smtp_failure",
    "classify_smtp_reply",
    "parse_retry_after",
]

#: Longest reason we produce, ellipsis included.
_MAX_REASON: Final = 200
#: Peer text beyond this is never shown, so it is not even scanned.
_MAX_RAW: Final = 4 * _MAX_REASON
#: Control (Cc), format (Cf: bidi overrides, zero-width), surrogate, line and paragraph separators.
_UNSAFE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
#: RFC 3463 §2: status-code = class "." subject "." detail; class = 2/4/5; 1*3digit each.
_ENHANCED_CODE: Final = re.compile(r"([245])\.[0-9]{1,3}\.[0-9]{1,3}(?= |\Z)")
#: RFC 9110 §10.2.3: delay-seconds = 1*DIGIT (ASCII digits; no sign, no fraction).
_DELAY_SECONDS: Final = re.compile(r"[0-9]+")
#: A Retry-After beyond this is a broken header, not a request; our own backoff applies.
_ABSURD_RETRY_AFTER: Final = timedelta(days=365)


# --- text -------------------------------------------------------------------------------------


def _plain(text: str) -> str:
    """``text`` on one line: unsafe characters become spaces and runs of spaces collapse."""
    spaced = "".join(
        " " if unicodedata.category(char) in _UNSAFE_CATEGORIES else char
        for char in text[:_MAX_RAW]
    )
    return " ".join(spaced.split())


def _reason(head: str, detail: str) -> str:
    text = f"{head}: {detail}" if detail else head
    if len(text) <= _MAX_REASON:
        return text
    return text[: _MAX_REASON - 1].rstrip() + "…"


def _code_text(code: int) -> str:
    # Reply and status codes are three digits; printing an arbitrary int could be huge.
    return str(code) if 0 <= code <= 999 else "(code out of range)"


# --- SMTP -------------------------------------------------------------------------------------


class SmtpStage(enum.StrEnum):
    """Where an SMTP session was when the connection failed."""

    CONNECT = "connect"
    TLS = "tls"
    EHLO = "ehlo"
    AUTH = "auth"
    MAIL_FROM = "mail_from"
    RCPT_TO = "rcpt_to"
    #: Sending the message, before the terminating ``<CRLF>.<CRLF>`` went out.
    DATA = "data"
    #: The whole message and its terminating dot were sent; the final reply never came.
    AWAITING_DATA_REPLY = "awaiting_data_reply"


def _split_enhanced(message: str) -> tuple[str | None, str]:
    """The RFC 3463 code opening ``message`` (if any) and the text without it.

    Multi-line replies often repeat the code on every line ("5.1.1 The email account ...\\n
    5.1.1 double-check ..."); the repeats are dropped so the reason keeps the words.
    """
    lines = [line for line in map(_plain, message[:_MAX_RAW].splitlines()) if line]
    match = _ENHANCED_CODE.match(lines[0]) if lines else None
    if match is None:
        return None, " ".join(lines)
    code = match.group(0)
    return code, " ".join(filter(None, (_drop_code(line, code) for line in lines)))


def _drop_code(line: str, code: str) -> str:
    repeat = _ENHANCED_CODE.match(line)
    return line[repeat.end() :].lstrip() if repeat and repeat.group(0) == code else line


def classify_smtp_reply(code: int, message: str = "") -> Outcome:
    """Classify the final reply to a command (RFC 5321 §4.2.1: the first digit decides)."""
    # Only 200..599 give a class in (2, 4, 5); anything else falls through as unexpected.
    klass = code // 100
    if klass not in (2, 4, 5):
        # A 1xx/3xx (or a non-code) where a final reply belongs means client and server disagree
        # about where the session is; the message was not accepted, so it is safe to retry.
        return Outcome.transient(
            _reason(f"SMTP unexpected reply {_code_text(code)}", _plain(message))
        )
    if klass == 2:
        return Outcome.sent()
    enhanced, text = _split_enhanced(message)
    head = f"SMTP {code}"
    if enhanced is not None:
        head = f"{head} {enhanced}"
        # RFC 3463 §2 gives the class sub-code the meaning of the reply code's first digit
        # (2 success, 4 persistent transient, 5 permanent), so the two must agree. A server that
        # sends them disagreeing is out of spec; the reply code is what RFC 5321 tells the client
        # to act on, so it wins, and the reason records the disagreement.
        if enhanced[0] != str(klass):
            head = f"{head} (enhanced code disagrees, reply code wins)"
    reason = _reason(head, text)
    # A 535 to AUTH lands here as permanent on purpose: a wrong password will not become right
    # on retry, and retrying every row would hammer the server (and may get us locked out).
    return Outcome.transient(reason) if klass == 4 else Outcome.permanent(reason)


def classify_smtp_failure(stage: SmtpStage, error: str) -> Outcome:
    """Classify a connection-level failure (timeout, reset, TLS, STARTTLS missing, certificate).

    Every stage is transient: RFC 5321 §3.8 tells a client that loses the connection to act as if
    a 451 had arrived. Only after the terminating dot may the server have taken the message (the
    duplicate-message problem of RFC 1047); before it, RFC 5321 §4.1.1.10 has the server cancel
    the pending transaction, so nothing was delivered.
    """
    detail = _plain(error)
    if stage is SmtpStage.AWAITING_DATA_REPLY:
        return Outcome.transient(
            _reason("SMTP no reply after the message was sent (may be delivered)", detail),
            maybe_delivered=True,
        )
    return Outcome.transient(_reason(f"SMTP failure at {stage.value}", detail))


# --- HTTP -------------------------------------------------------------------------------------


class HttpFailure(enum.StrEnum):
    """Why an HTTP attempt ended without a status the sender could read."""

    DNS = "dns"
    CONNECT_REFUSED = "connect_refused"
    CONNECT_TIMEOUT = "connect_timeout"
    TLS = "tls"
    WRITE_TIMEOUT = "write_timeout"
    READ_TIMEOUT = "read_timeout"
    RESET = "reset"
    #: Our absolute per-attempt deadline fired.
    DEADLINE = "deadline"
    #: The response was too large to read, so its status is unknown.
    BODY_TOO_LARGE = "body_too_large"
    #: The outbound guard refused the destination address.
    BLOCKED_DESTINATION = "blocked_destination"


#: Failures that happen before a byte of the request can leave: the peer surely saw nothing.
FAILURES_BEFORE_SENDING: Final = frozenset(
    {
        HttpFailure.DNS,
        HttpFailure.CONNECT_REFUSED,
        HttpFailure.CONNECT_TIMEOUT,
        HttpFailure.TLS,
        HttpFailure.BLOCKED_DESTINATION,
    }
)

_FAILURE_REASONS: Final = {
    HttpFailure.DNS: "DNS lookup failed",
    HttpFailure.CONNECT_REFUSED: "connection refused",
    HttpFailure.CONNECT_TIMEOUT: "connect timed out",
    HttpFailure.TLS: "TLS handshake failed",
    HttpFailure.WRITE_TIMEOUT: "timed out sending the request",
    HttpFailure.READ_TIMEOUT: "timed out waiting for the response",
    HttpFailure.RESET: "connection reset",
    HttpFailure.DEADLINE: "attempt deadline reached",
    HttpFailure.BODY_TOO_LARGE: "response too large to read (status unknown)",
    HttpFailure.BLOCKED_DESTINATION: "destination address not allowed",
}


def _check_attempt(inst: HttpAttempt, _attribute: object, _value: str | None) -> None:
    status, failure = inst.status, inst.failure
    if (status is None) == (failure is None):
        raise ValueError(
            f"an HTTP attempt has exactly one of a status or a failure, got status={status!r} "
            f"and failure={failure!r}"
        )
    if status is not None and (not isinstance(status, int) or isinstance(status, bool)):
        raise ValueError(f"an HTTP status must be an int, got {status!r}")
    if failure is not None and inst.retry_after is not None:
        raise ValueError(f"a Retry-After header comes with a status, not with failure {failure}")
    if failure in FAILURES_BEFORE_SENDING and inst.request_sent:
        raise ValueError(f"failure {failure} happens before any request byte is sent")


@attrs.frozen(kw_only=True)
class HttpAttempt:
    """What one webhook attempt produced, in plain data. Build it with the named constructors."""

    #: The response status, when one was read.
    status: int | None = None
    #: Why no status was read.
    failure: HttpFailure | None = None
    #: Whether any byte of the request reached the peer (it may have acted on the request).
    request_sent: bool
    #: The raw ``Retry-After`` header value, if the response had one.
    retry_after: str | None = attrs.field(default=None, validator=_check_attempt)

    @classmethod
    def response(
        cls, status: int, *, retry_after: str | None = None, request_sent: bool = True
    ) -> HttpAttempt:
        """A response was read. ``request_sent=False`` only if it came before we wrote a byte."""
        return cls(status=status, request_sent=request_sent, retry_after=retry_after)

    @classmethod
    def failed(cls, failure: HttpFailure, *, request_sent: bool) -> HttpAttempt:
        return cls(failure=failure, request_sent=request_sent)


def _require_aware(now: datetime) -> None:
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise ValueError(f"now must be a timezone-aware datetime, got {now!r}")


def parse_retry_after(value: str | None, *, now: datetime) -> timedelta | None:
    """The wait a ``Retry-After`` header asks for (RFC 9110 §10.2.3); None if nothing usable."""
    _require_aware(now)
    if value is None:
        return None
    text = value.strip(" \t")
    if _DELAY_SECONDS.fullmatch(text):
        digits = text.lstrip("0")
        # Ten or more digits is over 31 years: absurd, and int() of a huge string is costly.
        delay = timedelta(seconds=int(digits or "0")) if len(digits) < 10 else None
    else:
        when = _http_date(text)
        # A date already past means "now" (RFC 9110 gives no meaning to a negative wait).
        delay = None if when is None else max(when - now, timedelta(0))
    return delay if delay is not None and delay <= _ABSURD_RETRY_AFTER else None


def _http_date(text: str) -> datetime | None:
    try:
        when = parsedate_to_datetime(text)
    except (ValueError, OverflowError):  # the parser overflows on huge numbers
        return None
    # An HTTP-date is always GMT (RFC 9110 §5.6.7); a zone-less one is read the same way.
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def classify_http(attempt: HttpAttempt, *, now: datetime) -> Outcome:
    """Classify one webhook attempt; ``now`` anchors a Retry-After given as an HTTP-date."""
    _require_aware(now)
    if attempt.failure is not None:
        return _classify_failure(attempt.failure, request_sent=attempt.request_sent)
    status = attempt.status
    assert status is not None  # noqa: S101 - narrows the type; the validator makes it true
    return _classify_status(status, attempt, now)


def _classify_failure(failure: HttpFailure, *, request_sent: bool) -> Outcome:
    reason = _FAILURE_REASONS[failure]
    if failure is HttpFailure.BLOCKED_DESTINATION:
        return Outcome.permanent(reason)
    if failure is HttpFailure.BODY_TOO_LARGE:
        # A response arrived, so the receiver had the whole request and may have acted on it.
        return Outcome.transient(reason, maybe_delivered=True)
    # The validator keeps request_sent False for the failures in FAILURES_BEFORE_SENDING, so they come
    # out "surely not sent"; a timeout or reset after the first byte may have been processed.
    return Outcome.transient(reason, maybe_delivered=request_sent)


def _classify_status(status: int, attempt: HttpAttempt, now: datetime) -> Outcome:
    klass = status // 100
    if klass == 2:
        return Outcome.sent()
    if klass == 3:
        # Redirects are never followed (a 3xx could point at an internal address); retrying
        # within the budget lets the receiver fix its URL.
        return Outcome.transient(f"redirect not followed (status {status})")
    if status in (429, 503):
        # RFC 6585 §4 (429) and RFC 9110 §15.6.4 (503): the request was refused, not processed.
        return Outcome.transient(
            f"{'rate limited' if status == 429 else 'receiver unavailable'} (status {status})",
            retry_after=parse_retry_after(attempt.retry_after, now=now),
        )
    if klass == 4:
        return _classify_client_error(status)
    return _classify_server_error(status, request_sent=attempt.request_sent)


def _classify_client_error(status: int) -> Outcome:
    if status == 410:
        return Outcome.permanent("endpoint gone (status 410)", disable_endpoint=True)
    if status in (408, 425):
        # 408: the receiver gave up reading the request; 425: it refused to risk a replay.
        return Outcome.transient(f"receiver did not process the request (status {status})")
    return Outcome.permanent(f"receiver rejected the request: {status}")


def _classify_server_error(status: int, *, request_sent: bool) -> Outcome:
    """5xx other than 503, and codes outside 200-599 (1xx as a final answer, 600+, ...)."""
    if status in (501, 505):
        # Not Implemented / HTTP Version Not Supported: resending the same request cannot help.
        return Outcome.permanent(f"receiver cannot handle the request: {status}")
    # The receiver had the request and failed (or answered nonsense) somewhere in handling it:
    # it may have acted first, unless not a byte of the request had reached it.
    reason = (
        f"receiver error: {status}"
        if 500 <= status <= 599
        else f"unexpected status {_code_text(status)}"
    )
    return Outcome.transient(reason, maybe_delivered=request_sent)
