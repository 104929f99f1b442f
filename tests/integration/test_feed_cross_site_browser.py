"""A cross-site form against the feed, in headless Chromium (Debian's package, driven by
Playwright): the feed's host serves on one port of 127.0.0.1, a foreign page on another.

Two ports of one host are the same site but not the same origin, so the browser sends the host's
``SameSite=Lax`` session cookie with the foreign page's form: exactly the case where only the
feed's cross-site rule stands between the page and the user's notifications. The foreign page
auto-submits a form POST to ``read-all``; the answer is a 403 and the unread count stays 3. The
host's own page, fetching the same endpoint, still marks them read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from tests.support.browser import chromium
from tests.support.feed import insert_notification, served

from outbox_adapters.feed import Feed, Principal

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

playwright_api = pytest.importorskip("playwright.async_api")


def cookie_principal(connection: HTTPConnection) -> Principal | None:
    """The host's session, reduced to a cookie naming the tenant."""
    tenant = connection.cookies.get("tenant")
    return Principal.tenant_user(tenant) if tenant else None


async def host_page(_request: Request) -> HTMLResponse:
    return HTMLResponse("<!doctype html><title>host</title><p>dashboard</p>")


def foreign_page(target: str) -> Starlette:
    """Another origin's page: a form that posts itself to ``target`` as soon as it loads."""
    html = (
        "<!doctype html><title>prize</title>"
        f'<form method="post" action="{target}"><input name="claim" value="1"></form>'
        "<script>document.forms[0].submit()</script>"
    )

    async def page(_request: Request) -> HTMLResponse:
        return HTMLResponse(html)

    return Starlette(routes=[Route("/", page)])


@pytest.fixture
async def host(dsn: str) -> AsyncIterator[tuple[Feed, str]]:
    async with Feed(dsn, cookie_principal) as feed:
        app = Starlette(routes=[Route("/", host_page), Mount("/feed", app=feed.app)])
        async with served(app) as url:
            yield feed, url


async def test_a_cross_site_form_post_is_refused_and_the_count_stays(host, dsn: str) -> None:
    feed, url = host
    for _ in range(3):
        insert_notification(dsn, audience="tenant", tenant_id="acme")
    read_all = f"{url}/feed/notifications/read-all"
    async with (
        served(foreign_page(read_all)) as foreign,
        playwright_api.async_playwright() as driver,
    ):
        assert foreign.rsplit(":", 1)[1] != url.rsplit(":", 1)[1]  # another port: another origin
        browser = await driver.chromium.launch(
            executable_path=chromium(), headless=True, args=["--no-sandbox"]
        )
        try:
            context = await browser.new_context()
            await context.add_cookies(
                [{"name": "tenant", "value": "acme", "url": url, "sameSite": "Lax"}]
            )
            page = await context.new_page()
            async with page.expect_response(read_all) as posted:
                await page.goto(f"{foreign}/")
            answer = await posted.value
            sent = await answer.request.all_headers()
            assert answer.request.method == "POST"
            assert sent.get("cookie") == "tenant=acme"  # the session went along
            assert sent.get("sec-fetch-site") == "same-site"
            assert answer.status == 403
            assert "cross-site request refused" in (await answer.json())["error"]

            # The host's own page: its count is still 3, and its own fetch marks them read.
            await page.goto(f"{url}/")
            count = "fetch('/feed/notifications/unread-count').then(r => r.json())"
            assert await page.evaluate(count) == {"unread": 3}
            mark = "fetch('/feed/notifications/read-all', {method: 'POST'}).then(r => r.status)"
            assert await page.evaluate(mark) == 200
            assert await page.evaluate(count) == {"unread": 0}
        finally:
            await browser.close()
    assert feed.slots.open == 0
