"""Hostile SMTP servers for RELIABILITY F7 (and the hung peers of F10).

Two kinds:

- :class:`RawSmtpServer`, a minimal SMTP server written on asyncio streams, for what aiosmtpd
  can't be made to do: **hang after connect** (never greets), **hang after DATA** (takes the whole
  message, never replies), **slow drip** (every reply one byte every ``drip_interval`` seconds, a
  peer that defeats per-read timeouts), and **disconnect** mid-exchange (after MAIL, or after the
  message but before the reply). It speaks STARTTLS (a throwaway ``trustme`` CA; trust it with
  :meth:`RawSmtpServer.client_context`) so a strict client gets as far as DATA.
- the aiosmtpd :class:`~outbox_adapters.demo.sink.SmtpSink` for the rest: no STARTTLS advertised
  (:func:`no_starttls_sink`), a certificate the client doesn't trust (:func:`untrusted_context`),
  4xx and 5xx replies (its ``transient*`` and ``bounce*`` recipients), plus :func:`timed_sink`,
  which also stamps when each message arrived.

Every server counts the commands it saw (``commands``) and those that arrived before TLS was up
(``plaintext_commands``): a strict STARTTLS client must never send MAIL, RCPT, DATA or AUTH there.

A raw server runs on the test's event loop (it must: it is async); hung connections wait on an event
that :meth:`RawSmtpServer.close` sets, so nothing outlives the test.
"""

from __future__ import annotations

import asyncio
import enum
import ssl
import threading
import time
from collections import Counter
from email import message_from_bytes
from typing import Any, Literal, Self

import attrs
import trustme
from aiosmtpd.smtp import SMTP, Envelope, Session

from outbox_adapters.demo.sink import SinkHandler, SmtpSink

__all__ = [
    "PLAINTEXT_SENSITIVE",
    "Arrival",
    "Hostility",
    "RawSmtpServer",
    "TimedSinkHandler",
    "no_starttls_sink",
    "timed_sink",
    "untrusted_context",
]

#: Commands that must never travel in plaintext under a strict TLS policy.
PLAINTEXT_SENSITIVE = ("MAIL", "RCPT", "DATA", "AUTH")


class Hostility(enum.Enum):
    HANG_AFTER_CONNECT = "hang after connect"
    HANG_AFTER_DATA = "hang after DATA"
    SLOW_DRIP = "slow drip"
    DISCONNECT = "disconnect"
    #: Behaves well (delivers): a raw server's control case.
    NONE = "none"


@attrs.define
class _Conversation:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    tls: bool = False
    over: bool = False


class RawSmtpServer:
    """A loopback SMTP server with one deliberate flaw. ``async with RawSmtpServer(...) as srv``."""

    def __init__(
        self,
        hostility: Hostility,
        *,
        drip_interval: float = 0.1,
        drip_banner: bool = False,
        disconnect_at: Literal["MAIL", "DATA"] = "MAIL",
        advertise_starttls: bool = True,
    ) -> None:
        self.hostility = hostility
        self.drip_interval = drip_interval
        self.drip_banner = drip_banner
        self.disconnect_at = disconnect_at
        self.advertise_starttls = advertise_starttls
        self.host = "127.0.0.1"
        self.port = 0
        #: Every command verb received, and those received before TLS was up.
        self.commands: Counter[str] = Counter()
        self.plaintext_commands: Counter[str] = Counter()
        #: Connections accepted, and the DATA bodies taken (maybe delivered, even when unanswered).
        self.connections = 0
        self.messages: list[bytes] = []
        self._ca = trustme.CA()
        self._server: asyncio.Server | None = None
        self._closing: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this server's certificate (and nothing else)."""
        context = ssl.create_default_context()
        self._ca.configure_trust(context)
        return context

    def _server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
        return context

    async def start(self) -> Self:
        self._closing = asyncio.Event()
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        assert self._closing is not None
        self._closing.set()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    # --- one connection ---------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            await self._converse(reader, writer)
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client gave up (its deadline): that is what these servers are for
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
            self._handlers.discard(task)

    async def _hang(self) -> None:
        assert self._closing is not None
        await self._closing.wait()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.hostility is Hostility.HANG_AFTER_CONNECT:
            await self._hang()
            return
        await self._reply(writer, "220 localhost ESMTP hostile test server", banner=True)
        state = _Conversation(reader, writer)
        while not state.over:
            line = await reader.readline()
            if not line:
                return
            verb = line.split(b" ", 1)[0].strip().upper().decode("ascii", "replace")
            self.commands[verb] += 1
            if not state.tls:
                self.plaintext_commands[verb] += 1
            await self._answer(verb, state)

    async def _answer(self, verb: str, state: _Conversation) -> None:
        writer = state.writer
        if verb in {"EHLO", "HELO"}:
            offer = ["8BITMIME"]
            if self.advertise_starttls and not state.tls:
                offer.append("STARTTLS")
            await self._reply(writer, "250-localhost\r\n" + _multiline(offer))
        elif verb == "STARTTLS" and self.advertise_starttls and not state.tls:
            await self._reply(writer, "220 2.0.0 Ready to start TLS")
            await writer.start_tls(self._server_context())
            state.tls = True
        elif verb == "MAIL":
            if self.hostility is Hostility.DISCONNECT and self.disconnect_at == "MAIL":
                state.over = True  # mid-exchange: the sender is waiting for MAIL's reply
                return
            await self._reply(writer, "250 2.1.0 OK")
        elif verb == "RCPT":
            await self._reply(writer, "250 2.1.5 OK")
        elif verb == "DATA":
            await self._data(state)
        elif verb in {"RSET", "NOOP"}:
            await self._reply(writer, "250 2.0.0 OK")
        elif verb == "QUIT":
            await self._reply(writer, "221 2.0.0 Bye")
            state.over = True
        else:
            await self._reply(writer, "502 5.5.2 Command not recognised")

    async def _data(self, state: _Conversation) -> None:
        await self._reply(state.writer, "354 End data with <CR><LF>.<CR><LF>")
        self.messages.append(await state.reader.readuntil(b"\r\n.\r\n"))
        if self.hostility is Hostility.HANG_AFTER_DATA:
            await self._hang()  # has the message; the sender never learns it
            state.over = True
        elif self.hostility is Hostility.DISCONNECT:
            state.over = True  # has the message, closes before the reply
        else:
            await self._reply(state.writer, "250 2.0.0 Queued")

    async def _reply(
        self, writer: asyncio.StreamWriter, text: str, *, banner: bool = False
    ) -> None:
        data = (text + "\r\n").encode("ascii")
        drip = self.hostility is Hostility.SLOW_DRIP and (self.drip_banner or not banner)
        if not drip:
            writer.write(data)
            await writer.drain()
            return
        for index in range(len(data)):
            writer.write(data[index : index + 1])
            await writer.drain()
            await asyncio.sleep(self.drip_interval)


def _multiline(lines: list[str]) -> str:
    return "\r\n".join(f"250-{line}" for line in lines[:-1]) + (
        f"\r\n250 {lines[-1]}" if len(lines) > 1 else f"250 {lines[-1]}"
    )


# --- the aiosmtpd variants ------------------------------------------------------------------------


def no_starttls_sink() -> SmtpSink:
    """A sink that never advertises STARTTLS: what a man in the middle who strips it looks like."""
    return SmtpSink(tls="starttls", advertise_starttls=False)


def untrusted_context() -> ssl.SSLContext:
    """A client context that trusts a CA of its own: every sink's certificate is 'bad' to it."""
    context = ssl.create_default_context()
    trustme.CA().configure_trust(context)
    return context


@attrs.frozen
class Arrival:
    """When a message reached a sink (``time.time()``, the DB clock's machine) and whose it was."""

    at: float
    message_id: str
    recipients: tuple[str, ...]


class TimedSinkHandler(SinkHandler):
    """The sink's handler that also stamps when each message's DATA was complete."""

    def __init__(self) -> None:
        super().__init__()
        self._arrivals_lock = threading.Lock()
        self.arrivals: list[Arrival] = []

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        at = time.time()
        reply = await super().handle_DATA(server, session, envelope)
        parsed = message_from_bytes(envelope.original_content or b"")
        arrival = Arrival(at, str(parsed.get("Message-ID", "")), tuple(envelope.rcpt_tos))
        with self._arrivals_lock:
            self.arrivals.append(arrival)
        return reply

    def arrived(self) -> list[Arrival]:
        with self._arrivals_lock:
            return list(self.arrivals)


def timed_sink(**kwargs: Any) -> tuple[SmtpSink, TimedSinkHandler]:
    """An :class:`SmtpSink` (not started) whose handler stamps arrivals."""
    sink = SmtpSink(**kwargs)
    handler = TimedSinkHandler()
    sink.handler = handler  # the controller is built from it in start()
    return sink, handler
