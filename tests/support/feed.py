"""The in-app feed as a test drives it: a host app with header "authentication", rows written
around the feed, and SSE clients reading a real stream from a real server (uvicorn on port 0).

The host's authentication here reads ``X-Principal: platform`` or ``X-Principal: tenant:<id>``; a
real host reads its session. Query parameters play no part in it, as in any host.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import uvicorn
from starlette.applications import Starlette
from starlette.requests import HTTPConnection
from starlette.routing import Mount

from outbox_adapters.feed import Feed, Principal

#: What a test's SSE client saw: ``refresh`` events (``"refresh <data>"`` had one carried a
#: payload), ``ping`` comments, and ``closed`` at the end.
REFRESH, PING, CLOSED = "refresh", "ping", "closed"


def header_principal(connection: HTTPConnection) -> Principal | None:
    """The test host's authentication: the ``X-Principal`` header (a real host reads its session)."""
    who = connection.headers.get("x-principal")
    if who == "platform":
        return Principal.platform_operator()
    if who is not None and who.startswith("tenant:"):
        return Principal.tenant_user(who.removeprefix("tenant:"))
    return None


def as_header(who: str) -> dict[str, str]:
    return {"X-Principal": who}


def host_app(feed: Feed) -> Starlette:
    """A host application with the feed mounted at ``/feed``."""
    return Starlette(routes=[Mount("/feed", app=feed.app)])


def insert_notification(
    dsn: str, *, audience: str, tenant_id: str | None, title: str = "hello", event_id: str = ""
) -> int:
    """A notification row as the in-app channel writes it (one per event and audience); its id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "INSERT INTO outbox_notification (event_id, audience, tenant_id, title, body)"
            " VALUES (coalesce(nullif(%s, ''), gen_random_uuid()::text), %s, %s, %s, 'body')"
            " RETURNING id",
            (event_id, audience, tenant_id, title),
        ).fetchone()
    assert found is not None
    return int(found[0])


def read_at(dsn: str, notification_id: int) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT read_at FROM outbox_notification WHERE id = %s", (notification_id,)
        ).fetchone()
    assert found is not None
    return found[0]


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """``app`` on a real uvicorn server on a free port of 127.0.0.1; its base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
        timeout_graceful_shutdown=1,
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:  # noqa: ASYNC110 - uvicorn's flag, no event
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        async with asyncio.timeout(10):
            await task


class SseClient:
    """One EventSource-like client: what it saw, in order, on a queue."""

    def __init__(
        self, client: httpx.AsyncClient, url: str, who: str, headers: dict[str, str] | None = None
    ) -> None:
        self.seen: asyncio.Queue[str] = asyncio.Queue()
        self.status: int | None = None
        #: The response's headers, and its body when it was refused (not a 200).
        self.headers = httpx.Headers()
        self.body = ""
        self.opened = asyncio.Event()
        sent = {**as_header(who), **(headers or {})}
        self._task = asyncio.create_task(self._read(client, url, sent))

    async def _read(self, client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        try:
            async with client.stream("GET", url, headers=headers) as response:
                self.status = response.status_code
                self.headers = response.headers
                if response.status_code != 200:
                    self.body = (await response.aread()).decode()
                self.opened.set()
                event, data = None, ""
                async for line in response.aiter_lines():
                    if line.startswith(":"):
                        self.seen.put_nowait(PING)
                    elif line.startswith("event:"):
                        event = line.partition(":")[2].strip()
                    elif line.startswith("data:"):
                        data += line.partition(":")[2].strip()
                    elif line == "" and event is not None:
                        # An event with a payload shows as "name payload": REFRESH is payload-free.
                        self.seen.put_nowait(f"{event} {data}" if data else event)
                        event, data = None, ""
        finally:
            self.opened.set()
            self.seen.put_nowait(CLOSED)

    async def next(self, within: float = 5.0) -> str:
        async with asyncio.timeout(within):
            return await self.seen.get()

    def drain(self) -> list[str]:
        """What arrived so far and was not taken yet."""
        out = []
        while not self.seen.empty():
            out.append(self.seen.get_nowait())
        return out

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
