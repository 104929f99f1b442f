"""The endpoint portal's page in headless Chromium against a real server, database, webhook worker
and local receiver: a tenant registers an endpoint, sends a test event that arrives signed with the
secret the page showed, reveals and rotates the secret, and replays a delivery that arrives signed
with the new one.

``OUTBOX_SCREENSHOTS=DIR`` saves the page's screenshots there (docs/screenshots holds the ones the
webhooks guide shows: ``OUTBOX_SCREENSHOTS=docs/screenshots``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.async_api import Page, async_playwright, expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount
from tests.integration.test_webhook_lanes import verified
from tests.support.browser import chromium
from tests.support.receivers import HttpReceiver
from tests.support.webhooks import GUARD, QUICK, TIMING, Webhooks

from examples.signup_service.serve import free_port
from outbox_adapters.http import HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.portal import EndpointPortal

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

BASE = "/settings/webhooks"


def tenant_of(request: Request) -> str | None:
    """The host's authentication in this test: a header naming the signed-in user's tenant."""
    return request.headers.get("x-tenant")


@pytest.fixture
async def served(wh: Webhooks) -> AsyncIterator[str]:
    """The portal mounted in a host app on a real server, with the webhook workers running."""
    portal = EndpointPortal(wh.pool, tenant_of, guard=GUARD)
    app = Starlette(routes=[Mount(BASE, app=portal.app)])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    async with HttpxWebhookSender(GUARD) as sender:
        workers = WebhookWorkers(
            wh.pool,
            sender,
            drain_config=drain_lane(poll_interval=0.05),
            delivery_config=delivery_lane(timing=TIMING, backoff=QUICK, poll_interval=0.05),
        )
        working = asyncio.create_task(workers.run())
        serving = asyncio.create_task(server.serve())
        try:
            while not server.started:
                assert not serving.done()
                await asyncio.sleep(0.02)
            yield f"http://127.0.0.1:{port}{BASE}"
        finally:
            server.should_exit = True
            workers.request_stop()
            await serving
            await working


async def until(check: Callable[[], Awaitable[bool] | bool]) -> None:
    """Wait (15 s at most) until ``check()`` holds."""
    deadline = time.monotonic() + 15.0
    while True:
        answer = check()
        if await answer if not isinstance(answer, bool) else answer:
            return
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold within 15 s")
        await asyncio.sleep(0.05)


async def shoot(page: Page, name: str) -> None:
    where = os.environ.get("OUTBOX_SCREENSHOTS")
    if where:
        await page.screenshot(path=str(Path(where) / f"portal-{name}.png"), full_page=True)


async def test_a_tenant_registers_tests_rotates_and_replays_in_chromium(
    wh: Webhooks, served: str
) -> None:
    with HttpReceiver() as hook:
        async with async_playwright() as driver:
            browser = await driver.chromium.launch(
                executable_path=chromium(), headless=True, args=["--no-sandbox"]
            )
            try:
                context = await browser.new_context(
                    extra_http_headers={"x-tenant": "acme"}, viewport={"width": 1280, "height": 900}
                )
                page = await context.new_page()
                await page.goto(f"{served}/")
                await expect(page.locator("#empty")).to_be_visible()

                first = await register(page, hook.url("/in"))
                await shoot(page, "registered")

                # The test event arrives at the receiver signed with the secret the page showed.
                await page.click("#send-test")
                await expect(page.locator("#status")).to_contain_text("test event")
                await until(lambda: len(hook.requests) == 1)
                event = verified(first, hook.requests[0])
                assert event["type"] == "webhook.test"
                await expect(page.locator("#secret")).to_be_visible()
                await page.click("#hide-secret")
                await expect(page.locator("#secret")).to_be_hidden()
                assert await page.locator("#secret-value").text_content() == ""

                await page.click("#reveal")
                await expect(page.locator("#secret-value")).to_have_text(first)
                await page.click("#rotate")
                await expect(page.locator("#status")).to_contain_text("rotated")
                rotated = await page.locator("#secret-value").text_content()
                assert rotated is not None
                assert rotated.startswith("whsec_")
                assert rotated != first

                # The delivered test event, replayed: it arrives again, signed with the new secret.
                delivered = page.locator("#deliveries tbody tr", has_text="delivered")
                await until(lambda: _refreshed(page, delivered))
                await delivered.first.locator("button.replay").click()
                await expect(page.locator("#status")).to_contain_text("replayed as event")
                await until(lambda: len(hook.requests) == 2)
                again = verified(rotated, hook.requests[1])
                assert again["type"] == "webhook.test"
                assert (
                    hook.requests[1].headers["webhook-id"] != hook.requests[0].headers["webhook-id"]
                )
                await until(lambda: _refreshed(page, delivered, count=2))
                await page.click("#hide-secret")
                await shoot(page, "deliveries")
            finally:
                await browser.close()
    rows = await wh.rows("SELECT tenant, event_type FROM outbox_webhook_event ORDER BY id")
    assert rows == [("acme", "webhook.test"), ("acme", "webhook.test")]


async def register(page: Page, url: str) -> str:
    """Register an endpoint on the page, after a refused URL; the secret the page shows."""
    # A bad URL is refused with the field marked; nothing is registered.
    await page.fill("#add-url", "http://10.0.0.1/in")
    await page.fill("#add-events", "invoice.*")
    await page.click("#add button[type=submit]")
    await expect(page.locator("#add-error")).to_contain_text("10.0.0.1")
    await expect(page.locator("#add-url")).to_have_attribute("aria-invalid", "true")
    await expect(page.locator("#endpoints tbody tr")).to_have_count(0)

    await page.fill("#add-url", url)
    await page.fill("#add-events", "invoice.*, customer.created")
    await page.fill("#add-description", "Billing system")
    await page.click("#add button[type=submit]")
    await expect(page.locator("#status")).to_contain_text("registered")
    await expect(page.locator("#endpoints tbody tr")).to_have_count(1)
    await expect(page.locator("#add-error")).to_have_text("")
    shown = await page.locator("#secret-value").text_content()
    assert shown is not None
    assert shown.startswith("whsec_")
    return shown


async def _refreshed(page: Page, rows: Any, *, count: int = 1) -> bool:
    """Click the deliveries' Refresh and say whether ``rows`` number ``count`` now."""
    await page.click("#refresh")
    await page.wait_for_timeout(100)
    return bool(await rows.count() == count)
