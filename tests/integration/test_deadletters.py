"""The dead-letter console (outbox_adapters.deadletters) mounted in a host app on a real server and
database: closed without the host's authorization, failed rows by class, an audited requeue over
JSON only, scrubbed rows refused; and the page in headless Chromium."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import uvicorn
from playwright.async_api import async_playwright, expect
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount
from tests.support.browser import assert_unframeable, chromium
from tests.support.postgres import query, scratch_database

from examples.signup_service.serve import free_port
from outbox_adapters.deadletters import DeadLetters
from outbox_adapters.postgres import schema
from outbox_adapters.postgres.channels import PostgresParkLedger

pytestmark = pytest.mark.integration

BASE = "/ops/dead-letters"


@pytest.fixture
def db(postgres_server: str) -> Iterator[str]:
    with scratch_database(postgres_server, "dlq") as dsn:
        schema.apply(dsn)
        yield dsn


def _row(dsn: str, status: str, error: str | None, *, scrubbed: bool = False) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "INSERT INTO outbox_message (lane, payload, status, attempts, resolved_at, last_error,"
            " claim_token, scrubbed_at) VALUES ('mail', '{\"to\": \"x@example.org\"}', %s, 5,"
            " now(), %s, 't', CASE WHEN %s THEN now() END) RETURNING id",
            (status, error, scrubbed),
        ).fetchone()
    assert found is not None
    return int(found[0])


def authorize(request: Request) -> str | None:
    """The host's authorization in these tests: a header naming the operator."""
    return request.headers.get("x-operator")


@pytest.fixture
async def console(db: str) -> AsyncIterator[str]:
    async with AsyncConnectionPool(
        db, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False
    ) as pool:
        letters = DeadLetters(pool, authorize)
        app = Starlette(routes=[Mount(BASE, app=letters.app)])
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        serving = asyncio.create_task(server.serve())
        try:
            while not server.started:
                assert not serving.done()
                await asyncio.sleep(0.02)
            yield f"http://127.0.0.1:{port}{BASE}"
        finally:
            server.should_exit = True
            await serving


def test_there_is_no_default_authorization(db: str) -> None:
    with pytest.raises(TypeError, match="authorize"):
        DeadLetters(object(), None)  # type: ignore[arg-type]


async def test_closed_without_the_hosts_authorization(console: str) -> None:
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{console}/")).status_code == 401
        assert (await client.get(f"{console}/api/failed")).status_code == 401
        posted = await client.post(f"{console}/api/requeue", json={"queue": "messages", "ids": [1]})
        assert posted.status_code == 401


async def test_failed_rows_by_class_and_an_audited_requeue_over_json_only(
    db: str, console: str
) -> None:
    bounced = _row(db, "failed", "recipient a@x.example refused: SMTP 550 5.1.1")
    _row(db, "failed", "recipient b@y.example refused: SMTP 550 5.1.1")
    sent = _row(db, "dispatched", None, scrubbed=True)
    ops = {"x-operator": "ann"}
    async with httpx.AsyncClient(headers=ops) as client:
        report = (await client.get(f"{console}/api/failed")).json()
        assert [(g["error_class"], g["rows"]) for g in report["groups"]] == [
            ("recipient <address> refused", 2)
        ]
        assert "a@x.example" not in json.dumps(report)
        assert {r["id"] for r in report["rows"]} == {bounced, bounced + 1}
        form = await client.post(f"{console}/api/requeue", data={"queue": "messages", "ids": "1"})
        assert form.status_code == 415  # a cross-site form can't requeue
        bad = await client.post(f"{console}/api/requeue", json={"queue": "mail", "ids": [bounced]})
        assert bad.status_code == 400
        odd = await client.post(f"{console}/api/requeue", json={"queue": "messages", "ids": [True]})
        assert odd.status_code == 400
        done = await client.post(
            f"{console}/api/requeue",
            json={"queue": "messages", "ids": [bounced, sent], "reason": "OPS-9 fixed"},
        )
        assert done.status_code == 200
        answer = done.json()
        assert answer["requeued"] == [bounced]
        assert "scrubbed when it was marked" in answer["refused"][str(sent)]
    assert query(db, "SELECT message_id, actor, reason FROM outbox_requeue_audit") == [
        (bounced, "ann", "OPS-9 fixed")
    ]


async def test_the_page_requeues_a_row_with_its_reason_in_chromium(db: str, console: str) -> None:
    failed = _row(db, "failed", "SMTP failure at connect: timed out")
    _row(db, "failed", "SMTP failure at tls: bad certificate")
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=chromium(), headless=True, args=["--no-sandbox"]
        )
        try:
            context = await browser.new_context(extra_http_headers={"x-operator": "bob"})
            page = await context.new_page()
            await page.goto(f"{console}/")
            row = page.locator(f"#rows tr[data-id='{failed}']")
            await expect(row).to_contain_text("SMTP failure at connect")
            await expect(page.locator("#groups tbody tr")).to_have_count(2)
            await page.fill("#reason", "OPS-11: relay back")
            await row.locator("button.requeue").click()
            await expect(page.locator("#status")).to_have_text(f"requeued {failed}")
            await expect(page.locator("#rows tbody tr")).to_have_count(1)  # the other one stays
            await _park(db, "ev-page", reason="no admin address: ev-page")
            await page.select_option("#queue", "parked")
            parked = page.locator("#rows tr[data-id='ev-page']")
            await expect(parked).to_contain_text("outbox dlq redrive")
            await expect(parked.locator("button")).to_have_count(0)
            shots = (
                Path(os.environ.get("OUTBOX_SCREENSHOTS", ""))
                if os.environ.get("OUTBOX_SCREENSHOTS")
                else None
            )
            if shots is not None:
                await page.screenshot(path=str(shots / "dead-letters.png"))
        finally:
            await browser.close()
    assert query(db, "SELECT actor, reason FROM outbox_requeue_audit") == [
        ("bob", "OPS-11: relay back")
    ]
    assert query(db, "SELECT status FROM outbox_message WHERE id = %s", failed) == [("pending",)]


async def _park(dsn: str, event: str, *, reason: str, channel: str = "notification-email") -> None:
    async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, open=False) as pool:
        await PostgresParkLedger(pool).record(
            channel, event, "tenant_welcome", reason=reason, attempts=3
        )


async def test_parked_events_are_listed_by_reason_and_not_requeued_here(
    db: str, console: str
) -> None:
    for event in ("ev-1", "ev-2"):
        await _park(db, event, reason="recipient admin@x.example refused: SMTP 550 5.1.1")
    await _park(db, "ev-3", reason="no event", channel="notification-inapp")
    async with httpx.AsyncClient(headers={"x-operator": "ann"}) as client:
        report = (await client.get(f"{console}/api/failed?queue=parked")).json()
        assert [(g["error_class"], g["rows"]) for g in report["groups"]] == [
            ("recipient <address> refused", 2),
            ("no event", 1),
        ]
        assert "admin@x.example" not in json.dumps(report)
        rows = {r["id"]: r for r in report["rows"]}
        assert set(rows) == {"ev-1", "ev-2", "ev-3"}
        assert rows["ev-1"]["lane"] == "notification-email / tenant_welcome"
        assert rows["ev-3"]["lane"] == "notification-inapp / tenant_welcome"
        assert not rows["ev-1"]["requeueable"]
        assert "outbox dlq redrive" in rows["ev-1"]["note"]
        refused = await client.post(
            f"{console}/api/requeue", json={"queue": "parked", "ids": [1], "reason": "x"}
        )
        assert refused.status_code == 400
        assert "dlq redrive" in refused.json()["error"]


async def test_every_response_forbids_framing_and_sniffing(console: str) -> None:
    async with httpx.AsyncClient(headers={"x-operator": "ann"}) as client:
        answers = [
            await client.get(f"{console}/"),
            await client.get(f"{console}/page.js"),
            await client.get(f"{console}/api/failed"),
            await client.get(f"{console}/nowhere"),
            await client.post(f"{console}/api/requeue", json={"queue": "messages", "ids": [1]}),
        ]
    for answer in answers:
        assert_unframeable(answer)


@pytest.mark.parametrize(
    "headers",
    [
        {"sec-fetch-site": "cross-site", "origin": "https://evil.example"},
        {"sec-fetch-site": "same-site", "origin": "http://127.0.0.1:1"},
        {"origin": "https://evil.example"},
        {"origin": "null"},
    ],
)
async def test_a_cross_site_requeue_is_refused_and_audits_nothing(
    db: str, console: str, headers: dict[str, str]
) -> None:
    failed = _row(db, "failed", "SMTP failure at connect: timed out")
    async with httpx.AsyncClient(headers={"x-operator": "eve", **headers}) as client:
        got = await client.post(
            f"{console}/api/requeue", json={"queue": "messages", "ids": [failed]}
        )
    assert got.status_code == 403
    assert "cross-site request refused" in got.json()["error"]
    assert query(db, "SELECT count(*) FROM outbox_requeue_audit") == [(0,)]
    assert query(db, "SELECT status FROM outbox_message WHERE id = %s", failed) == [("failed",)]


async def test_a_same_origin_requeue_passes_the_rule(db: str, console: str) -> None:
    failed = _row(db, "failed", "SMTP failure at connect: timed out")
    own = console.removesuffix(BASE)
    async with httpx.AsyncClient(headers={"x-operator": "ann"}) as client:
        for headers in ({"sec-fetch-site": "same-origin", "origin": own}, {"origin": own}):
            got = await client.post(
                f"{console}/api/requeue",
                json={"queue": "messages", "ids": [failed], "reason": "r"},
                headers=headers,
            )
            assert got.status_code == 200, got.text


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"queue": [], "ids": [1]}, "queue must be one of"),
        ({"queue": {"a": 1}, "ids": [1]}, "queue must be one of"),
        ({"ids": [1]}, "queue must be one of"),
        ({"queue": "messages"}, "ids must be"),
        ({"queue": "messages", "ids": "1"}, "ids must be"),
        ({"queue": "messages", "ids": [1], "reason": 7}, "reason must be"),
        ([1, 2], "the body must be a JSON object"),
        ("[" * 5000, "the body must be JSON"),
    ],
)
async def test_a_bad_requeue_body_is_a_400_naming_the_field(
    console: str, body: object, named: str
) -> None:
    content = body if isinstance(body, str) else json.dumps(body)
    async with httpx.AsyncClient(
        headers={"x-operator": "ann", "content-type": "application/json"}
    ) as client:
        got = await client.post(f"{console}/api/requeue", content=content)
    assert got.status_code == 400, got.text
    assert named in got.json()["error"]
