"""An in-process SMTP server that records what it receives: the demo's sink and the tests' peer.

It is a real SMTP server (aiosmtpd) on a loopback port, speaking STARTTLS (default), implicit TLS
or plaintext, with a throwaway certificate authority from ``trustme``. Recipients whose local part
starts with ``transient`` get ``451 4.3.0`` and ones starting with ``bounce`` get ``550 5.1.1``, so a
demo or a test can provoke both kinds of failure with real replies.

It counts every MAIL, RCPT, DATA and AUTH command it receives, and how many of them arrived
*without* TLS, so a test can prove that strict STARTTLS sent nothing in plaintext.

Needs the ``embedded`` extra (``aiosmtpd``, ``trustme``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import tempfile
import threading
import weakref
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Self

import attrs
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

__all__ = ["ReceivedMail", "SinkHandler", "SmtpSink"]

SinkTls = Literal["starttls", "tls", "none"]


@attrs.frozen
class ReceivedMail:
    """One accepted message, exactly as the server received it."""

    envelope_from: str
    recipients: tuple[str, ...]
    #: The DATA bytes as received (dot-unstuffed, CRLF line endings).
    data: bytes
    #: True when the message arrived over TLS.
    tls: bool


def _tls_active(server: SMTP) -> bool:
    transport = server.transport
    return transport is not None and transport.get_extra_info("ssl_object") is not None


class SinkHandler:
    """aiosmtpd handler: records messages and commands, fails chosen recipients."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.received: list[ReceivedMail] = []
        self.commands: Counter[str] = Counter()
        self.plaintext_commands: Counter[str] = Counter()

    def _count(self, server: SMTP, command: str) -> None:
        with self._lock:
            self.commands[command] += 1
            if not _tls_active(server):
                self.plaintext_commands[command] += 1

    async def handle_MAIL(  # noqa: N802 - aiosmtpd's hook name
        self,
        server: SMTP,
        _session: Session,
        envelope: Envelope,
        address: str,
        mail_options: list[str],
    ) -> str:
        self._count(server, "MAIL")
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 OK"

    async def handle_RCPT(  # noqa: N802 - aiosmtpd's hook name
        self,
        server: SMTP,
        _session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        self._count(server, "RCPT")
        local = address.partition("@")[0].lower()
        if local.startswith("transient"):
            return "451 4.3.0 Mailbox temporarily unavailable, try again later"
        if local.startswith("bounce"):
            return "550 5.1.1 No such user here"
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 2.1.5 OK"

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, server: SMTP, _session: Session, envelope: Envelope
    ) -> str:
        self._count(server, "DATA")
        content = envelope.original_content or b""
        mail = ReceivedMail(
            envelope_from=str(envelope.mail_from),
            recipients=tuple(envelope.rcpt_tos),
            data=content,
            tls=_tls_active(server),
        )
        with self._lock:
            self.received.append(mail)
        return "250 2.0.0 Queued"

    def snapshot(self) -> list[ReceivedMail]:
        with self._lock:
            return list(self.received)


class _Authenticator:
    def __init__(self, handler: SinkHandler, username: str, password: str) -> None:
        self._handler = handler
        self._username = username.encode()
        self._password = password.encode()

    def __call__(
        self,
        server: SMTP,
        _session: Session,
        _envelope: Envelope,
        _mechanism: str,
        data: Any,  # noqa: ANN401
    ) -> AuthResult:
        self._handler._count(server, "AUTH")  # noqa: SLF001 - the handler is ours
        ok = (
            isinstance(data, LoginPassword)
            and data.login == self._username
            and data.password == self._password
        )
        # handled=False: aiosmtpd then sends 535 itself; the default (True) means "the
        # authenticator already replied", so a refused client would get no answer at all.
        return AuthResult(success=ok, handled=False)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (aiosmtpd 1.4's Controller can't take port 0)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class _Controller(Controller):
    """aiosmtpd's Controller, remembering its connections so ``stop()`` can hang them up.

    ``Controller.stop()`` closes only the listening socket (Python 3.11's ``Server.close()``
    leaves accepted connections alone), so a client that keeps its session open (the mailer's
    pool does) would leave the server's socket open after its loop is gone: a ResourceWarning.
    """

    connections: weakref.WeakSet[SMTP]

    def factory(self) -> SMTP:
        server: SMTP = super().factory()  # type: ignore[no-untyped-call]
        if not hasattr(self, "connections"):
            self.connections = weakref.WeakSet()
        self.connections.add(server)
        return server

    def stop(self, no_assert: bool = False) -> None:  # noqa: FBT001, FBT002 - aiosmtpd's signature
        if self._thread is not None:
            hung_up = threading.Event()

            def hang_up() -> None:
                for server in list(getattr(self, "connections", ())):
                    if isinstance(server.transport, asyncio.Transport):
                        server.transport.abort()  # connection_lost runs before the loop stops
                hung_up.set()

            self.loop.call_soon_threadsafe(hang_up)
            hung_up.wait(5)
        super().stop(no_assert=no_assert)


class SmtpSink:
    """A real SMTP server on loopback. Use as a context manager, or call start()/stop(); a
    stopped sink can be started again, on the same port, with what it received kept."""

    def __init__(
        self,
        *,
        tls: SinkTls = "starttls",
        advertise_starttls: bool = True,
        username: str | None = None,
        password: str | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.tls: SinkTls = tls
        self.host = host
        self.port = 0
        self.handler = SinkHandler()
        self._advertise_starttls = advertise_starttls
        self._credentials = (username, password) if username and password else None
        # A throwaway certificate authority, in memory; its PEM file is written by start().
        self._ca = trustme.CA()
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.ca_file = Path()
        self._controller: _Controller | None = None

    def client_context(self) -> ssl.SSLContext:
        """An SSL context that trusts this sink's certificate authority (and nothing else)."""
        context = ssl.create_default_context()
        self._ca.configure_trust(context)
        return context

    def _server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
        return context

    def start(self) -> Self:
        self._dir = tempfile.TemporaryDirectory(prefix="outbox-smtp-")
        self.ca_file = Path(self._dir.name) / "ca.pem"
        self._ca.cert_pem.write_to_path(str(self.ca_file))
        # A restart (after stop()) listens on the same port: an outage test's clients find it again.
        self.port = self.port or free_port(self.host)
        kwargs: dict[str, Any] = {}
        if self.tls == "starttls" and self._advertise_starttls:
            kwargs["tls_context"] = self._server_context()
        if self.tls == "tls":
            kwargs["ssl_context"] = self._server_context()
        if self._credentials:
            kwargs["authenticator"] = _Authenticator(self.handler, *self._credentials)
            # aiosmtpd only knows about TLS that STARTTLS set up; under implicit TLS the whole
            # connection is encrypted, so its "require TLS for AUTH" check must be off there.
            kwargs["auth_require_tls"] = self.tls != "tls"
        self._controller = _Controller(
            self.handler, hostname=self.host, port=self.port, server_hostname="localhost", **kwargs
        )
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            with contextlib.suppress(Exception):
                self._controller.stop()
            self._controller = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def received(self) -> list[ReceivedMail]:
        return self.handler.snapshot()


@contextlib.contextmanager
def running_sink(**kwargs: Any) -> Iterator[SmtpSink]:  # noqa: ANN401
    """``with running_sink(tls="starttls") as sink: ...``"""
    with SmtpSink(**kwargs) as sink:
        yield sink
