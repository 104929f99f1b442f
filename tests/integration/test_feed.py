"""The in-app feed's routes against a real PostgreSQL (ADR 0022): scoping, pages, bad input.

The promises: the scope of every read and mark comes from the principal the host authenticated,
never from the request's parameters, so a tenant sees and marks its own notifications only (a
spoofed ``?tenant_id=`` changes nothing; another tenant's row is a 404 and stays unread); pages
walk newest first without repeating or skipping a row; bad input is a 400 naming the parameter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool
from tests.support.feed import as_header, header_principal, host_app, insert_notification, read_at

from outbox_adapters.feed import Feed, FeedSettings

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

ACME, GLOBEX = "tenant:acme", "tenant:globex"


@pytest.fixture
async def client(dsn: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = FeedSettings(page_size=2, max_page_size=5)
    async with Feed(dsn, header_principal, settings=settings) as feed:
        transport = httpx.ASGITransport(app=host_app(feed))
        async with httpx.AsyncClient(transport=transport, base_url="http://host") as made:
            yield made


def seed(dsn: str) -> dict[str, list[int]]:
    """Two notifications each for acme, globex and the platform; ids by who may see them."""
    return {
        ACME: [insert_notification(dsn, audience="tenant", tenant_id="acme") for _ in range(2)],
        GLOBEX: [insert_notification(dsn, audience="tenant", tenant_id="globex") for _ in range(2)],
        "platform": [
            insert_notification(dsn, audience="platform", tenant_id=None) for _ in range(2)
        ],
    }


async def ids_seen(client: httpx.AsyncClient, who: str, query: str = "") -> set[int]:
    got = await client.get(f"/feed/notifications?limit=5{query}", headers=as_header(who))
    assert got.status_code == 200, got.text
    return {item["id"] for item in got.json()["items"]}


async def unread(client: httpx.AsyncClient, who: str, query: str = "") -> int:
    got = await client.get(f"/feed/notifications/unread-count{query}", headers=as_header(who))
    assert got.status_code == 200, got.text
    return int(got.json()["unread"])


@pytest.mark.parametrize("who", [ACME, GLOBEX, "platform"])
async def test_each_principal_sees_and_counts_its_own_scope_only(client, dsn: str, who: str):
    ids = seed(dsn)
    assert await ids_seen(client, who) == set(ids[who])
    assert await unread(client, who) == 2


@pytest.mark.parametrize(
    "spoof",
    [
        "&tenant_id=globex",
        "&tenant_id=globex&audience=tenant",
        "&audience=platform",
        "&tenant_id=",
        "&tenant_id=globex&tenant_id=acme",
    ],
)
async def test_a_spoofed_tenant_id_or_audience_changes_nothing(client, dsn: str, spoof: str):
    ids = seed(dsn)
    assert await ids_seen(client, ACME, spoof) == set(ids[ACME])
    assert await unread(client, ACME, "?" + spoof.lstrip("&")) == 2
    marked = await client.post(
        f"/feed/notifications/read-all?{spoof.lstrip('&')}", headers=as_header(ACME)
    )
    assert marked.json() == {"marked": 2}
    assert await unread(client, GLOBEX) == 2
    assert await unread(client, "platform") == 2


async def test_marking_another_tenant_s_notification_is_a_404_and_leaves_it_unread(
    client, dsn: str
):
    ids = seed(dsn)
    theirs = ids[GLOBEX][0]
    for path in (
        f"/feed/notifications/{theirs}/read",
        f"/feed/notifications/{theirs}/read?tenant_id=globex",
    ):
        got = await client.post(path, headers=as_header(ACME))
        assert got.status_code == 404
        assert got.json() == {"error": f"no notification {theirs} in this feed"}
    platform_row = ids["platform"][0]
    assert (await client.post(f"/feed/notifications/{platform_row}/read", headers=as_header(ACME))).status_code == 404  # fmt: skip
    assert read_at(dsn, theirs) is None
    assert read_at(dsn, platform_row) is None
    assert await unread(client, GLOBEX) == 2

    # Its own row: marked (twice is fine: the first read time stays).
    mine = ids[ACME][0]
    for _ in range(2):
        got = await client.post(f"/feed/notifications/{mine}/read", headers=as_header(ACME))
        assert got.status_code == 204
    first = read_at(dsn, mine)
    assert first is not None
    assert await unread(client, ACME) == 1


async def test_a_platform_operator_cannot_mark_a_tenant_s_row(client, dsn: str):
    ids = seed(dsn)
    got = await client.post(
        f"/feed/notifications/{ids[ACME][0]}/read", headers=as_header("platform")
    )
    assert got.status_code == 404
    assert read_at(dsn, ids[ACME][0]) is None
    assert (await client.post("/feed/notifications/read-all", headers=as_header("platform"))).json() == {"marked": 2}  # fmt: skip
    assert await unread(client, ACME) == 2


async def test_mark_all_read_marks_the_principal_s_scope_only(client, dsn: str):
    seed(dsn)
    got = await client.post("/feed/notifications/read-all", headers=as_header(ACME))
    assert got.json() == {"marked": 2}
    assert await unread(client, ACME) == 0
    assert await unread(client, GLOBEX) == 2
    assert await unread(client, "platform") == 2
    again = await client.post("/feed/notifications/read-all", headers=as_header(ACME))
    assert again.json() == {"marked": 0}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/feed/notifications"),
        ("GET", "/feed/notifications/unread-count"),
        ("POST", "/feed/notifications/1/read"),
        ("POST", "/feed/notifications/read-all"),
        ("GET", "/feed/stream"),
        ("GET", "/feed/notifications?tenant_id=acme"),
    ],
)
async def test_without_a_principal_every_route_is_a_401(client, dsn: str, method: str, path: str):
    seed(dsn)
    got = await client.request(method, path, headers={"X-Principal": "nobody"})
    assert got.status_code == 401
    assert got.json() == {"error": "not authenticated"}


async def test_pages_walk_newest_first_without_repeats_or_gaps(client, dsn: str):
    mine = [insert_notification(dsn, audience="tenant", tenant_id="acme") for _ in range(5)]
    insert_notification(dsn, audience="tenant", tenant_id="globex")
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        query = "" if cursor is None else f"?cursor={cursor}"
        got = (await client.get(f"/feed/notifications{query}", headers=as_header(ACME))).json()
        pages += 1
        seen += [item["id"] for item in got["items"]]
        if pages == 1:
            # A row arriving mid-walk is above the cursor: it neither repeats nor shifts a page.
            insert_notification(dsn, audience="tenant", tenant_id="acme")
        cursor = got["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(mine, reverse=True)
    assert pages == 3  # pages of 2 (the feed's page_size here)
    item = (await client.get("/feed/notifications?limit=1", headers=as_header(ACME))).json()
    assert set(item["items"][0]) == {"id", "event_id", "title", "body", "created_at", "read_at"}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("limit=0", "limit must be a whole number from 1 to 5, got '0'"),
        ("limit=6", "limit must be a whole number from 1 to 5, got '6'"),
        ("limit=-1", "limit must be a whole number from 1 to 5, got '-1'"),
        ("limit=two", "limit must be a whole number from 1 to 5, got 'two'"),
        ("limit=", "limit must be a whole number from 1 to 5, got ''"),
        (
            "cursor=abc",
            "cursor is not one this feed handed out (expected '<number>.<number>'), got 'abc'",
        ),
        (
            "cursor=1.9999999999999999999",
            "cursor names a row id out of range, got '1.9999999999999999999'",
        ),
        (
            "cursor=9999999999999999999.1",
            "cursor names a time out of range, got '9999999999999999999.1'",
        ),
    ],
)
async def test_a_bad_page_size_or_cursor_is_a_400_naming_the_problem(
    client, dsn: str, query: str, message: str
):
    got = await client.get(f"/feed/notifications?{query}", headers=as_header(ACME))
    assert got.status_code == 400
    assert got.json() == {"error": message}


async def test_a_huge_notification_id_is_a_404_not_a_server_error(client):
    got = await client.post(f"/feed/notifications/{2**70}/read", headers=as_header(ACME))
    assert got.status_code == 404


async def test_a_feed_on_the_host_s_pool_leaves_that_pool_open(dsn: str):
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)
    try:
        insert_notification(dsn, audience="platform", tenant_id=None)
        async with Feed(dsn, header_principal, pool=pool) as feed:
            transport = httpx.ASGITransport(app=host_app(feed))
            async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
                assert await unread(client, "platform") == 1
        assert not pool.closed
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
    finally:
        await pool.close()
