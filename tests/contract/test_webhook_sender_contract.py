"""The WebhookSender port's contract (``outbox_core.ports.WebhookSender``), for
``http.HttpxWebhookSender`` against a real HTTP receiver on loopback and for the shipped
``memory.RecordingWebhookSender``: one suite, so a host testing its webhook code without a network
sees what production gets from a receiver (ADR 0016, ADR 0018).

Each case describes the receiver with one vocabulary, the :class:`~tests.support.receivers.Reply`
of the real receivers (tests/support/receivers.py): the HTTP peer answers with it on a socket,
the memory peer is scripted with its translation (:func:`scripted`: a status, its Retry-After and
body; a hang; a reset). Both are judged by the same literal expectations, so a sender that
classified an answer differently from the core fails here:

- 2xx → ``sent``, the headers and the body as given, byte for byte (the signature verifies);
- 410 → permanent, and the endpoint is to be disabled;
- 429 and 503 → retryable after the receiver's Retry-After (seconds or an HTTP-date);
- other 5xx → retryable, maybe delivered; 501 → permanent; 3xx → retryable, never followed;
- other 4xx → permanent (408 retryable);
- a receiver that never answers → retryable "attempt deadline reached" within the budget; a spent
  budget → retryable, surely not sent; a reset → retryable, maybe delivered; a refused connection
  → retryable, surely not sent.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from standardwebhooks.webhooks import Webhook
from tests.support.receivers import HttpReceiver, Reply

from outbox_adapters.demo.sink import free_port
from outbox_adapters.http import DestinationGuard, HttpxWebhookSender
from outbox_adapters.memory import RecordingWebhookSender, SenderScripted, WebhookReply
from outbox_core.classify import HttpFailure
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import WebhookSender
from outbox_core.signing import WebhookSecret, webhook_headers

BUDGET = timedelta(seconds=5)
#: A body with every kind of byte a JSON body carries: escapes, non-ASCII UTF-8, a newline.
BODY = '{"type":"invoice.paid","data":{"id":7,"note":"Åsa \\"quoted\\"\\n"}}\n'.encode()

PEERS = [pytest.param("httpx", marks=pytest.mark.integration), "memory"]

Received = list[tuple[dict[str, str], bytes]]


def scripted(reply: Reply) -> SenderScripted:
    """What the memory peer is scripted with to answer as the real receiver answers ``reply``."""
    if reply.kind == "status":
        retry_after = {name.lower(): value for name, value in reply.headers}.get("retry-after")
        return WebhookReply(reply.code, retry_after=retry_after, body=reply.body)
    if reply.kind in ("hang_after_connect", "hang_after_headers", "slow_drip"):
        return WebhookReply.hang()
    if reply.kind == "reset":
        return HttpFailure.RESET
    raise AssertionError(f"no memory translation for {reply.kind}")


class HttpPeer:
    """``HttpxWebhookSender`` posting to a real receiver on 127.0.0.1 (plain HTTP allowed)."""

    name = "httpx"

    def __init__(self, sender: HttpxWebhookSender) -> None:
        self.sender: WebhookSender = sender

    @contextlib.contextmanager
    def receiver(self, *replies: Reply) -> Iterator[tuple[str, Received]]:
        """A receiver answering ``replies`` (then 200): its URL, and what it received so far."""
        received: Received = []
        with HttpReceiver(*replies) as hook:
            yield hook.url(), received
            received.extend((r.headers, r.body) for r in hook.requests)

    def refusing_url(self) -> str:
        return f"http://127.0.0.1:{free_port()}/hook"


class MemoryPeer:
    """``RecordingWebhookSender``, each URL scripted with the translation of the replies."""

    name = "memory"

    def __init__(self, sender: RecordingWebhookSender) -> None:
        self.recording = sender
        self.sender: WebhookSender = sender
        self._numbers = itertools.count()

    @contextlib.contextmanager
    def receiver(self, *replies: Reply) -> Iterator[tuple[str, Received]]:
        url = f"https://hooks.example.org/{next(self._numbers)}"
        self.recording.script_url(url, *map(scripted, replies))
        received: Received = []
        yield url, received
        received.extend(
            ({n.lower(): v for n, v in r.headers.items()}, r.body)
            for r in self.recording.requests
            if r.url == url
        )

    def refusing_url(self) -> str:
        url = f"https://hooks.example.org/{next(self._numbers)}"
        self.recording.script_url(url, HttpFailure.CONNECT_REFUSED)
        return url


Peer = HttpPeer | MemoryPeer


@pytest.fixture(params=PEERS)
async def peer(request: pytest.FixtureRequest) -> AsyncIterator[Peer]:
    if request.param == "memory":
        async with RecordingWebhookSender(default=scripted(Reply.ok())) as recording:
            yield MemoryPeer(recording)
        return
    guard = DestinationGuard(allow=["127.0.0.1/32"], require_https=False)
    async with HttpxWebhookSender(guard) as sender:
        yield HttpPeer(sender)


def signed(secret: WebhookSecret, body: bytes = BODY) -> dict[str, str]:
    return webhook_headers(
        [secret], msg_id=f"msg_{secrets.token_hex(16)}", timestamp=int(time.time()), body=body
    )


async def answer(peer: Peer, reply: Reply, *, budget: timedelta = BUDGET) -> Outcome:
    with peer.receiver(reply) as (url, _received):
        return await peer.sender.send(url, headers={}, body=b"{}", budget=budget)


def summary(outcome: Outcome) -> tuple[OutcomeKind, bool, bool, timedelta | None]:
    return outcome.kind, outcome.maybe_delivered, outcome.disable_endpoint, outcome.retry_after


# --- answers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "body", "snippet"),
    [(200, b'{"ok":true}', '{"ok":true}'), (202, b"queued", "queued"), (204, b"", None)],
)
async def test_a_2xx_is_sent_with_the_headers_and_body_byte_for_byte(peer, code, body, snippet):
    secret = WebhookSecret(secrets.token_bytes(32))
    headers = {**signed(secret), "x-tenant": "acme 7"}
    with peer.receiver(Reply("status", code, body)) as (url, received):
        outcome = await peer.sender.send(url, headers=headers, body=BODY, budget=BUDGET)
    assert summary(outcome) == (OutcomeKind.SENT, False, False, None)
    assert outcome.progress == {"last_status": code, "response": snippet}
    [(got_headers, got_body)] = received
    assert got_body == BODY
    assert {name: got_headers.get(name) for name in headers} == headers
    Webhook(secret.to_text()).verify(got_body, got_headers, json_parse=False)


async def test_410_is_permanent_and_disables_the_endpoint(peer):
    outcome = await answer(peer, Reply.status(410))
    assert summary(outcome) == (OutcomeKind.PERMANENT, False, True, None)
    assert outcome.reason == "endpoint gone (status 410)"
    assert outcome.progress == {"last_status": 410, "response": "status 410"}


@pytest.mark.parametrize(
    ("code", "reason"),
    [(429, "rate limited (status 429)"), (503, "receiver unavailable (status 503)")],
)
async def test_429_and_503_are_retryable_after_the_receiver_s_delay(peer, code, reason):
    outcome = await answer(peer, Reply.status(code, headers=(("Retry-After", "7"),)))
    assert summary(outcome) == (OutcomeKind.TRANSIENT, False, False, timedelta(seconds=7))
    assert outcome.reason == reason
    assert outcome.progress is not None
    assert outcome.progress["last_status"] == code


async def test_a_retry_after_date_is_the_time_left_until_it(peer):
    when = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)
    outcome = await answer(peer, Reply.rate_limited(when))
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert outcome.retry_after is not None
    assert timedelta(minutes=59) < outcome.retry_after <= timedelta(hours=1)


async def test_429_without_retry_after_leaves_the_delay_to_the_backoff(peer):
    outcome = await answer(peer, Reply.status(429))
    assert summary(outcome) == (OutcomeKind.TRANSIENT, False, False, None)


@pytest.mark.parametrize("code", [500, 502, 504])
async def test_a_5xx_is_retryable_and_may_have_been_delivered(peer, code):
    outcome = await answer(peer, Reply.status(code))
    assert summary(outcome) == (OutcomeKind.TRANSIENT, True, False, None)
    assert outcome.reason == f"receiver error: {code}"
    assert outcome.progress == {"last_status": code, "response": f"status {code}"}


async def test_501_is_permanent(peer):
    outcome = await answer(peer, Reply.status(501))
    assert summary(outcome) == (OutcomeKind.PERMANENT, False, False, None)
    assert outcome.reason == "receiver cannot handle the request: 501"


@pytest.mark.parametrize("code", [400, 401, 403, 404, 413, 422])
async def test_a_4xx_is_permanent(peer, code):
    outcome = await answer(peer, Reply.status(code))
    assert summary(outcome) == (OutcomeKind.PERMANENT, False, False, None)
    assert outcome.reason == f"receiver rejected the request: {code}"
    assert outcome.progress == {"last_status": code, "response": f"status {code}"}


async def test_408_is_retryable(peer):
    outcome = await answer(peer, Reply.status(408))
    assert summary(outcome) == (OutcomeKind.TRANSIENT, False, False, None)


async def test_a_redirect_is_retryable_and_never_followed(peer):
    with peer.receiver(Reply.redirect("http://127.0.0.1:9/elsewhere")) as (url, received):
        outcome = await peer.sender.send(url, headers={}, body=b"{}", budget=BUDGET)
    assert summary(outcome) == (OutcomeKind.TRANSIENT, False, False, None)
    assert outcome.reason == "redirect not followed (status 302)"
    assert len(received) == 1


# --- failures and the budget ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [Reply.hang_after_connect(), Reply.hang_after_headers()],
    ids=["no-answer", "headers-then-silence"],
)
async def test_a_receiver_that_never_answers_is_cut_within_the_budget(peer, reply):
    budget = timedelta(seconds=0.5)
    started = time.monotonic()
    outcome = await answer(peer, reply, budget=budget)
    took = time.monotonic() - started
    assert summary(outcome) == (OutcomeKind.TRANSIENT, True, False, None)
    assert outcome.reason == "attempt deadline reached"
    assert outcome.progress == {"last_status": None, "response": None}
    assert took < budget.total_seconds() + 2  # generous: the budget, not the receiver's patience


async def test_a_spent_budget_is_retryable_and_surely_not_sent(peer):
    outcome = await answer(peer, Reply.ok(), budget=timedelta(0))
    assert summary(outcome) == (OutcomeKind.TRANSIENT, False, False, None)
    assert outcome.reason == "attempt deadline reached"


async def test_a_reset_after_the_request_is_retryable_and_may_have_been_delivered(peer):
    outcome = await answer(peer, Reply.reset())
    assert summary(outcome) == (OutcomeKind.TRANSIENT, True, False, None)
    assert outcome.reason == "connection reset"


async def test_a_refused_connection_is_retryable_and_surely_not_sent(peer):
    outcome = await peer.sender.send(peer.refusing_url(), headers={}, body=b"{}", budget=BUDGET)
    assert summary(outcome) == (OutcomeKind.TRANSIENT, False, False, None)
    assert outcome.reason == "connection refused"
    assert outcome.progress == {"last_status": None, "response": None}
