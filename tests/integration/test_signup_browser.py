"""The reference app end to end in headless Chromium (Debian's package, driven by Playwright).

A platform operator has the platform dashboard open. Someone signs up through the page; the
operator's badge turns to 1 without a reload (the SSE refresh), and so does the new tenant's. Both
mark it read and see 0. The welcome and the owner notice are in the mailbox page; the welcome's
link confirms the address. Then the stream goes down (the server ends its streams and refuses new
ones): the page says it is polling, and a second signup still turns its badge to 1.

``OUTBOX_SCREENSHOTS=DIR`` saves the dashboards' screenshots there (docs/screenshots holds the ones
docs/guides/index.md shows); otherwise they go to the test's temporary directory.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.browser import chromium
from tests.support.signup import (
    OPERATOR_PASSWORD,
    Running,
    fresh_database,
    mails,
    running_service,
    service_settings,
    until,
)

from examples.signup_service.serve import free_port
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.feed import FeedSettings

pytestmark = pytest.mark.integration

playwright_api = pytest.importorskip("playwright.async_api")
TIMEOUT_MS = 15_000


@pytest.fixture
def service_dsn(postgres_server: str) -> Iterator[str]:
    with fresh_database(postgres_server) as dsn:
        yield dsn


@pytest.fixture
async def running(service_dsn: str, nats_url: str, sink: SmtpSink) -> AsyncIterator[Running]:
    settings = service_settings(
        service_dsn,
        nats_url,
        sink,
        free_port(),
        poll_seconds=2.0,
        feed=FeedSettings(ping_interval=5.0),
    )
    async with running_service(settings, sink) as service:
        yield service


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    executable = chromium()
    async with playwright_api.async_playwright() as driver:
        launched = await driver.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            await launched.close()


def _shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("OUTBOX_SCREENSHOTS", tmp_path))
    where.mkdir(parents=True, exist_ok=True)
    return where


async def test_signup_in_a_browser_updates_both_dashboards_live_then_by_polling(
    running: Running, sink: SmtpSink, browser: object, tmp_path: Path
) -> None:
    expect = playwright_api.expect
    expect.set_options(timeout=TIMEOUT_MS)
    app = running.urls.app
    size = {"width": 1000, "height": 640}
    # Two contexts: two browsers' cookie jars (the operator's session, the new tenant's).
    operator = await (await browser.new_context(viewport=size)).new_page()  # type: ignore[attr-defined]
    visitor = await (await browser.new_context(viewport=size)).new_page()  # type: ignore[attr-defined]

    # The operator signs in and keeps the platform dashboard open.
    await operator.goto(f"{app}/platform")
    await operator.fill("#password", OPERATOR_PASSWORD)
    await operator.click("button[type=submit]")
    await expect(operator.locator("#mode")).to_have_attribute("data-mode", "live")
    await expect(operator.locator("#badge")).to_have_text("0")

    # Someone signs up through the page and lands on the tenant dashboard.
    await visitor.goto(f"{app}/")
    await visitor.fill("#company", "Rocket Labs")
    await visitor.fill("#admin_name", "Rita")
    await visitor.fill("#admin_email", "rita@rocketlabs.example")
    await visitor.click("button[type=submit]")
    await visitor.wait_for_url(f"{app}/tenant")
    await expect(visitor.locator("#mode")).to_have_attribute("data-mode", "live")

    # Both badges turn to 1; the operator's page was never reloaded and never polled.
    await expect(operator.locator("#badge")).to_have_text("1")
    await expect(operator.locator("#mode")).to_have_attribute("data-mode", "live")
    await expect(operator.locator("#notifications li.unread strong")).to_have_text(
        "New tenant: Rocket Labs"
    )
    await expect(visitor.locator("#badge")).to_have_text("1")
    await expect(visitor.locator("#notifications li strong")).to_have_text("Welcome to Rocket Labs")
    shots = _shots(tmp_path)
    await operator.screenshot(path=str(shots / "platform-dashboard.png"))
    await visitor.screenshot(path=str(shots / "tenant-dashboard.png"))

    # Mark read: 0 on both.
    await operator.click("#notifications li .mark-read")
    await expect(operator.locator("#badge")).to_have_text("0")
    await visitor.click("#read-all")
    await expect(visitor.locator("#badge")).to_have_text("0")

    # The mailbox page shows both e-mails; the welcome's link confirms the address.
    assert running.urls.mailbox is not None
    assert await until(lambda: len(mails(sink)) == 2)
    await visitor.goto(running.urls.mailbox)
    await expect(visitor.locator("table tr")).to_have_count(3)
    await expect(visitor.get_by_text("Confirm your address for Rocket Labs")).to_be_visible()
    await expect(visitor.get_by_text("New tenant: Rocket Labs")).to_be_visible()
    await visitor.screenshot(path=str(shots / "mailbox.png"))
    await visitor.locator("a[href*='/confirm?token=']").click()
    await visitor.click("button[type=submit]")
    await expect(visitor.get_by_text("your address is confirmed")).to_be_visible()

    # The stream goes down: the server ends its streams and refuses new ones (503).
    running.service.feed.end_streams()
    await expect(operator.locator("#mode")).to_have_attribute("data-mode", "polling")
    async with httpx.AsyncClient(base_url=app) as client:
        second = await client.post(
            "/v1/signup",
            json={"company": "Nova", "admin_name": "Nia", "admin_email": "nia@nova.example"},
        )
    assert second.status_code == 201
    # The poll (every 2 s here; 30 s by default) still brings the badge to 1.
    await expect(operator.locator("#badge")).to_have_text("1")
    await expect(operator.locator("#mode")).to_have_attribute("data-mode", "polling")
    await expect(operator.locator("#notifications li.unread strong")).to_have_text(
        "New tenant: Nova"
    )
