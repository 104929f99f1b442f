"""SMTP sessions and their pool: one owner per session, idle sessions kept, closed politely.

A :class:`Pool` belongs to one event loop: a slot per owned session, the idle sessions (most
recently returned last), the keeper task that retires them at their age, and the QUITs in flight.
Closing is polite first (QUIT, both TLS close_notify), then an abort, so no socket outlives its loop.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiosmtplib

__all__ = ["Pool", "Session", "close_all", "drop", "quit_later", "reset", "tls_active"]

#: How long a courtesy QUIT or RSET may take; its reply can't change an outcome.
_COURTESY = 1.0
#: How often a courteous close looks whether the server has finished its side.
_CLOSE_POLL = 0.01


def tls_active(client: aiosmtplib.SMTP) -> bool:
    return client.is_connected and client.get_transport_info("ssl_object") is not None


class Session:
    """One established session: connected, EHLO'd, TLS per the policy, authenticated."""

    __slots__ = ("client", "expires_at", "transactions")

    def __init__(self, client: aiosmtplib.SMTP, expires_at: float) -> None:
        self.client = client
        self.expires_at = expires_at
        self.transactions = 0


class Pool:
    """The sessions of one event loop: a slot per owned session, the idle ones, their keeper."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_sessions: int) -> None:
        self.loop = loop
        self.slots = asyncio.Semaphore(max_sessions)
        #: Most recently returned last: sends take from the end, so spare sessions age out.
        self.idle: list[Session] = []
        self.changed = asyncio.Event()
        self.keeper: asyncio.Task[None] | None = None
        self.quitting: set[asyncio.Task[None]] = set()
        self.closed = False


async def reset(client: aiosmtplib.SMTP) -> None:
    """RSET after a refused MAIL or RCPT; a session that won't reset cleanly is closed.

    The refusal already decided the outcome, so a failing RSET only costs the session: the reply
    (e.g. a permanent 550) must not turn into a connection failure.
    """
    clean = False
    with contextlib.suppress(aiosmtplib.SMTPException, OSError, TimeoutError):
        async with asyncio.timeout(_COURTESY):
            clean = (await client.execute_command(b"RSET")).code == 250
    if not clean:
        client.close()


async def quit_politely(client: aiosmtplib.SMTP) -> None:
    """QUIT and close, within the courtesy time; then make sure the socket is gone.

    The close is polite first (TLS: our close_notify, then the server's), so the server can end
    its side cleanly too. If the server doesn't finish it within the courtesy time (or the loop
    is shutting down and cancels us), the connection is aborted: a TLS close left waiting would
    otherwise keep the socket open past an event loop that ends soon after (aclose, then the end
    of asyncio.run). The reply can't change any outcome any more.
    """
    protocol = client.protocol
    try:
        with contextlib.suppress(aiosmtplib.SMTPException, OSError, TimeoutError):
            async with asyncio.timeout(_COURTESY):
                await client.quit()  # QUIT, 221, then the transport's close
                # Until connection_lost has run: aiosmtplib offers nothing to await for it.
                while protocol is not None and protocol.transport is not None:  # noqa: ASYNC110
                    await asyncio.sleep(_CLOSE_POLL)
    finally:
        if protocol is not None and isinstance(protocol.transport, asyncio.Transport):
            protocol.transport.abort()
        drop(client)
    # An abort closes the socket in the transport's connection_lost callback, which the abort
    # schedules: one trip round the loop runs it, so aclose() returns with the socket closed.
    await asyncio.sleep(0)


def quit_later(pool: Pool, client: aiosmtplib.SMTP) -> None:
    task = pool.loop.create_task(quit_politely(client))
    pool.quitting.add(task)  # aclose awaits these; the loop's shutdown cancels them (and closes)
    task.add_done_callback(pool.quitting.discard)


def close_all(sessions: list[Session]) -> None:
    """Drop ``sessions`` at once, without QUIT: the loop is ending or already gone."""
    for session in sessions:
        drop(session.client)


def drop(client: aiosmtplib.SMTP) -> None:
    """Close the connection at once (abort, not close: see :func:`quit_politely`).

    A session of a closed loop can't schedule anything any more (RuntimeError); it is gone
    either way.
    """
    with contextlib.suppress(RuntimeError):
        if isinstance(client.transport, asyncio.Transport):
            client.transport.abort()
        client.close()
