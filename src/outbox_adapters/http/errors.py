"""The one place where httpx, httpcore, guard and timeout exceptions become core outcomes.

Every exception of a webhook attempt is translated here (:func:`failure_outcome`), by its type and
by how far the attempt had got (:class:`Progress`, kept per attempt in a context variable that the
pinned connection updates as it connects, writes and reads):

=====================================  =====================  ==============================
exception                              HttpFailure            request_sent
=====================================  =====================  ==============================
BlockedDestination (the guard)         BLOCKED_DESTINATION    no (permanent; reason names why)
ResolutionFailed (the guard)           DNS                    no
httpx.ConnectTimeout, PoolTimeout      CONNECT_TIMEOUT        no
httpx.ConnectError in the TLS stage    TLS                    no
httpx.ConnectError otherwise           CONNECT_REFUSED        no
httpx.WriteTimeout                     WRITE_TIMEOUT          once a byte was handed to the socket
httpx.ReadTimeout                      READ_TIMEOUT           as above (in practice: yes)
httpx.ReadError, WriteError,           RESET                  as above
  RemoteProtocolError, other transport
TimeoutError (our attempt deadline)    DEADLINE               as above
ResponseTooLarge                       BODY_TOO_LARGE         yes
httpx.LocalProtocolError, InvalidURL,  (none: permanent)      no — the request cannot be built
  UnsupportedProtocol                                         as given; retrying cannot help
=====================================  =====================  ==============================

"request_sent" is conservative: it turns true when the first byte of the request is handed to the
socket, so a failure after that is "maybe processed" (a retry may duplicate).
"""

from __future__ import annotations

import contextvars
import enum
from datetime import datetime

import httpx

from outbox_core.classify import HttpAttempt, HttpFailure, classify_http
from outbox_core.errors import BlockedDestination
from outbox_core.outcomes import Outcome

__all__ = [
    "Progress",
    "ResolutionFailed",
    "ResponseTooLarge",
    "Stage",
    "current_progress",
    "end_attempt",
    "failure_outcome",
    "start_attempt",
]

_MAX_REASON = 200
#: The guard's advice, useful to an operator reading an error, too long for a stored reason.
_HINT_START = " (an internal receiver you trust"
_FORM_REFUSED = "webhook URL refused:"


class ResolutionFailed(Exception):
    """The destination's host name did not resolve to any address (or not in time)."""


class ResponseTooLarge(Exception):
    """The response body is larger than the sender reads."""

    def __init__(self, status: int, cap: int) -> None:
        self.status = status
        super().__init__(f"the response to status {status} is larger than {cap} bytes")


class Stage(enum.Enum):
    """How far one attempt got."""

    START = "start"
    RESOLVE = "resolve"
    CONNECT = "connect"
    TLS = "tls"
    SEND = "send"
    RECEIVE = "receive"


class Progress:
    """One attempt's progress, updated by the pinned connection."""

    __slots__ = ("address", "request_sent", "stage")

    def __init__(self) -> None:
        self.stage = Stage.START
        #: A byte of the request may have reached the peer.
        self.request_sent = False
        #: The checked address the connection went to (a new connection only).
        self.address: str | None = None


_PROGRESS: contextvars.ContextVar[Progress] = contextvars.ContextVar("webhook_attempt_progress")


def current_progress() -> Progress:
    """The running attempt's progress (a throwaway one outside an attempt)."""
    try:
        return _PROGRESS.get()
    except LookupError:
        return Progress()


def start_attempt() -> tuple[Progress, contextvars.Token[Progress]]:
    """Start tracking a new attempt in this task; give the token to :func:`end_attempt`."""
    progress = Progress()
    return progress, _PROGRESS.set(progress)


def end_attempt(token: contextvars.Token[Progress]) -> None:
    _PROGRESS.reset(token)


def _reason(text: str) -> str:
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1].rstrip() + "…"


def _failure(exc: Exception, progress: Progress) -> HttpFailure | None:  # noqa: PLR0911
    if isinstance(exc, ResolutionFailed):
        return HttpFailure.DNS
    if isinstance(exc, ResponseTooLarge):
        return HttpFailure.BODY_TOO_LARGE
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return HttpFailure.CONNECT_TIMEOUT
    if isinstance(exc, httpx.ConnectError):
        return HttpFailure.TLS if progress.stage is Stage.TLS else HttpFailure.CONNECT_REFUSED
    if isinstance(exc, httpx.WriteTimeout):
        return HttpFailure.WRITE_TIMEOUT
    if isinstance(exc, httpx.ReadTimeout):
        return HttpFailure.READ_TIMEOUT
    if isinstance(exc, TimeoutError):
        return HttpFailure.DEADLINE
    if isinstance(exc, httpx.TransportError | OSError) and not isinstance(
        exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol
    ):
        return HttpFailure.RESET
    return None


def failure_outcome(exc: Exception, progress: Progress, *, now: datetime) -> Outcome | None:
    """The outcome of an attempt that raised ``exc``; None if ``exc`` is not ours to map (a bug).

    The ``progress`` payload (``last_status`` / ``response``) is the sender's to add.
    """
    if isinstance(exc, BlockedDestination):
        detail = str(exc).partition(_HINT_START)[0]
        if detail.startswith(_FORM_REFUSED):  # the URL itself, not where it leads
            return Outcome.permanent(_reason(detail))
        return Outcome.permanent(_reason(f"destination address not allowed: {detail}"))
    if isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol | httpx.InvalidURL):
        return Outcome.permanent(
            _reason(f"the webhook request cannot be sent as built: {type(exc).__name__}: {exc}")
        )
    failure = _failure(exc, progress)
    if failure is None:
        return None
    if failure is HttpFailure.BODY_TOO_LARGE:
        sent = True
    elif failure in (
        HttpFailure.DNS,
        HttpFailure.CONNECT_TIMEOUT,
        HttpFailure.CONNECT_REFUSED,
        HttpFailure.TLS,
    ):
        sent = False
    else:
        sent = progress.request_sent
    return classify_http(HttpAttempt.failed(failure, request_sent=sent), now=now)
