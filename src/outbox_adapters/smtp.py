"""The SMTP mailer (catalogue A3), on aiosmtplib, reusing a few established sessions.

One delivery path serves every TLS mode (``starttls``, ``tls``, ``none``)::

    wait for a session slot (≤ min(30 s, time left))   at most ``max_sessions`` sends own a session
    take an idle session — or open one:
        dial (≤ min(10 s, time left))     TCP connect; implicit TLS handshake in mode ``tls``
        EHLO → plan_starttls → [STARTTLS → EHLO] → plan_auth → [AUTH]   ┐ exchange, ≤ min(30 s,
    one transaction: MAIL → RCPT… → DATA                                ┘ time left after the dial)
    give the session back to the idle pool — or QUIT it, or close it

The decisions (upgrade or refuse, authenticate or refuse) are made by the pure policy in
``outbox_core.tls``; this module only carries them out. In ``starttls`` mode a server that does not
advertise STARTTLS is refused before a single MAIL, RCPT, DATA or AUTH command is sent — aiosmtplib's
own ``start_tls=None`` default would upgrade only *if* offered, which a man in the middle can strip.
A session enters the pool only after all of that succeeded, and is checked again (still connected,
TLS still on unless the mode is ``none``) every time it is taken.

Session rules (ADR 0007). One send owns a session at a time: aiosmtplib sessions are never shared.

- Back to the pool: after a delivered message, and after a clean 4xx/5xx reply to MAIL or RCPT
  followed by a successful RSET. Anything else mid-exchange (disconnect, timeout, TLS error, a 421,
  an unexpected reply, a refused DATA, cancellation) closes the session; it is never reused.
- Retired with QUIT (in the background, off the send's critical path) once it is older than
  ``session_max_age`` or has carried ``messages_per_session`` transactions.
- A reused session that is found dead on its first command (MAIL: the server closed it while it
  sat idle, so a disconnect or a 421) is replaced by a fresh session ONCE, inside the same budget:
  nothing of the message was sent, so this cannot duplicate. After MAIL succeeded, never.
- :meth:`SmtpMailer.aclose` QUITs the idle sessions. If the event loop ends without it, a keeper
  task (cancelled with the loop) closes them, so no socket outlives its loop.

Every third-party exception is translated in ONE place (:func:`_mapped`), by the stage the exchange
had reached, into an ``Outcome``: a reply code goes through ``classify_smtp_reply`` (4xx transient,
5xx permanent), a lost connection through ``classify_smtp_failure`` (transient; "may be delivered"
once the whole message was sent). Apart from the one stale-session replacement above, the mailer
never retries, and it never raises for a delivery problem.

Certificates are verified against the system trust store (so ``SSL_CERT_FILE`` works as usual) or a
CA file the operator names; the hostname is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Self
from urllib.parse import unquote, urlsplit

import aiosmtplib
import attrs

from outbox_core.classify import SmtpStage, classify_smtp_failure, classify_smtp_reply
from outbox_core.errors import ConfigurationError
from outbox_core.mail import OutgoingMail, validate_address
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.tls import (
    AuthKind,
    SmtpSecurityPolicy,
    SmtpTlsMode,
    StartTlsKind,
    describe,
    plan_auth,
    plan_starttls,
)

__all__ = ["MailerStats", "SmtpMailer", "SmtpSettings"]

_log = logging.getLogger(__name__)

DEFAULT_DIAL = timedelta(seconds=10)
DEFAULT_EXCHANGE_CAP = timedelta(seconds=30)
DEFAULT_MAX_SESSIONS = 4
DEFAULT_SESSION_MAX_AGE = timedelta(seconds=60)
DEFAULT_MESSAGES_PER_SESSION = 100
#: More sessions than this to one relay is a misconfiguration (relays limit connections per client).
MAX_SESSIONS_LIMIT = 64
#: How long a courtesy QUIT or RSET may take; its reply can't change an outcome.
_COURTESY = 1.0
#: How often a courteous close looks whether the server has finished its side.
_CLOSE_POLL = 0.01


def _positive(_inst: object, attribute: attrs.Attribute[timedelta], value: timedelta) -> None:
    if value <= timedelta(0):
        raise ConfigurationError(f"SMTP {attribute.name} must be positive, got {value}")


def _port(_inst: object, _attribute: object, value: int) -> None:
    # bool is an int subclass (True would be port 1); a str would fail the comparison with a
    # bare TypeError.
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or not 1 <= value <= 65535:
        raise ConfigurationError(f"SMTP port must be 1..65535, got {value!r}")


def _host(_inst: object, _attribute: object, value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise ConfigurationError(f"SMTP host must be a host name or address, got {value!r}")


def _whole_number(
    low: int, high: int | None = None
) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
        # bool is an int subclass; True sessions is a mistake, not 1.
        ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok or value < low or (high is not None and value > high):
            bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise ConfigurationError(
                f"SMTP {attribute.name} must be a whole number {bounds}, got {value!r}"
            )

    return check


@attrs.frozen
class SmtpSettings:
    """Where and how to send. Refused at construction when it can't work (C8)."""

    #: The relay's host name (also the name its certificate must carry).
    host: str = attrs.field(validator=_host)
    #: The relay's port (587 for STARTTLS, 465 for implicit TLS are the usual ones).
    port: int = attrs.field(validator=_port)
    #: TLS mode, credentials, sender, environment: the pure policy of ``outbox_core.tls``.
    policy: SmtpSecurityPolicy
    #: Budget for the TCP connect (and the implicit-TLS handshake).
    dial: timedelta = attrs.field(default=DEFAULT_DIAL, validator=_positive)
    #: Upper bound of one exchange; the row's remaining budget can shorten it.
    exchange_cap: timedelta = attrs.field(default=DEFAULT_EXCHANGE_CAP, validator=_positive)
    #: A CA bundle to trust instead of the system store (``None``: the system store).
    ca_file: str | None = None
    #: A ready SSL context (tests, unusual setups); wins over ``ca_file``.
    tls_context: ssl.SSLContext | None = attrs.field(default=None, repr=False)
    #: The name we give in EHLO (``None``: aiosmtplib's default, the local FQDN).
    local_hostname: str | None = None
    #: Most sessions open to the relay at once (each carries one message at a time).
    max_sessions: int = attrs.field(
        default=DEFAULT_MAX_SESSIONS, validator=_whole_number(1, MAX_SESSIONS_LIMIT)
    )
    #: A session this old is QUIT instead of carrying another message.
    session_max_age: timedelta = attrs.field(default=DEFAULT_SESSION_MAX_AGE, validator=_positive)
    #: A session that carried this many transactions is QUIT and replaced.
    messages_per_session: int = attrs.field(
        default=DEFAULT_MESSAGES_PER_SESSION, validator=_whole_number(1)
    )

    def __attrs_post_init__(self) -> None:
        # The policy's sender check is deliberately minimal; here it must be a real addr-spec.
        try:
            validate_address(self.policy.sender)
        except ValueError as exc:
            raise ConfigurationError(f"SMTP sender is not a usable address: {exc}") from None

    @classmethod
    def from_url(  # noqa: PLR0913 - one keyword per CLI flag
        cls,
        url: str,
        *,
        tls: str = "starttls",
        sender: str,
        environment: str = "development",
        allow_plaintext: bool = False,
        ca_file: str | None = None,
    ) -> SmtpSettings:
        """``smtp://[user:pass@]host[:port]`` plus the policy flags, as the CLI gets them."""
        parts = urlsplit(url)
        if parts.scheme not in {"smtp", "smtps"}:
            raise ConfigurationError(
                f"SMTP URL must start with smtp:// or smtps://, got {parts.scheme!r}"
            )
        mode = SmtpTlsMode.parse("tls" if parts.scheme == "smtps" else tls)
        try:
            port = parts.port
        except ValueError:
            raise ConfigurationError("SMTP URL has an invalid port") from None
        default_port = {SmtpTlsMode.TLS: 465, SmtpTlsMode.STARTTLS: 587, SmtpTlsMode.NONE: 25}
        policy = SmtpSecurityPolicy(
            sender=sender,
            mode=mode,
            allow_plaintext=allow_plaintext,
            environment=environment,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
        )
        return cls(
            host=parts.hostname or "",
            # Only a URL without a port gets the mode's default: an explicit ':0' is refused.
            port=default_port[mode] if port is None else port,
            policy=policy,
            ca_file=ca_file,
        )

    def context(self) -> ssl.SSLContext:
        """The context every TLS handshake uses: verification on, hostname checked."""
        if self.tls_context is not None:
            return self.tls_context
        return ssl.create_default_context(cafile=self.ca_file)

    def describe(self) -> str:
        """One line for the boot log (never the password)."""
        return (
            f"{describe(self.policy)}; relay {self.host}:{self.port}, "
            f"up to {self.max_sessions} reused session(s)"
        )


@attrs.define
class MailerStats:
    """What the session pool did, for tests, benchmarks and the curious operator."""

    #: TCP connections that reached the server's greeting.
    connections_opened: int = 0
    #: Sends that ran on a session an earlier send had established.
    sessions_reused: int = 0
    #: Sessions QUIT for age, message count or shutdown.
    sessions_retired: int = 0
    #: Sessions closed because something went wrong (never reused).
    sessions_discarded: int = 0
    #: Reused sessions found dead on MAIL and replaced by a fresh one (nothing had been sent).
    stale_replaced: int = 0


# --- the one exception-mapping place ------------------------------------------------------------


class _Progress:
    """How far the exchange got: the stage decides what a failure means."""

    def __init__(self) -> None:
        self.stage = SmtpStage.CONNECT
        #: Set while waiting for a session slot, so a timeout there says so.
        self.waiting = False


@contextlib.contextmanager
def _mapped(progress: _Progress, result: list[Outcome]) -> Iterator[None]:
    """Translate every aiosmtplib / socket / TLS / timeout exception into an Outcome, once."""
    try:
        yield
    except aiosmtplib.SMTPRecipientsRefused as exc:
        first = exc.recipients[0]
        result.append(classify_smtp_reply(first.code, first.message))
    except aiosmtplib.SMTPResponseException as exc:
        if exc.code < 0:  # aiosmtplib's placeholder for "no reply at all"
            result.append(classify_smtp_failure(progress.stage, exc.message))
        else:
            result.append(classify_smtp_reply(exc.code, exc.message))
    except (TimeoutError, aiosmtplib.SMTPTimeoutError):
        what = "timed out waiting for a free session" if progress.waiting else "timed out"
        result.append(classify_smtp_failure(progress.stage, what))
    except ssl.SSLError as exc:
        result.append(classify_smtp_failure(SmtpStage.TLS, f"TLS failed: {exc.reason or exc}"))
    except (aiosmtplib.SMTPException, OSError) as exc:
        result.append(classify_smtp_failure(progress.stage, f"{type(exc).__name__}: {exc}"))


class _StaleSession(Exception):
    """A reused session was dead on MAIL: replace it once. Never leaves :meth:`SmtpMailer._deliver`."""


# --- sessions and the pool ----------------------------------------------------------------------


def _tls_active(client: aiosmtplib.SMTP) -> bool:
    return client.is_connected and client.get_transport_info("ssl_object") is not None


class _Session:
    """One established session: connected, EHLO'd, TLS per the policy, authenticated."""

    __slots__ = ("client", "expires_at", "transactions")

    def __init__(self, client: aiosmtplib.SMTP, expires_at: float) -> None:
        self.client = client
        self.expires_at = expires_at
        self.transactions = 0


class _Pool:
    """The sessions of one event loop: a slot per owned session, the idle ones, their keeper."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_sessions: int) -> None:
        self.loop = loop
        self.slots = asyncio.Semaphore(max_sessions)
        #: Most recently returned last: sends take from the end, so spare sessions age out.
        self.idle: list[_Session] = []
        self.changed = asyncio.Event()
        self.keeper: asyncio.Task[None] | None = None
        self.quitting: set[asyncio.Task[None]] = set()
        self.closed = False


class SmtpMailer:
    """:class:`outbox_core.ports.Mailer` over one SMTP relay, reusing up to ``max_sessions``.

    Safe for concurrent sends on one event loop. Call :meth:`aclose` (or use ``async with``) when
    done; a mailer moved to another event loop starts a fresh pool there.
    """

    def __init__(self, settings: SmtpSettings) -> None:
        self.settings = settings
        self.stats = MailerStats()
        self._pool: _Pool | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget.total_seconds()
        pool = self._pool_for(loop)
        progress = _Progress()
        result: list[Outcome] = []
        with _mapped(progress, result):
            result.append(await self._deliver(pool, mail, deadline, progress))
        return result[0]

    async def aclose(self) -> None:
        """QUIT the idle sessions; sessions still carrying a message are QUIT when it is done."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        pool.closed = True
        idle, pool.idle = pool.idle, []
        if pool.loop is not asyncio.get_running_loop():
            _close_all(idle)  # sessions of another (probably finished) loop: nothing to await
            return
        if pool.keeper is not None:
            pool.keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pool.keeper
        for session in idle:
            self._retire(pool, session)
        await asyncio.gather(*pool.quitting, return_exceptions=True)

    # --- one send -------------------------------------------------------------------------------

    def _window(self, cap: timedelta, deadline: float) -> float:
        """The absolute end of a step: ``cap`` from now, but never past the row's deadline."""
        now = asyncio.get_running_loop().time()
        return now + max(0.0, min(cap.total_seconds(), deadline - now))

    async def _deliver(
        self, pool: _Pool, mail: OutgoingMail, deadline: float, progress: _Progress
    ) -> Outcome:
        # Waiting for a session spends the row's budget like any other step.
        progress.waiting = True
        async with asyncio.timeout_at(self._window(self.settings.exchange_cap, deadline)):
            await pool.slots.acquire()
        progress.waiting = False
        try:
            session = self._take_idle(pool)
            if session is not None:
                exchange_end = self._window(self.settings.exchange_cap, deadline)
                try:
                    return await self._transact(
                        pool, session, mail, progress, exchange_end=exchange_end, reused=True
                    )
                except _StaleSession:
                    # Dead before MAIL was accepted: nothing was sent, one fresh session may try.
                    self.stats.stale_replaced += 1
            opened = await self._open(pool, deadline, progress)
            if isinstance(opened, Outcome):
                return opened
            session, exchange_end = opened
            return await self._transact(
                pool, session, mail, progress, exchange_end=exchange_end, reused=False
            )
        finally:
            pool.slots.release()

    async def _open(
        self, pool: _Pool, deadline: float, progress: _Progress
    ) -> tuple[_Session, float] | Outcome:
        """Dial and establish a new session, or say why the policy refused it."""
        loop = asyncio.get_running_loop()
        client = self._client()
        progress.stage = SmtpStage.CONNECT
        try:
            async with asyncio.timeout_at(self._window(self.settings.dial, deadline)):
                await client.connect()
            self.stats.connections_opened += 1
            exchange_end = self._window(self.settings.exchange_cap, deadline)
            async with asyncio.timeout_at(exchange_end):
                refusal = await self._establish(client, progress)
        except BaseException:
            _drop(client)
            raise
        if refusal is not None:
            _quit_later(pool, client)  # QUIT in plaintext is harmless; the refusal is the outcome
            return refusal
        expires_at = loop.time() + self.settings.session_max_age.total_seconds()
        return _Session(client, expires_at), exchange_end

    def _client(self) -> aiosmtplib.SMTP:
        settings = self.settings
        return aiosmtplib.SMTP(
            hostname=settings.host,
            port=settings.port,
            use_tls=settings.policy.mode is SmtpTlsMode.TLS,
            start_tls=False,  # we decide about STARTTLS ourselves: strictly
            validate_certs=True,
            tls_context=settings.context(),
            local_hostname=settings.local_hostname,
            timeout=None,  # our asyncio deadlines bound every step
        )

    async def _establish(self, client: aiosmtplib.SMTP, progress: _Progress) -> Outcome | None:
        """EHLO, TLS and AUTH as the policy plans them; an Outcome if the policy refuses."""
        policy = self.settings.policy
        progress.stage = SmtpStage.EHLO
        await client.ehlo()
        starttls = plan_starttls(
            policy,
            starttls_advertised=client.supports_extension("starttls"),
            tls_active=_tls_active(client),
        )
        if starttls.kind is StartTlsKind.REFUSE:
            return classify_smtp_failure(SmtpStage.TLS, starttls.reason)
        if starttls.kind is StartTlsKind.UPGRADE:
            progress.stage = SmtpStage.TLS
            await client.starttls(tls_context=self.settings.context())
            progress.stage = SmtpStage.EHLO
            await client.ehlo()  # RFC 3207 §4.2: forget what was learnt before the handshake
        auth = plan_auth(
            policy,
            auth_mechanisms=frozenset(client.server_auth_methods),
            tls_active=_tls_active(client),
        )
        if auth.kind is AuthKind.REFUSE:
            return classify_smtp_failure(SmtpStage.AUTH, auth.reason)
        if auth.kind is not AuthKind.NONE:
            progress.stage = SmtpStage.AUTH
            user, password = policy.username or "", policy.password or ""
            if auth.kind is AuthKind.PLAIN:
                await client.auth_plain(user, password)
            else:
                await client.auth_login(user, password)
        return None

    async def _transact(  # noqa: PLR0913 - keyword-only; all of them describe this one transaction
        self,
        pool: _Pool,
        session: _Session,
        mail: OutgoingMail,
        progress: _Progress,
        *,
        exchange_end: float,
        reused: bool,
    ) -> Outcome:
        """One MAIL…DATA on an owned session, then give it back or close it."""
        try:
            async with asyncio.timeout_at(exchange_end):
                outcome = await self._transaction(session.client, mail, progress, reused=reused)
        except BaseException:
            # Mid-exchange failure (or cancellation): the session's state is unknown. Never reuse.
            _drop(session.client)
            self.stats.sessions_discarded += 1
            raise
        session.transactions += 1
        self._give_back(pool, session)
        return outcome

    async def _transaction(
        self, client: aiosmtplib.SMTP, mail: OutgoingMail, progress: _Progress, *, reused: bool
    ) -> Outcome:
        progress.stage = SmtpStage.MAIL_FROM
        try:
            reply = await client.execute_command(
                b"MAIL", f"FROM:<{mail.envelope_from}>".encode("ascii")
            )
        except aiosmtplib.SMTPServerDisconnected:
            if reused:  # closed by the server while idle; the message never left
                raise _StaleSession from None
            raise
        if reply.code == 421 and reused:  # "closing transmission channel": same, said politely
            raise _StaleSession
        if not 200 <= reply.code < 300:
            await _reset(client)
            return classify_smtp_reply(reply.code, reply.message)
        progress.stage = SmtpStage.RCPT_TO
        refused: list[Outcome] = []
        for recipient in mail.recipients:
            reply = await client.execute_command(b"RCPT", f"TO:<{recipient}>".encode("ascii"))
            if reply.code >= 300:
                refused.append(classify_smtp_reply(reply.code, reply.message))
        if len(refused) == len(mail.recipients):
            # Nobody will receive it: the first refusal decides (5xx permanent, 4xx transient).
            await _reset(client)
            return _worst(refused)
        if refused:
            _log.warning(
                "%d of %d recipients refused for %s; sending to the others",
                len(refused),
                len(mail.recipients),
                mail.message_id,
            )
        progress.stage = SmtpStage.AWAITING_DATA_REPLY
        await client.data(mail.data)
        return Outcome.sent()

    # --- the pool -------------------------------------------------------------------------------

    def _pool_for(self, loop: asyncio.AbstractEventLoop) -> _Pool:
        pool = self._pool
        if pool is not None and pool.loop is not loop:
            # Sessions belong to the loop that opened them; that loop's keeper closed them when
            # it ended, so what is left is dead weight (closing it is best effort).
            _close_all(pool.idle)
            pool = None
        if pool is None:
            pool = self._pool = _Pool(loop, self.settings.max_sessions)
        return pool

    def _usable(self, session: _Session) -> bool:
        """Still connected, and still under TLS unless the operator chose plaintext."""
        client = session.client
        if not client.is_connected:
            return False
        return self.settings.policy.mode is SmtpTlsMode.NONE or _tls_active(client)

    def _take_idle(self, pool: _Pool) -> _Session | None:
        now = pool.loop.time()
        while pool.idle:
            session = pool.idle.pop()
            if not self._usable(session):
                session.client.close()
                self.stats.sessions_discarded += 1
            elif now >= session.expires_at:
                self._retire(pool, session)
            else:
                self.stats.sessions_reused += 1
                return session
        return None

    def _give_back(self, pool: _Pool, session: _Session) -> None:
        if not self._usable(session):  # e.g. a 421 made aiosmtplib close it
            session.client.close()
            self.stats.sessions_discarded += 1
        elif (
            pool.closed
            or session.transactions >= self.settings.messages_per_session
            or pool.loop.time() >= session.expires_at
        ):
            self._retire(pool, session)
        else:
            pool.idle.append(session)
            pool.changed.set()
            if pool.keeper is None:
                pool.keeper = pool.loop.create_task(self._keep(pool), name="smtp-session-keeper")

    def _retire(self, pool: _Pool, session: _Session) -> None:
        """QUIT ``session`` in the background: the send that retires it doesn't wait for it."""
        self.stats.sessions_retired += 1
        _quit_later(pool, session.client)

    async def _keep(self, pool: _Pool) -> None:
        """Retire idle sessions when they reach their age; close all of them when cancelled.

        Cancelled by :meth:`aclose` or by the event loop shutting down (``asyncio.run`` cancels
        every task first), so idle sockets never outlive the loop even without ``aclose``.
        """
        try:
            while True:
                pool.changed.clear()
                now = pool.loop.time()
                for session in [s for s in pool.idle if now >= s.expires_at]:
                    pool.idle.remove(session)
                    self._retire(pool, session)
                wake = min((s.expires_at for s in pool.idle), default=None)
                if wake is None:
                    await pool.changed.wait()
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(wake):
                        await pool.changed.wait()
        finally:
            _close_all(pool.idle)
            pool.idle.clear()


def _worst(outcomes: list[Outcome]) -> Outcome:
    """Any transient refusal means a retry could still reach that recipient."""
    for outcome in outcomes:
        if outcome.kind is OutcomeKind.TRANSIENT:
            return outcome
    return outcomes[0]


async def _reset(client: aiosmtplib.SMTP) -> None:
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


async def _quit_politely(client: aiosmtplib.SMTP) -> None:
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
        _drop(client)
    # An abort closes the socket in the transport's connection_lost callback, which the abort
    # schedules: one trip round the loop runs it, so aclose() returns with the socket closed.
    await asyncio.sleep(0)


def _quit_later(pool: _Pool, client: aiosmtplib.SMTP) -> None:
    task = pool.loop.create_task(_quit_politely(client))
    pool.quitting.add(task)  # aclose awaits these; the loop's shutdown cancels them (and closes)
    task.add_done_callback(pool.quitting.discard)


def _close_all(sessions: list[_Session]) -> None:
    """Drop ``sessions`` at once, without QUIT: the loop is ending or already gone."""
    for session in sessions:
        _drop(session.client)


def _drop(client: aiosmtplib.SMTP) -> None:
    """Close the connection at once (abort, not close: see :func:`_quit_politely`).

    A session of a closed loop can't schedule anything any more (RuntimeError); it is gone
    either way.
    """
    with contextlib.suppress(RuntimeError):
        if isinstance(client.transport, asyncio.Transport):
            client.transport.abort()
        client.close()
