"""Run the service (and the mailbox page) on uvicorn, in the current event loop.

``async with serving(service, port=8000, mailbox=(sink, 8025)) as urls:`` is what ``__main__`` and
the tests use: the servers listen when the block starts, and leaving it ends the feed's streams
first (so the graceful shutdown does not wait on them), then stops the servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import attrs
import uvicorn

from examples.signup_service.mailbox import mailbox_app
from examples.signup_service.web import Service
from outbox_adapters.demo.sink import SmtpSink

__all__ = ["Urls", "free_port", "serving"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@attrs.frozen
class Urls:
    app: str
    mailbox: str | None


async def _start(server: uvicorn.Server) -> asyncio.Task[None]:
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises why it could not start
            raise RuntimeError("the server exited before it started")
        await asyncio.sleep(0.02)
    return task


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to its caller (two run in one process)."""

    def capture_signals(self) -> contextlib.nullcontext[None]:  # type: ignore[override]
        return contextlib.nullcontext()


def _server(app: object, host: str, port: int) -> uvicorn.Server:
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    return _Server(config)


@contextlib.asynccontextmanager
async def serving(
    service: Service,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    mailbox: tuple[SmtpSink, int] | None = None,
) -> AsyncIterator[Urls]:
    app_server = _server(service.app, host, port)
    servers = [(app_server, await _start(app_server))]
    try:
        mailbox_url = None
        if mailbox is not None:
            sink, mail_port = mailbox
            mail_server = _server(mailbox_app(sink), host, mail_port)
            servers.append((mail_server, await _start(mail_server)))
            mailbox_url = f"http://{host}:{mail_port}"
        yield Urls(f"http://{host}:{port}", mailbox_url)
    finally:
        with contextlib.suppress(RuntimeError):
            service.feed.end_streams()
        for server, _ in servers:
            server.should_exit = True
        await asyncio.gather(*(task for _, task in servers), return_exceptions=True)
