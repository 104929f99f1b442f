"""HttpxWebhookSender against real local HTTP receivers (tests/support/receivers.py).

Every request that arrives is checked with the ``standardwebhooks`` package as an oracle, with the
headers built by ``outbox_core.signing.webhook_headers`` (security promise 3). Each receiver
behaviour is classified as ``outbox_core.classify`` says; the guard's pinning is shown to hold with
a resolver the OS knows nothing about, and through TLS (the certificate checked against the name).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import httpcore
import httpx
import pytest
import trustme
from standardwebhooks.webhooks import Webhook
from tests.support.receivers import CanaryListener, HttpReceiver, Reply

from outbox_adapters.http import DestinationGuard, HttpxWebhookSender
from outbox_adapters.http.sender import PROBE_HOST, PinnedTransport, PinningLost
from outbox_core.errors import ConfigurationError
from outbox_core.outcomes import OutcomeKind
from outbox_core.signing import WebhookSecret, webhook_headers

pytestmark = pytest.mark.integration

BUDGET = timedelta(seconds=2)
BODY = json.dumps({"type": "invoice.paid", "timestamp": "2026-01-01T00:00:00Z", "data": {"id": 7}})


def new_secret() -> WebhookSecret:
    return WebhookSecret(secrets.token_bytes(32))


def signed(
    secrets_: Sequence[WebhookSecret], body: bytes = BODY.encode(), msg_id: str | None = None
) -> dict[str, str]:
    return webhook_headers(
        secrets_,
        msg_id=msg_id or f"msg_{secrets.token_hex(16)}",
        timestamp=int(time.time()),
        body=body,
    )


def local_guard(**kwargs) -> DestinationGuard:
    return DestinationGuard(allow=["127.0.0.1/32"], require_https=False, **kwargs)


@pytest.fixture
async def sender() -> AsyncIterator[HttpxWebhookSender]:
    async with HttpxWebhookSender(local_guard()) as opened:
        yield opened


async def test_a_signed_webhook_arrives_byte_for_byte_and_verifies_with_standardwebhooks(sender):
    secret = new_secret()
    headers = signed([secret], msg_id="msg_stable")
    with HttpReceiver() as hook:
        outcome = await sender.send(hook.url(), headers=headers, body=BODY.encode(), budget=BUDGET)
    assert outcome.kind is OutcomeKind.SENT
    assert outcome.progress == {"last_status": 200, "response": '{"ok":true}'}
    [request] = hook.requests
    assert request.method == "POST"
    assert request.body == BODY.encode()
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == "msg_stable"
    Webhook(secret.to_text()).verify(request.body, request.headers, json_parse=False)


async def test_during_a_rotation_both_signatures_are_sent_and_each_verifies(sender):
    old, new = new_secret(), new_secret()
    with HttpReceiver() as hook:
        outcome = await sender.send(
            hook.url(), headers=signed([old, new]), body=BODY.encode(), budget=BUDGET
        )
    assert outcome.kind is OutcomeKind.SENT
    [request] = hook.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        Webhook(secret.to_text()).verify(request.body, request.headers, json_parse=False)


async def test_one_keep_alive_connection_carries_many_webhooks_each_signed_afresh(sender):
    secret = new_secret()
    with HttpReceiver() as hook:
        for _ in range(5):
            outcome = await sender.send(
                hook.url(), headers=signed([secret]), body=BODY.encode(), budget=BUDGET
            )
            assert outcome.kind is OutcomeKind.SENT
    assert hook.connections == 1
    assert len(hook.requests) == 5
    for request in hook.requests:
        Webhook(secret.to_text()).verify(request.body, request.headers, json_parse=False)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply.status(500), (OutcomeKind.TRANSIENT, True, False, None)),
        (Reply.status(503), (OutcomeKind.TRANSIENT, False, False, None)),
        (Reply.status(410), (OutcomeKind.PERMANENT, False, True, None)),
        (Reply.status(400), (OutcomeKind.PERMANENT, False, False, None)),
        (Reply.rate_limited("7"), (OutcomeKind.TRANSIENT, False, False, timedelta(seconds=7))),
        (Reply.status(204), (OutcomeKind.SENT, False, False, None)),
    ],
    ids=["500", "503", "410", "400", "429", "204"],
)
async def test_statuses_are_classified(sender, reply, expected):
    """(kind, maybe delivered, disable the endpoint, retry after) for each status."""
    with HttpReceiver(reply) as hook:
        outcome = await sender.send(
            hook.url(), headers=signed([new_secret()]), body=b"{}", budget=BUDGET
        )
    got = (outcome.kind, outcome.maybe_delivered, outcome.disable_endpoint, outcome.retry_after)
    assert got == expected
    assert outcome.progress["last_status"] == reply.code


async def test_a_redirect_is_reported_and_never_followed(sender):
    with CanaryListener() as canary, HttpReceiver(Reply.redirect(canary.url("/x"))) as hook:
        outcome = await sender.send(hook.url(), headers={}, body=b"{}", budget=BUDGET)
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert "redirect not followed" in outcome.reason
    assert canary.connections == 0


@pytest.mark.parametrize(
    "reply",
    [Reply.hang_after_connect(), Reply.hang_after_headers(), Reply.slow_drip(interval=0.2)],
    ids=["hang-after-connect", "hang-after-headers", "slow-drip"],
)
async def test_a_hanging_receiver_is_cut_at_the_absolute_deadline(sender, reply):
    budget = timedelta(seconds=0.8)
    with HttpReceiver(reply) as hook:
        started = time.monotonic()
        outcome = await sender.send(hook.url(), headers={}, body=b"{}", budget=budget)
        took = time.monotonic() - started
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert outcome.reason == "attempt deadline reached"
    assert outcome.maybe_delivered  # the request went out; the receiver may have acted on it
    assert took < budget.total_seconds() * 1.1


async def test_a_huge_response_is_not_read_past_the_cap(sender):
    with HttpReceiver(Reply.huge_body()) as hook:
        started = time.monotonic()
        outcome = await sender.send(hook.url(), headers={}, body=b"{}", budget=BUDGET)
        took = time.monotonic() - started
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert "too large" in outcome.reason
    assert outcome.progress == {"last_status": 200, "response": None}
    assert took < 1.0


async def test_a_response_over_a_smaller_cap_is_refused_too():
    chunked = Reply.status(200, body=b"y" * 5000)
    async with HttpxWebhookSender(local_guard(), response_cap=1000) as capped:
        with HttpReceiver(chunked) as hook:
            outcome = await capped.send(hook.url(), headers={}, body=b"{}", budget=BUDGET)
    assert "too large" in outcome.reason


async def test_a_connection_reset_may_have_been_processed(sender):
    with HttpReceiver(Reply.reset()) as hook:
        outcome = await sender.send(hook.url(), headers={}, body=b"{}", budget=BUDGET)
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert outcome.reason == "connection reset"
    assert outcome.maybe_delivered
    assert len(hook.requests) == 1


async def test_a_refused_connection_surely_did_not_deliver(sender):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: the connect is refused
        outcome = await sender.send(
            f"http://127.0.0.1:{port}/", headers={}, body=b"{}", budget=BUDGET
        )
    assert (outcome.kind, outcome.reason, outcome.maybe_delivered) == (
        OutcomeKind.TRANSIENT,
        "connection refused",
        False,
    )


async def test_the_snippet_is_short_plain_and_never_shows_the_signature(sender):
    headers = signed([new_secret(), new_secret()])
    value = headers["webhook-signature"]
    first = value.split(" ")[0]
    echo = f"got {value}\x00\x1b[31m and {first} and {first.partition(',')[2]}" + "z" * 2000
    with HttpReceiver(Reply.status(400, body=echo.encode())) as hook:
        outcome = await sender.send(hook.url(), headers=headers, body=b"{}", budget=BUDGET)
    snippet = outcome.progress["response"]
    assert isinstance(snippet, str)
    assert len(snippet) == 512
    assert snippet.startswith("got [redacted][31m and [redacted] and [redacted]")
    for entry in value.split(" "):
        assert entry.partition(",")[2] not in snippet
    assert not any(ord(char) < 32 for char in snippet)


async def test_a_dns_failure_is_transient_and_surely_not_sent():
    async def nowhere(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    async with HttpxWebhookSender(local_guard(resolver=nowhere)) as sender:
        outcome = await sender.send("http://hooks.test/", headers={}, body=b"{}", budget=BUDGET)
    assert (outcome.kind, outcome.reason, outcome.maybe_delivered) == (
        OutcomeKind.TRANSIENT,
        "DNS lookup failed",
        False,
    )


async def test_the_host_name_is_resolved_once_by_the_guard_and_never_by_the_os(monkeypatch):
    answers: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        answers.append(host)
        return ["127.0.0.1"]

    looked_up: list[str] = []
    real = socket.getaddrinfo

    def spy(host, *args, **kwargs):
        looked_up.append(str(host))
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", spy)
    async with HttpxWebhookSender(local_guard(resolver=resolver)) as sender:
        with HttpReceiver() as hook:
            for _ in range(3):
                outcome = await sender.send(
                    hook.url(host="hooks.test"), headers={}, body=b"{}", budget=BUDGET
                )
                assert outcome.kind is OutcomeKind.SENT
    assert answers == ["hooks.test"]  # one new connection, one resolution; keep-alive after it
    assert "hooks.test" not in looked_up
    assert hook.requests[0].headers["host"] == f"hooks.test:{hook.port}"


@pytest.fixture(scope="module")
def tls_ca() -> trustme.CA:
    return trustme.CA()


def _server_context(ca: trustme.CA, name: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(context)
    return context


async def test_tls_to_a_pinned_address_checks_the_certificate_against_the_host_name(tls_ca):
    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    guard = DestinationGuard(allow=["127.0.0.1/32"], resolver=resolver)  # https required
    client_context = ssl.create_default_context()
    tls_ca.configure_trust(client_context)
    async with HttpxWebhookSender(guard, ssl_context=client_context) as sender:
        with HttpReceiver(tls=_server_context(tls_ca, "hooks.test")) as good:
            outcome = await sender.send(
                good.url(host="hooks.test"), headers={}, body=b"{}", budget=BUDGET
            )
        assert outcome.kind is OutcomeKind.SENT
        with HttpReceiver(tls=_server_context(tls_ca, "other.test")) as wrong_name:
            outcome = await sender.send(
                wrong_name.url(host="hooks.test"), headers={}, body=b"{}", budget=BUDGET
            )
    assert (outcome.kind, outcome.reason, outcome.maybe_delivered) == (
        OutcomeKind.TRANSIENT,
        "TLS handshake failed",
        False,
    )
    assert wrong_name.requests == []


async def test_environment_proxies_are_ignored(monkeypatch):
    with CanaryListener() as proxy, HttpReceiver() as hook:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.url())
        async with HttpxWebhookSender(local_guard()) as sender:
            outcome = await sender.send(hook.url(), headers={}, body=b"{}", budget=BUDGET)
    assert outcome.kind is OutcomeKind.SENT
    assert proxy.connections == 0


async def test_at_most_max_per_origin_requests_are_in_flight_to_one_origin_the_rest_are_not_sent():
    """A receiver that never answers: with a cap of 3, three requests reach it (each may have been
    processed); the seven others wait for a slot until their (shorter) deadline and are surely not
    sent. Another origin is not held up meanwhile."""
    with (
        HttpReceiver(then=Reply.hang_after_connect()) as stuck,
        HttpReceiver() as other,
    ):
        async with HttpxWebhookSender(local_guard(), max_per_origin=3) as capped:
            body = BODY.encode()
            # The first three take the slots and hold them for 2 s; the others wait 0.5 s at most.
            budgets = [timedelta(seconds=2)] * 3 + [timedelta(seconds=0.5)] * 7
            stuck_sends = [
                capped.send(stuck.url(), headers=signed([new_secret()]), body=body, budget=b)
                for b in budgets
            ]
            other_send = capped.send(
                other.url(), headers=signed([new_secret()]), body=body, budget=BUDGET
            )
            *outcomes, elsewhere = await asyncio.gather(*stuck_sends, other_send)
        assert stuck.connections == 3
        assert elsewhere.kind is OutcomeKind.SENT
        assert len(other.requests) == 1
    assert {o.kind for o in outcomes} == {OutcomeKind.TRANSIENT}
    assert [o.maybe_delivered for o in outcomes] == [True] * 3 + [False] * 7


def test_max_per_origin_must_be_a_positive_count():
    for bad in (0, -1, True, 2.5, "8"):
        with pytest.raises(ConfigurationError, match="max_per_origin must be a positive count"):
            HttpxWebhookSender(local_guard(), max_per_origin=bad)  # type: ignore[arg-type]


# --- the pinning self-check (ADR 0016): an httpx that stops using the pool the sender installs ---


async def test_a_transport_whose_pinned_pool_httpx_no_longer_uses_refuses_to_send(monkeypatch):
    """An httpx whose transport sends through a pool of its own (as one that renamed ``_pool``
    would): the self-check's request reaches the OS resolver instead of the guard, and the
    sender refuses before any request is made."""
    asked: list[str] = []

    def os_resolver(host, *args, **kwargs):
        asked.append(host.decode() if isinstance(host, bytes) else str(host))
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    async def unpinned(self, request: httpx.Request) -> httpx.Response:
        async with httpcore.AsyncConnectionPool() as pool:  # httpcore's own backend: the OS
            answer = await pool.request(request.method, str(request.url))
        return httpx.Response(answer.status, content=answer.content)

    monkeypatch.setattr(socket, "getaddrinfo", os_resolver)
    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", unpinned)
    async with HttpxWebhookSender(local_guard()) as sender:
        with (
            HttpReceiver() as hook,
            pytest.raises(PinningLost, match="would not be pinned; refusing to send"),
        ):
            await sender.send(hook.url(), headers={}, body=b"{}", budget=BUDGET)
    assert asked == [PROBE_HOST]
    assert hook.requests == []
    assert sender.transport is None


async def test_an_httpx_that_keeps_its_pool_elsewhere_is_refused_at_construction(monkeypatch):
    real_init = httpx.AsyncHTTPTransport.__init__

    def renamed(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self._connection_pool = vars(self).pop("_pool")

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "__init__", renamed)
    with pytest.raises(PinningLost, match=r"AsyncHTTPTransport\._pool"):
        PinnedTransport(
            local_guard(), ssl_context=ssl.create_default_context(), limits=httpx.Limits()
        )


async def test_the_self_check_passes_without_resolving_or_connecting_anything():
    resolved: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        resolved.append(host)
        return ["127.0.0.1"]

    transport = PinnedTransport(
        local_guard(resolver=resolver),
        ssl_context=ssl.create_default_context(),
        limits=httpx.Limits(),
    )
    async with transport:
        await transport.verify()
    assert (resolved, transport.backend.connections) == ([], 0)
