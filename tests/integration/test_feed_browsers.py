"""The feed against browsers' abuse, on a real PostgreSQL (ADR 0022; docs/guides/feed.md,
"Browsers"): a cross-site POST marks nothing, every answer forbids framing and sniffing, a bad body
is a 400 naming it, and the SSE streams are capped per principal and per process (counted).

A browser says where a request comes from in ``Sec-Fetch-Site`` and ``Origin``; the tests send
those headers as a browser would (tests/integration/test_feed_cross_site_browser.py has Chromium
post the form itself).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.requests import HTTPConnection
from tests.support.feed import (
    SseClient,
    as_header,
    header_principal,
    host_app,
    insert_notification,
    served,
)
from tests.support.telemetry import recording

from outbox_adapters.feed import Feed, FeedSettings, Principal

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

ACME, GLOBEX = "tenant:acme", "tenant:globex"
OWN = "http://host"
PROXIED = "https://app.example.com"


@pytest.fixture
async def client(dsn: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = FeedSettings(allowed_origins=(PROXIED,))
    async with Feed(dsn, header_principal, settings=settings) as feed:
        transport = httpx.ASGITransport(app=host_app(feed))
        async with httpx.AsyncClient(transport=transport, base_url=OWN) as made:
            yield made


async def unread(client: httpx.AsyncClient, who: str = ACME) -> int:
    got = await client.get("/feed/notifications/unread-count", headers=as_header(who))
    assert got.status_code == 200, got.text
    return int(got.json()["unread"])


def three_for_acme(dsn: str) -> list[int]:
    return [insert_notification(dsn, audience="tenant", tenant_id="acme") for _ in range(3)]


#: What a browser sends with a form another site posts (or a fetch it makes) to the feed.
CROSS_SITE = [
    {"sec-fetch-site": "cross-site", "origin": "https://evil.example"},
    # Another port of the same host is the same site, not the same origin: refused too.
    {"sec-fetch-site": "same-site", "origin": "http://host:8080"},
    {"origin": "https://evil.example"},  # a browser too old to send Sec-Fetch-Site
    {"origin": "https://host"},  # another scheme
    {"origin": "null"},  # a sandboxed frame, a file: page
]
FORM = {"content-type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize("headers", CROSS_SITE)
async def test_a_cross_site_post_marks_nothing(client, dsn: str, headers: dict[str, str]):
    ids = three_for_acme(dsn)
    for path in ("/feed/notifications/read-all", f"/feed/notifications/{ids[0]}/read"):
        for extra in ({}, FORM):
            got = await client.post(path, headers={**as_header(ACME), **headers, **extra})
            assert got.status_code == 403, got.text
            assert "cross-site request refused" in got.json()["error"]
    assert await unread(client) == 3


@pytest.mark.parametrize("content_type", [FORM["content-type"], "multipart/form-data; boundary=x", "text/plain"])  # fmt: skip
async def test_a_form_body_is_refused_even_without_origin_headers(
    client, dsn: str, content_type: str
):
    three_for_acme(dsn)
    got = await client.post(
        "/feed/notifications/read-all",
        content=b"a=1",
        headers={**as_header(ACME), "content-type": content_type},
    )
    assert got.status_code == 415
    assert "application/json" in got.json()["error"]
    assert await unread(client) == 3


@pytest.mark.parametrize(
    "headers",
    [
        {"sec-fetch-site": "same-origin", "origin": OWN},
        {"sec-fetch-site": "none"},  # typed into the address bar, a bookmark
        {"origin": OWN},
        {"origin": "http://host:80"},  # the default port written out
        {"sec-fetch-site": "cross-site", "origin": PROXIED},  # listed in allowed_origins
        {},  # not a browser: curl, a script
    ],
)
async def test_a_same_origin_or_allowed_post_marks(client, dsn: str, headers: dict[str, str]):
    three_for_acme(dsn)
    got = await client.post(
        "/feed/notifications/read-all", headers={**as_header(ACME), **headers}, json={}
    )
    assert got.status_code == 200, got.text
    assert got.json() == {"marked": 3}
    assert await unread(client) == 0


@pytest.mark.parametrize(
    "content", [b"[]", b"1", b"not json", b"[" * 900, b"{" + b" " * 2000 + b"}"]
)
async def test_a_bad_body_is_a_400_naming_it(client, dsn: str, content: bytes):
    three_for_acme(dsn)
    got = await client.post(
        "/feed/notifications/read-all",
        content=content,
        headers={**as_header(ACME), "content-type": "application/json"},
    )
    assert got.status_code == 400, got.text
    assert got.json()["error"].startswith("the body must be empty or a JSON object")
    assert await unread(client) == 3


async def test_every_answer_forbids_framing_and_sniffing(client, dsn: str):
    [mine, *_] = three_for_acme(dsn)
    me = as_header(ACME)
    answers = [
        await client.get("/feed/notifications", headers=me),
        await client.get("/feed/notifications/unread-count"),  # 401
        await client.get("/feed/notifications?limit=0", headers=me),  # 400
        await client.post(f"/feed/notifications/{mine}/read", headers=me),
        await client.post("/feed/notifications/read-all", headers={**me, "origin": "null"}),
        await client.get("/feed/nowhere", headers=me),  # 404
        await client.put("/feed/notifications/read-all", headers=me),  # 405
        await client.head("/feed/stream", headers=me),
        await client.get("/feed/stream"),  # 401
    ]
    for answer in answers:
        assert answer.headers["content-security-policy"] == "frame-ancestors 'none'", answer
        assert answer.headers["x-frame-options"] == "DENY", answer
        assert answer.headers["x-content-type-options"] == "nosniff", answer
    assert [a.status_code for a in answers] == [200, 401, 400, 204, 403, 404, 405, 200, 401]


def subject_principal(connection: HTTPConnection) -> Principal | None:
    """``X-Principal`` for the scope, ``X-Subject`` for the user within it."""
    found = header_principal(connection)
    subject = connection.headers.get("x-subject")
    if found is None or subject is None:
        return found
    return Principal.tenant_user(found.tenant_id or "", subject=subject)


class Streams:
    def __init__(self, feed: Feed, http: httpx.AsyncClient) -> None:
        self.feed, self.http = feed, http
        self.open: list[SseClient] = []

    async def ask(self, who: str, subject: str | None = None) -> SseClient:
        headers = {} if subject is None else {"x-subject": subject}
        made = SseClient(self.http, "/feed/stream", who, headers=headers)
        self.open.append(made)
        async with asyncio.timeout(5):
            await made.opened.wait()
        return made


@pytest.fixture
async def capped(dsn: str) -> AsyncIterator[Streams]:
    settings = FeedSettings(max_streams_per_principal=2, max_streams=4, ping_interval=60)
    async with (
        Feed(dsn, subject_principal, settings=settings) as feed,
        served(host_app(feed)) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        streams = Streams(feed, http)
        try:
            yield streams
        finally:
            for one in streams.open:
                await one.aclose()


async def test_streams_are_capped_per_principal_and_per_process_and_counted(capped: Streams):
    with recording() as otel:
        assert [(await capped.ask(ACME)).status for _ in range(2)] == [200, 200]
        third = await capped.ask(ACME)
        assert third.status == 429
        assert third.headers["retry-after"] == "30"
        assert third.headers["x-frame-options"] == "DENY"
        assert "too many open streams" in third.body
        # Another user of the same tenant is another principal; another tenant too.
        assert (await capped.ask(ACME, subject="rita")).status == 200
        assert (await capped.ask(GLOBEX)).status == 200
        fifth = await capped.ask(GLOBEX)  # globex holds 1 of 2, but the process holds 4 of 4
        assert fifth.status == 503
        assert fifth.headers["retry-after"] == "30"
        assert otel.total("outbox.feed.streams_refused", **{"outbox.feed.limit": "principal"}) == 1
        assert otel.total("outbox.feed.streams_refused", **{"outbox.feed.limit": "process"}) == 1

    # A stream that ends gives its slot back.
    await capped.open[0].aclose()
    async with asyncio.timeout(5):
        while capped.feed.slots.open > 3:  # noqa: ASYNC110 - a count, no event
            await asyncio.sleep(0.01)
    assert (await capped.ask(ACME)).status == 200
    assert capped.feed.slots.held("tenant:acme") == 2
