"""The SMTP mailer against real SMTP servers: security policy, reply classification, session reuse.

Every test talks to a real aiosmtpd server (:class:`SmtpSink`, STARTTLS with a throwaway CA, in a
thread) or to a raw asyncio server that misbehaves on purpose. Connections are counted on the
SERVER (one aiosmtpd protocol object per TCP connection), not only through the mailer's own stats,
so a pool that lied about reusing sessions would still be caught.
"""

from __future__ import annotations

import asyncio
import gc
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session
from tests.support.smtp import SENDER, settings_for

from outbox_adapters.demo import sink as smtp_sink
from outbox_adapters.demo.sink import SinkHandler, SinkTls, SmtpSink
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.errors import ConfigurationError
from outbox_core.mail import OutgoingMail, build_message
from outbox_core.outcomes import OutcomeKind
from outbox_core.tls import SmtpSecurityPolicy

pytestmark = pytest.mark.integration

BUDGET = timedelta(seconds=10)


class CountingHandler(SinkHandler):
    """The sink's handler, plus: the connections it served, QUITs, and a way to drop them all."""

    def __init__(self) -> None:
        super().__init__()
        #: One aiosmtpd protocol object per TCP connection (STARTTLS keeps the same object).
        self.connections: list[SMTP] = []
        self.quits = 0
        #: When set, the next MAIL gets this reply (and the server hangs up if it is a 421).
        self.next_mail_reply: str | None = None
        #: Seconds the server sits on a QUIT before its 221 (and before it hangs up).
        self.quit_delay = 0.0

    async def handle_EHLO(  # noqa: N802 - aiosmtpd's hook name
        self,
        server: SMTP,
        session: Session,
        _envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname  # what aiosmtpd does itself when no hook is installed
        with self._lock:
            if not any(seen is server for seen in self.connections):
                self.connections.append(server)
        return responses

    async def handle_QUIT(self, *_args: object) -> str:  # noqa: N802 - aiosmtpd's hook name
        with self._lock:
            self.quits += 1
        await asyncio.sleep(self.quit_delay)
        return "221 Bye"

    async def handle_MAIL(  # noqa: N802 - aiosmtpd's hook name
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        mail_options: list[str],
    ) -> str:
        reply, self.next_mail_reply = self.next_mail_reply, None
        if reply is None:
            return await super().handle_MAIL(server, session, envelope, address, mail_options)
        self._count(server, "MAIL")
        if reply.startswith("421") and server.transport is not None:
            server.loop.call_soon(server.transport.close)  # after the reply went out
        return reply

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        if any(rcpt.startswith("slow") for rcpt in envelope.rcpt_tos):
            await asyncio.sleep(1.0)  # a relay busy scanning the message
        return await super().handle_DATA(server, session, envelope)

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self.connections)

    def live(self) -> list[SMTP]:
        with self._lock:
            return [conn for conn in self.connections if conn.transport is not None]


def drop_connections(sink: SmtpSink, handler: CountingHandler, *, hard: bool = False) -> None:
    """Hang up every live connection from the server side.

    ``close()`` is what a relay's idle timeout does (aiosmtpd's own does exactly this); it does not
    wait for the client to notice. ``hard`` aborts instead and waits until the sockets are gone:
    teardown uses it, because aiosmtpd's Controller.stop() leaves live connections' sockets open.
    """
    assert sink._controller is not None
    done = threading.Event()

    def hang_up() -> None:
        for conn in handler.live():
            assert isinstance(conn.transport, asyncio.Transport)
            if hard:
                conn.transport.abort()
            else:
                conn.transport.close()
        done.set()

    sink._controller.loop.call_soon_threadsafe(hang_up)
    assert done.wait(5)
    if hard:
        deadline = time.monotonic() + 5
        while handler.live() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not handler.live()


def stop(sink: SmtpSink, handler: CountingHandler) -> None:
    drop_connections(sink, handler, hard=True)
    sink.stop()


@pytest.fixture
def counting() -> CountingHandler:
    return CountingHandler()


def start_sink(handler: CountingHandler, tls: SinkTls = "starttls", **kwargs: Any) -> SmtpSink:
    sink = SmtpSink(tls=tls, **kwargs)
    sink.handler = handler  # read by start(): the counting handler serves this sink
    return sink.start()


@pytest.fixture
def sink(counting: CountingHandler) -> Iterator[SmtpSink]:
    running = start_sink(counting)
    yield running
    stop(running, counting)


@pytest.fixture
async def make_mailer() -> AsyncIterator[Any]:
    made: list[SmtpMailer] = []

    def make(sink: SmtpSink, **kwargs: Any) -> SmtpMailer:
        mailer = SmtpMailer(settings_for(sink, **kwargs))
        made.append(mailer)
        return mailer

    yield make
    for mailer in made:
        await mailer.aclose()


_numbers = iter(range(1_000_000))


def mail(to: str = "customer@example.com") -> OutgoingMail:
    number = next(_numbers)
    return build_message(
        sender=SENDER,
        to=to,
        subject=f"Order {number}",
        text=f"Your order {number} has shipped.",
        message_id=f"<order.{number}@shop.example>",
        date=datetime(2026, 12, 1, tzinfo=UTC),
    )


def subjects(sink: SmtpSink) -> list[str]:
    return [
        line.removeprefix(b"Subject: ").decode()
        for received in sink.received
        for line in received.data.split(b"\r\n")
        if line.startswith(b"Subject: ")
    ]


# --- security ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tls", "policy", "over_tls"),
    [
        ("starttls", {}, True),
        ("tls", {"mode": "tls"}, True),
        ("none", {"mode": "none", "allow_plaintext": True}, False),
    ],
)
async def test_every_tls_mode_delivers(counting, make_mailer, tls, policy, over_tls) -> None:
    sink = start_sink(counting, tls)
    try:
        mailer = make_mailer(sink, policy=SmtpSecurityPolicy(sender=SENDER, **policy))
        outcome = await mailer.send(mail(), budget=BUDGET)
        assert outcome.kind is OutcomeKind.SENT, outcome.reason
        [received] = sink.received
        assert received.tls is over_tls
        assert received.envelope_from == SENDER
        assert received.recipients == ("customer@example.com",)
        if over_tls:
            assert sink.handler.plaintext_commands == {}
        await mailer.aclose()
    finally:
        stop(sink, counting)


async def test_strict_starttls_sends_nothing_to_a_server_without_it(counting, make_mailer) -> None:
    plain = start_sink(counting, "none")  # never advertises STARTTLS, as if it had been stripped
    try:
        mailer = make_mailer(plain)
        for _ in range(2):
            outcome = await mailer.send(mail(), budget=BUDGET)
            assert outcome.kind is OutcomeKind.TRANSIENT
            assert "STARTTLS" in outcome.reason
            assert not outcome.maybe_delivered
        assert plain.handler.commands == {}  # no MAIL, RCPT, DATA or AUTH ever reached it
        assert plain.received == []
        # A refused session is never pooled: the second attempt had to dial again.
        assert counting.connection_count == 2
        assert mailer.stats.connections_opened == 2
        assert mailer.stats.sessions_reused == 0
    finally:
        stop(plain, counting)


async def test_a_certificate_we_do_not_trust_fails_before_any_mail(sink, make_mailer) -> None:
    mailer = make_mailer(sink, tls_context=ssl.create_default_context())  # system CAs only
    outcome = await mailer.send(mail(), budget=BUDGET)
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert "TLS" in outcome.reason
    assert not outcome.maybe_delivered
    assert sink.handler.commands == {}
    assert sink.received == []


async def test_auth_goes_over_starttls_once_per_session(counting, make_mailer) -> None:
    sink = start_sink(counting, username="relay-user", password="relay-secret")
    try:
        policy = SmtpSecurityPolicy(sender=SENDER, username="relay-user", password="relay-secret")
        mailer = make_mailer(sink, policy=policy)
        for _ in range(3):
            outcome = await mailer.send(mail(), budget=BUDGET)
            assert outcome.kind is OutcomeKind.SENT, outcome.reason
        assert len(sink.received) == 3
        assert sink.handler.commands["AUTH"] == 1  # one authenticated session carried all three
        assert sink.handler.plaintext_commands == {}
        assert counting.connection_count == 1
        await mailer.aclose()
    finally:
        stop(sink, counting)


class _AnsweringAuthenticator(smtp_sink._Authenticator):
    """The sink's authenticator, but a refusal is answered.

    aiosmtpd's ``AuthResult(success=False)`` defaults to ``handled=True`` ("the handler already
    replied"), so the sink never sends its 535 and the client waits out its budget. Passing
    ``handled=False`` lets aiosmtpd send ``535 5.7.8``. (Belongs in smtp_sink; harmless once there.)
    """

    def __call__(self, *args: Any) -> AuthResult:
        return AuthResult(success=super().__call__(*args).success, handled=False)


async def test_a_wrong_password_is_a_permanent_failure(counting, make_mailer, monkeypatch) -> None:
    monkeypatch.setattr(smtp_sink, "_Authenticator", _AnsweringAuthenticator)
    sink = start_sink(counting, username="relay-user", password="relay-secret")
    try:
        policy = SmtpSecurityPolicy(sender=SENDER, username="relay-user", password="wrong")
        mailer = make_mailer(sink, policy=policy)
        for _ in range(2):
            outcome = await mailer.send(mail(), budget=BUDGET)
            assert outcome.kind is OutcomeKind.PERMANENT
            assert "535" in outcome.reason
            assert "wrong" not in outcome.reason
        assert sink.handler.commands["MAIL"] == 0
        # A session whose AUTH failed is never pooled: the second attempt dialled and tried again.
        assert sink.handler.commands["AUTH"] == 2
        assert counting.connection_count == 2
    finally:
        stop(sink, counting)


def test_plaintext_is_refused_in_production_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="production"):
        SmtpSettings.from_url(
            "smtp://127.0.0.1:2525",
            tls="none",
            sender=SENDER,
            environment="production",
            allow_plaintext=True,
        )
    with pytest.raises(ConfigurationError, match="production"):
        SmtpSecurityPolicy(
            sender=SENDER, mode="none", allow_plaintext=True, environment="Production"
        )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_sessions", 0),
        ("max_sessions", 65),
        ("max_sessions", True),
        ("max_sessions", 2.0),
        ("messages_per_session", 0),
        ("session_max_age", timedelta(0)),
    ],
)
def test_pool_settings_are_validated(field, value) -> None:
    with pytest.raises(ConfigurationError, match=field):
        SmtpSettings(
            host="127.0.0.1", port=2525, policy=SmtpSecurityPolicy(sender=SENDER), **{field: value}
        )


def test_pool_settings_have_the_documented_defaults() -> None:
    settings = SmtpSettings(host="relay", port=587, policy=SmtpSecurityPolicy(sender=SENDER))
    assert settings.max_sessions == 4
    assert settings.session_max_age == timedelta(seconds=60)
    assert settings.messages_per_session == 100


# --- replies and the session afterwards -------------------------------------------------------


@pytest.mark.parametrize(
    ("recipient", "kind", "code"),
    [
        ("transient-1@example.com", OutcomeKind.TRANSIENT, "451"),
        ("bounce-1@example.com", OutcomeKind.PERMANENT, "550"),
    ],
)
async def test_a_refused_recipient_leaves_the_session_usable(
    *, sink, counting, make_mailer, recipient, kind, code
) -> None:
    mailer = make_mailer(sink)
    refused = await mailer.send(mail(recipient), budget=BUDGET)
    assert refused.kind is kind
    assert code in refused.reason
    delivered = await mailer.send(mail(), budget=BUDGET)
    assert delivered.kind is OutcomeKind.SENT, delivered.reason
    assert [r.recipients for r in sink.received] == [("customer@example.com",)]
    assert counting.connection_count == 1  # RSET, then the next message on the same connection
    assert mailer.stats.sessions_reused == 1


async def test_a_refused_sender_leaves_the_session_usable(sink, counting, make_mailer) -> None:
    mailer = make_mailer(sink)
    assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
    counting.next_mail_reply = "553 5.7.1 Sender address rejected"
    refused = await mailer.send(mail(), budget=BUDGET)
    assert refused.kind is OutcomeKind.PERMANENT
    assert "553" in refused.reason
    assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
    assert len(sink.received) == 2
    assert counting.connection_count == 1


async def test_a_session_that_timed_out_mid_exchange_is_never_reused(
    sink, counting, make_mailer
) -> None:
    mailer = make_mailer(sink)
    assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
    cut = await mailer.send(mail("slow@example.com"), budget=timedelta(seconds=0.3))
    assert cut.kind is OutcomeKind.TRANSIENT
    assert cut.maybe_delivered  # the whole message went out; only the reply was missing
    assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
    assert counting.connection_count == 2
    assert mailer.stats.sessions_discarded == 1


# --- reuse ------------------------------------------------------------------------------------


async def test_sequential_messages_share_one_connection(sink, counting, make_mailer) -> None:
    mailer = make_mailer(sink)
    for _ in range(20):
        outcome = await mailer.send(mail(), budget=BUDGET)
        assert outcome.kind is OutcomeKind.SENT, outcome.reason
    assert len(sink.received) == 20
    assert counting.connection_count == 1
    assert mailer.stats.connections_opened == 1
    assert mailer.stats.sessions_reused == 19


async def test_concurrent_sends_open_at_most_max_sessions(sink, counting, make_mailer) -> None:
    mailer = make_mailer(sink, max_sessions=4)
    messages = [mail() for _ in range(20)]
    outcomes = await asyncio.gather(*(mailer.send(m, budget=BUDGET) for m in messages))
    assert [o.kind for o in outcomes] == [OutcomeKind.SENT] * 20
    assert sorted(subjects(sink)) == sorted(
        m.data.split(b"Subject: ")[1].split(b"\r\n")[0].decode() for m in messages
    )  # every message exactly once
    assert 1 <= counting.connection_count <= 4
    assert mailer.stats.connections_opened == counting.connection_count


async def test_a_session_is_replaced_after_messages_per_session(
    sink, counting, make_mailer
) -> None:
    mailer = make_mailer(sink, messages_per_session=3)
    for _ in range(7):
        assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
    await asyncio.sleep(0.2)  # retirement QUITs in the background
    assert counting.connection_count == 3  # 3 + 3 + 1
    assert counting.quits == 2
    assert mailer.stats.sessions_retired == 2


async def test_an_idle_session_is_retired_at_its_age(sink, counting, make_mailer) -> None:
    mailer = make_mailer(sink, session_max_age=timedelta(seconds=0.3))
    assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
    await asyncio.sleep(0.6)
    assert counting.quits == 1  # QUIT by the keeper while idle, not only when next taken
    assert counting.live() == []
    assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
    assert counting.connection_count == 2


@pytest.mark.parametrize("noticed", [True, False], ids=["noticed-while-idle", "found-on-mail"])
async def test_a_session_the_server_dropped_is_replaced_transparently(
    sink, counting, make_mailer, noticed
) -> None:
    mailer = make_mailer(sink)
    assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
    drop_connections(sink, counting)
    if noticed:
        await asyncio.sleep(0.2)  # the client reads the hang-up while the session sits idle
    else:
        # Block the loop: the hang-up is in the socket but unread, so the next send still takes
        # the dead session and learns of it only when MAIL gets no answer.
        time.sleep(0.2)  # noqa: ASYNC251 - blocking the loop is the point
    outcome = await mailer.send(mail(), budget=BUDGET)
    assert outcome.kind is OutcomeKind.SENT, outcome.reason
    assert len(sink.received) == 2  # nothing lost, nothing twice
    assert sink.handler.commands["DATA"] == 2
    assert counting.connection_count == 2
    assert mailer.stats.stale_replaced == (0 if noticed else 1)


async def test_a_421_on_a_reused_session_is_replaced_once(sink, counting, make_mailer) -> None:
    mailer = make_mailer(sink)
    assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
    counting.next_mail_reply = "421 4.3.2 Service shutting down"
    outcome = await mailer.send(mail(), budget=BUDGET)
    assert outcome.kind is OutcomeKind.SENT, outcome.reason
    assert len(sink.received) == 2
    assert counting.connection_count == 2
    assert mailer.stats.stale_replaced == 1


async def test_a_421_on_a_fresh_session_is_not_retried(sink, counting, make_mailer) -> None:
    mailer = make_mailer(sink)
    counting.next_mail_reply = "421 4.3.2 Service shutting down"
    outcome = await mailer.send(mail(), budget=BUDGET)
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert "421" in outcome.reason
    assert sink.received == []
    assert counting.connection_count == 1
    assert mailer.stats.stale_replaced == 0


async def test_waiting_for_a_free_session_spends_the_budget(sink, counting, make_mailer) -> None:
    mailer = make_mailer(sink, max_sessions=1)
    slow = asyncio.create_task(mailer.send(mail("slow@example.com"), budget=BUDGET))
    await asyncio.sleep(0.2)  # the only session is now busy with the slow message
    started = time.monotonic()
    waited = await mailer.send(mail(), budget=timedelta(seconds=0.3))
    elapsed = time.monotonic() - started
    assert waited.kind is OutcomeKind.TRANSIENT
    assert "free session" in waited.reason
    assert not waited.maybe_delivered
    # Without the budget it would wait for the slow message's session: >= 0.8 s more. The margin
    # over 0.3 s is for a loaded machine, not a speed figure.
    assert elapsed < 0.7
    assert (await slow).kind is OutcomeKind.SENT
    assert counting.connection_count == 1


async def test_aclose_quits_idle_sessions_and_the_mailer_is_a_context_manager(sink, counting):
    async with SmtpMailer(settings_for(sink)) as mailer:
        assert (await mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
        assert counting.quits == 0  # kept open for the next message
    assert counting.quits == 1
    deadline = time.monotonic() + 2
    while counting.live() and time.monotonic() < deadline:  # noqa: ASYNC110 - state of another thread
        await asyncio.sleep(0.01)
    assert counting.live() == []


def test_sessions_do_not_outlive_a_loop_that_ends_without_aclose(sink, counting) -> None:
    mailer = SmtpMailer(settings_for(sink))
    with asyncio.Runner() as runner:
        assert runner.run(mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
        assert len(counting.live()) == 1  # idle in the pool, waiting for the next message
    # The runner cancelled every task on its way out; the pool's keeper dropped the idle socket.
    deadline = time.monotonic() + 2
    while counting.live() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert counting.live() == []
    gc.collect()  # an unclosed transport would warn here (warnings are errors in this suite)
    # The same mailer on a new loop starts a new pool instead of touching the dead loop's sessions.
    with asyncio.Runner() as runner:
        assert runner.run(mailer.send(mail(), budget=BUDGET)).kind is OutcomeKind.SENT
        runner.run(mailer.aclose())
    assert counting.connection_count == 2
    assert len(sink.received) == 2


@pytest.mark.parametrize("quit_delay", [0.0, 3.0], ids=["prompt_221", "no_221_in_time"])
def test_aclose_leaves_no_socket_open_when_the_loop_ends_right_after(
    sink, counting, quit_delay
) -> None:
    """QUIT, then the loop ends at once (as at the end of ``asyncio.run``): nothing may be left
    waiting for a TLS close_notify, and no socket may reach the garbage collector open, whether
    the server answers the QUIT or sits on it past the courtesy time."""
    counting.quit_delay = quit_delay
    for _ in range(3):
        mailer = SmtpMailer(settings_for(sink, max_sessions=4))

        async def send_four_then_close(mailer: SmtpMailer = mailer) -> None:
            sends = [mailer.send(mail(f"r{n}@example.com"), budget=BUDGET) for n in range(4)]
            assert {o.kind for o in await asyncio.gather(*sends)} == {OutcomeKind.SENT}
            await mailer.aclose()

        with asyncio.Runner() as runner:
            runner.run(send_four_then_close())
        gc.collect()  # an unclosed transport would warn here (warnings are errors in this suite)


# --- a server that never answers ----------------------------------------------------------------


class _Silent(asyncio.Protocol):
    """Accepts the connection and never says a word (not even the greeting)."""

    def __init__(self, accepted: list[asyncio.BaseTransport]) -> None:
        self.accepted = accepted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.accepted.append(transport)


async def test_a_hung_server_ends_within_the_budget() -> None:
    accepted: list[asyncio.BaseTransport] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Silent(accepted), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = SmtpSettings(host="127.0.0.1", port=port, policy=SmtpSecurityPolicy(sender=SENDER))
    try:
        async with SmtpMailer(settings) as mailer:
            budget = timedelta(seconds=1)
            started = time.monotonic()
            outcome = await mailer.send(mail(), budget=budget)
            elapsed = time.monotonic() - started
        assert outcome.kind is OutcomeKind.TRANSIENT
        assert "timed out" in outcome.reason
        assert not outcome.maybe_delivered
        assert 0.9 <= elapsed <= 1.1
        assert len(accepted) == 1
    finally:
        for transport in accepted:
            transport.close()
        server.close()
        await server.wait_closed()
