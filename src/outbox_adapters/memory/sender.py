"""An in-memory webhook sender for tests: :class:`RecordingWebhookSender`.

It is :class:`outbox_core.ports.WebhookSender` without a network, as httpx's ``MockTransport``
serves httpx's users: a host tests its webhook code (the delivery handler, its own wiring, a
``WebhookLane(sender=...)``) and sees every request it would have POSTed, with no receiver.

Every request is recorded (:attr:`RecordingWebhookSender.requests`: URL, headers, body, budget and
what the send returned) and answered with a scripted result. A scripted HTTP answer
(:class:`WebhookReply`, or a bare status code) and a scripted transport failure
(:class:`~outbox_core.classify.HttpFailure`) are classified by the core's
:func:`~outbox_core.classify.classify_http`, the function ``http.HttpxWebhookSender`` classifies a
real receiver's answer with, so 410, 429 with ``Retry-After``, 5xx and the rest mean the same
here as on the wire. The outcome carries the same payload progress as the HTTP sender's
(``last_status`` and the ``response`` snippet). The attempt's ``budget`` is an absolute deadline, as
for the HTTP sender: a reply slower than the budget (``WebhookReply(delay=...)``,
:meth:`WebhookReply.hang`) is cut when the budget runs out, and the attempt is a retryable
"attempt deadline reached" that may have been delivered.

Results are scripted as :class:`~outbox_adapters.memory.recording.RecordingMailer`'s are: each is
used once; one scripted for a URL (:meth:`RecordingWebhookSender.script_url`) wins over the shared
sequence (:meth:`RecordingWebhookSender.script`), which wins over the default (200 unless told
otherwise). An :class:`~outbox_core.outcomes.Outcome`, an exception or a coroutine function may be
scripted too, as for the mailer. docs/guides/testing-your-code.md shows it in a host's test; the
contract suite (``tests/contract/test_webhook_sender_contract.py``) runs the same cases against it
and against the HTTP sender with a real receiver (ADR 0016).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Final, Self, TypeAlias

import attrs

from outbox_adapters.clock import SystemClock
from outbox_adapters.memory.recording import Scripted, _play, _Script
from outbox_core.classify import FAILURES_BEFORE_SENDING, HttpAttempt, HttpFailure, classify_http
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import Clock

__all__ = ["RecordingWebhookSender", "SenderScripted", "WebhookReply", "WebhookRequest"]

#: The longest response snippet an outcome carries (characters), as the HTTP sender's.
SNIPPET_CHARS: Final = 512
#: How long a hanging receiver takes to answer: longer than any attempt's budget.
_NEVER: Final = timedelta(days=365)
#: What the shared script hands out when nothing is scripted: the sender's default replaces it.
_UNSCRIPTED: Final = Outcome.skipped("nothing scripted")


def _status(_inst: object, _attribute: object, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 999:
        raise ValueError(f"an HTTP status is a three-digit int, got {value!r}")


def _delay(_inst: object, _attribute: object, value: object) -> None:
    if not isinstance(value, timedelta) or value < timedelta(0):
        raise ValueError(f"a reply's delay is a timedelta of at least 0, got {value!r}")


@attrs.frozen
class WebhookReply:
    """What the receiver answers one request with: a status, after ``delay``."""

    #: The response status, classified by the core as the HTTP sender's is.
    status: int = attrs.field(default=200, validator=_status)
    #: The raw ``Retry-After`` header (delta-seconds or an HTTP-date), read for a 429 or 503.
    retry_after: str | None = None
    #: The response body; its first characters are the outcome's ``response`` snippet.
    body: bytes = b""
    #: How long the receiver takes to answer (it has the request meanwhile).
    delay: timedelta = attrs.field(default=timedelta(0), validator=_delay)

    @classmethod
    def hang(cls) -> WebhookReply:
        """A receiver that takes the request and never answers: the budget ends the attempt."""
        return cls(delay=_NEVER)


#: What a send can be scripted to do: answer (:class:`WebhookReply`, or a bare status), fail in
#: transport (:class:`~outbox_core.classify.HttpFailure`), or any of the mailer's scripted results
#: (an outcome to return as it is, an exception to raise, a coroutine function to await).
SenderScripted: TypeAlias = WebhookReply | int | HttpFailure | Scripted


def _headers(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@attrs.frozen
class WebhookRequest:
    """One call of :meth:`RecordingWebhookSender.send`: the request as the sender was given it."""

    url: str
    #: The headers exactly as given (the signature headers included), a read-only copy.
    headers: Mapping[str, str] = attrs.field(converter=_headers, hash=False)
    body: bytes
    budget: timedelta
    #: What the send returned; ``None`` when it raised.
    outcome: Outcome | None
    #: What the send raised, if it did.
    error: BaseException | None = None


def _snippet(body: bytes) -> str | None:
    return body.decode("utf-8", errors="replace")[:SNIPPET_CHARS] or None


class RecordingWebhookSender:
    """:class:`outbox_core.ports.WebhookSender` that records every request and sends nothing.

    Answers 200 unless ``default`` (any :data:`SenderScripted`) says otherwise; script other
    results with :meth:`script` (the next requests, whatever their URL) or :meth:`script_url` (the
    next requests to one URL; it wins). ``clock`` gives the time an HTTP-date ``Retry-After`` is
    read against. Usable as ``async with`` (like ``http.HttpxWebhookSender``), so
    ``WebhookLane(sender=lambda: recording)`` runs a lane on it; closing it changes nothing but
    :attr:`closed`. It checks no URL against a destination guard: that is the HTTP sender's.
    """

    def __init__(self, *, default: SenderScripted = 200, clock: Clock | None = None) -> None:
        self._clock: Clock = SystemClock() if clock is None else clock
        self._default = self._scripted(default)
        self._script: _Script[str] = _Script(_UNSCRIPTED)
        #: Every call, in order, with what it returned or raised.
        self.requests: list[WebhookRequest] = []
        #: Whether the sender was closed (``aclose`` or the end of ``async with``).
        self.closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self.closed = True

    def script(self, *results: SenderScripted) -> None:
        """The results of the next requests, in order, whatever their URL."""
        self._script.add(self._scripted_all(results))

    def script_url(self, url: str, *results: SenderScripted) -> None:
        """The results of the next requests to ``url`` (compared as written)."""
        self._script.add_for(url, self._scripted_all(results))

    async def send(
        self, url: str, *, headers: Mapping[str, str], body: bytes, budget: timedelta
    ) -> Outcome:
        result = self._script.pop([url])
        if result is _UNSCRIPTED:
            result = self._default
        try:
            outcome = await self._within(result, budget)
        except BaseException as error:
            self.requests.append(WebhookRequest(url, headers, body, budget, None, error))
            raise
        self.requests.append(WebhookRequest(url, headers, body, budget, outcome))
        return outcome

    @property
    def sent(self) -> list[WebhookRequest]:
        """The requests whose send returned ``sent``, in order."""
        return [
            r for r in self.requests if r.outcome is not None and r.outcome.kind is OutcomeKind.SENT
        ]

    def count(self, url: str | None = None) -> int:
        """How many sends were attempted (to ``url``, when given)."""
        return sum(1 for r in self.requests if url is None or r.url == url)

    # --- one attempt ----------------------------------------------------------------------------

    async def _within(self, result: Scripted, budget: timedelta) -> Outcome:
        """``result`` played under the attempt's absolute deadline, as the HTTP sender plays its
        exchange: a budget already spent sends nothing; one that runs out cuts the attempt."""
        seconds = budget.total_seconds()
        if seconds <= 0:
            return self._failed(HttpFailure.DEADLINE, request_sent=False)
        try:
            async with asyncio.timeout(seconds):
                return await _play(result)
        except TimeoutError:
            return self._failed(HttpFailure.DEADLINE, request_sent=True)

    def _failed(self, failure: HttpFailure, *, request_sent: bool) -> Outcome:
        attempt = HttpAttempt.failed(failure, request_sent=request_sent)
        outcome = classify_http(attempt, now=self._clock.now())
        return outcome.with_progress({"last_status": None, "response": None})

    async def _answer(self, reply: WebhookReply) -> Outcome:
        if reply.delay > timedelta(0):
            await asyncio.sleep(reply.delay.total_seconds())
        attempt = HttpAttempt.response(reply.status, retry_after=reply.retry_after)
        outcome = classify_http(attempt, now=self._clock.now())
        return outcome.with_progress(
            {"last_status": reply.status, "response": _snippet(reply.body)}
        )

    def _scripted_all(self, results: Iterable[SenderScripted]) -> list[Scripted]:
        return [self._scripted(result) for result in results]

    def _scripted(self, result: SenderScripted) -> Scripted:
        """``result`` as the mailer's script holds it: a reply or a failure becomes a coroutine
        function that answers (or fails) when the request is sent."""
        if isinstance(result, int) and not isinstance(result, bool):
            result = WebhookReply(result)
        if isinstance(result, WebhookReply):
            reply = result

            async def answer() -> Outcome:
                return await self._answer(reply)

            return answer
        if isinstance(result, HttpFailure):
            failure = result

            async def fail() -> Outcome:
                return self._failed(failure, request_sent=failure not in FAILURES_BEFORE_SENDING)

            return fail
        if not isinstance(result, Outcome | BaseException) and not callable(result):
            raise TypeError(f"cannot script a webhook send with {result!r:.80}")
        return result
