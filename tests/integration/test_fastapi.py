"""The FastAPI host (examples/fastapi_app) on a real database and SMTP server: its lifespan runs the
worker, its endpoint enqueues on the async SQLAlchemy session in the order's transaction, the feed
is mounted behind its authentication."""

from __future__ import annotations

import asyncio
import time

import attrs
import httpx
import pytest
import uvicorn
from tests.support.postgres import query

from examples.fastapi_app import AppSettings, create_app
from examples.signup_service.serve import free_port
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.smtp import SmtpSettings

pytestmark = pytest.mark.integration


async def test_an_order_and_its_mail_commit_together_and_the_lifespans_worker_sends_it(
    dsn: str, lane: str, sink: SmtpSink
) -> None:
    smtp = attrs.evolve(
        SmtpSettings.from_url(f"smtp://{sink.host}:{sink.port}", sender="shop@example.org"),
        tls_context=sink.client_context(),
    )
    app = create_app(AppSettings(dsn=dsn, smtp=smtp, lane=lane, poll_interval=0.05))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())  # runs the lifespan: the worker starts
    try:
        while not server.started:
            assert not serving.done(), serving
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            made = await client.post("/orders", json={"customer": "ann@example.org"})
            assert made.status_code == 201, made.text
            refused = await client.post("/orders", json={"customer": "not an address"})
            assert refused.status_code == 422
            deadline = time.monotonic() + 15
            while not sink.received and time.monotonic() < deadline:  # noqa: ASYNC110 - another thread's sink
                await asyncio.sleep(0.05)
            assert [r for mail in sink.received for r in mail.recipients] == ["ann@example.org"]
            assert (await client.get("/feed/notifications/unread-count")).status_code == 401
            scoped = await client.get(
                "/feed/notifications/unread-count", headers={"x-tenant": "t1"}
            )
            assert scoped.json() == {"unread": 0}
            letters = "/ops/dead-letters/api/failed"
            assert (await client.get(letters)).status_code == 401
            ops = await client.get(letters, headers={"x-operator": "ops"})
            assert (ops.status_code, ops.json()["rows"]) == (200, [])
    finally:
        server.should_exit = True
        await serving
    order = made.json()["order"]
    assert query(dsn, "SELECT customer FROM fastapi_order WHERE id = %s", order) == [
        ("ann@example.org",)
    ]
    # The refused order wrote nothing, and the sent row is recorded.
    assert query(dsn, "SELECT status FROM outbox_message WHERE lane = %s", lane) == [
        ("dispatched",)
    ]
