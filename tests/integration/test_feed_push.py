"""The feed's push against a real PostgreSQL and a real server (ADR 0022): trigger → LISTEN → SSE.

The promises: an inserted notification sends exactly one ``refresh`` to each open stream of its
scope and nothing to the others, without a payload; a lost LISTEN connection is re-opened by itself
and then every stream is told to refresh (LISTEN has no replay); an idle stream pings, and a stream
ends at its cap (the client then reconnects through the host's authentication); closing the feed
ends its streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import psycopg
import pytest
from tests.support.feed import (
    CLOSED,
    PING,
    REFRESH,
    SseClient,
    header_principal,
    host_app,
    insert_notification,
    served,
)

from outbox_adapters.feed import Feed, FeedSettings
from outbox_adapters.postgres.channels import ScopeListener
from outbox_core.backoff import RetryPause

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

FAST_RETRY = RetryPause(base=timedelta(milliseconds=50), cap=timedelta(milliseconds=200))
#: How long "nothing arrives" is watched for: a notification reaches a stream in milliseconds.
QUIET = 0.5


async def open_feed(dsn: str, settings: FeedSettings) -> Feed:
    feed = Feed(
        dsn, header_principal, settings=settings, listener=ScopeListener(dsn, retry=FAST_RETRY)
    )
    await feed.start()
    return feed


@pytest.fixture
async def base(dsn: str) -> AsyncIterator[tuple[Feed, str, httpx.AsyncClient]]:
    """A feed with long pings and caps (they stay out of the way), served for real."""
    feed = await open_feed(dsn, FeedSettings(ping_interval=60, stream_cap=60))
    try:
        async with (
            served(host_app(feed)) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            yield feed, url, http
            await feed.aclose()
    finally:
        await feed.aclose()


async def streams(feed: Feed, http: httpx.AsyncClient, *who: str) -> list[SseClient]:
    """One open stream per principal in ``who``, subscribed before this returns."""
    before = feed.open_streams
    clients = [SseClient(http, "/feed/stream", one) for one in who]
    async with asyncio.timeout(5):
        for client in clients:
            await client.opened.wait()
            assert client.status == 200
        while feed.open_streams < before + len(who):  # noqa: ASYNC110 - a count, no event
            await asyncio.sleep(0.01)
    return clients


async def test_an_insert_sends_one_refresh_to_each_stream_of_its_scope_and_none_to_others(
    base, dsn: str
):
    feed, _url, http = base
    await asyncio.sleep(0.1)  # the listener's after-connect refresh (no stream open yet) is past
    acme1, acme2, globex, platform = await streams(
        feed, http, "tenant:acme", "tenant:acme", "tenant:globex", "platform"
    )
    insert_notification(dsn, audience="tenant", tenant_id="acme")
    assert await acme1.next() == REFRESH
    assert await acme2.next() == REFRESH
    await asyncio.sleep(QUIET)
    assert [c.drain() for c in (acme1, acme2, globex, platform)] == [[], [], [], []]

    insert_notification(dsn, audience="platform", tenant_id=None)
    assert await platform.next() == REFRESH
    await asyncio.sleep(QUIET)
    assert [c.drain() for c in (acme1, acme2, globex, platform)] == [[], [], [], []]
    assert feed.listener.notifications == 2
    for client in (acme1, acme2, globex, platform):
        await client.aclose()


async def test_a_transaction_of_many_rows_for_one_scope_is_one_refresh(base, dsn: str):
    feed, _url, http = base
    await asyncio.sleep(0.1)
    (acme,) = await streams(feed, http, "tenant:acme")
    with psycopg.connect(dsn) as conn, conn.transaction():
        for n in range(20):
            conn.execute(
                "INSERT INTO outbox_notification (event_id, audience, tenant_id, title, body)"
                " VALUES (%s, 'tenant', 'acme', 't', 'b')",
                (f"event-{n}",),
            )
    assert await acme.next() == REFRESH
    await asyncio.sleep(QUIET)
    assert acme.drain() == []
    await acme.aclose()


async def test_after_its_backend_is_terminated_the_listener_reconnects_and_refreshes_every_stream(
    base, dsn: str
):
    feed, _url, http = base
    await asyncio.sleep(0.1)
    clients = await streams(feed, http, "tenant:acme", "tenant:globex", "platform")
    lost = feed.listener.backend_pid
    assert lost is not None
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (lost,))
    # Nothing was inserted: only the after-reconnect broadcast can send these.
    for client in clients:
        assert await client.next() == REFRESH
    assert feed.listener.reconnects == 1
    assert feed.listener.backend_pid not in (None, lost)
    await asyncio.sleep(QUIET)
    assert [c.drain() for c in clients] == [[], [], []]

    # LISTEN is in place again on the new connection.
    insert_notification(dsn, audience="tenant", tenant_id="globex")
    assert await clients[1].next() == REFRESH
    await asyncio.sleep(QUIET)
    assert [c.drain() for c in clients] == [[], [], []]
    for client in clients:
        await client.aclose()


async def test_an_idle_stream_pings_and_ends_at_its_cap(dsn: str):
    feed = await open_feed(
        dsn, FeedSettings(ping_interval=0.2, stream_cap=1.0, stream_cap_spread=0)
    )
    try:
        async with served(host_app(feed)) as url, httpx.AsyncClient(base_url=url) as http:
            await asyncio.sleep(0.1)
            started = asyncio.get_running_loop().time()
            (client,) = await streams(feed, http, "tenant:acme")
            seen = []
            while (item := await client.next()) != CLOSED:
                seen.append(item)
            lasted = asyncio.get_running_loop().time() - started
            assert 0.9 <= lasted < 2.0, lasted
            assert seen.count(PING) in range(3, 6), seen  # every 0.2 s for 1 s
            assert REFRESH not in seen
            assert feed.open_streams == 0
    finally:
        await feed.aclose()


async def test_closing_the_feed_ends_its_streams_and_refuses_new_ones(dsn: str):
    feed = await open_feed(dsn, FeedSettings(ping_interval=60, stream_cap=60))
    try:
        async with served(host_app(feed)) as url, httpx.AsyncClient(base_url=url) as http:
            clients = await streams(feed, http, "tenant:acme", "platform")
            await feed.aclose()
            for client in clients:
                while (await client.next()) != CLOSED:
                    pass
            assert feed.open_streams == 0
            late = await http.get("/feed/stream", headers={"X-Principal": "platform"})
            assert late.status_code == 503
    finally:
        await feed.aclose()


async def test_a_head_request_gets_the_stream_s_headers_without_holding_it_open(base):
    feed, _url, http = base
    async with asyncio.timeout(5):
        got = await http.head("/feed/stream", headers={"X-Principal": "platform"})
    assert got.status_code == 200
    assert got.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert got.headers["cache-control"] == "no-store"
    assert feed.open_streams == 0
