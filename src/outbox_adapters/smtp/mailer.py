"""The SMTP mailer (ADR 0007): :class:`SmtpMailer`, one delivery path for every TLS mode.

See the package docstring (:mod:`outbox_adapters.smtp`) for the path and the session rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Self

import aiosmtplib
import attrs

from outbox_adapters.smtp.errors import Progress, StaleSession, mapped, worst
from outbox_adapters.smtp.sessions import (
    Pool,
    Session,
    close_all,
    drop,
    quit_later,
    reset,
    tls_active,
)
from outbox_adapters.smtp.settings import MailerStats, SmtpSettings
from outbox_core.classify import SmtpStage, classify_smtp_failure, classify_smtp_reply
from outbox_core.errors import ConfigurationError
from outbox_core.lease import exchange_deadline
from outbox_core.mail import OutgoingMail
from outbox_core.outcomes import Outcome, Refusal
from outbox_core.timing import EmailStepBudgets
from outbox_core.tls import AuthKind, SmtpTlsMode, StartTlsKind, plan_auth, plan_starttls

__all__ = ["SmtpMailer"]

_log = logging.getLogger("outbox_adapters.smtp")


class SmtpMailer:
    """:class:`outbox_core.ports.Mailer` over one SMTP relay, reusing up to ``max_sessions``.

    Safe for concurrent sends on one event loop. Call :meth:`aclose` (or use ``async with``) when
    done; a mailer moved to another event loop starts a fresh pool there.

    ``steps`` are the e-mail lane's step budgets, the same object the lease is derived from
    (``EmailTiming.budgets``): the dial is bounded by ``steps.dial`` and the wait for a session
    and the exchange by ``steps.smtp_exchange``, each also by the row's deadline (ADR 0015).
    The mailer has no figures of its own, so its timeouts can't disagree with the lease.
    """

    def __init__(self, settings: SmtpSettings, *, steps: EmailStepBudgets | None = None) -> None:
        if steps is None:
            steps = EmailStepBudgets()
        if not isinstance(steps, EmailStepBudgets):
            raise ConfigurationError(
                f"SmtpMailer steps must be the lane's EmailStepBudgets, got {type(steps).__name__}"
            )
        self.settings = settings
        #: The step budgets every window of a send is taken from.
        self.steps = steps
        self.stats = MailerStats()
        self._pool: Pool | None = None
        # As seconds, once (the budgets are frozen): the per-send path reads them.
        self._dial = steps.dial.total_seconds()
        self._exchange = steps.smtp_exchange.total_seconds()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget.total_seconds()
        pool = self._pool_for(loop)
        progress = Progress()
        result: list[Outcome] = []
        with mapped(progress, result):
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
            close_all(idle)  # sessions of another (probably finished) loop: nothing to await
            return
        if pool.keeper is not None:
            pool.keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pool.keeper
        for session in idle:
            self._retire(pool, session)
        await asyncio.gather(*pool.quitting, return_exceptions=True)

    # --- one send -------------------------------------------------------------------------------

    @staticmethod
    def _window(cap: float, deadline: float, progress: Progress, step: str) -> float:
        """The absolute end of a step: the core's ``exchange_deadline`` (``cap`` from now, never
        past the row's deadline), noted in ``progress`` so a timeout names its step."""
        progress.step = f"{step}, budget {cap:g}s"
        return exchange_deadline(
            now=asyncio.get_running_loop().time(), row_deadline=deadline, cap=cap
        )

    async def _deliver(
        self, pool: Pool, mail: OutgoingMail, deadline: float, progress: Progress
    ) -> Outcome:
        # Waiting for a session spends the row's budget like any other step.
        progress.waiting = True
        async with asyncio.timeout_at(
            self._window(self._exchange, deadline, progress, "smtp_exchange")
        ):
            await pool.slots.acquire()
        progress.waiting = False
        try:
            session = self._take_idle(pool)
            if session is not None:
                exchange_end = self._window(self._exchange, deadline, progress, "smtp_exchange")
                try:
                    return await self._transact(
                        pool, session, mail, progress, exchange_end=exchange_end, reused=True
                    )
                except StaleSession:
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
        self, pool: Pool, deadline: float, progress: Progress
    ) -> tuple[Session, float] | Outcome:
        """Dial and establish a new session, or say why the policy refused it."""
        loop = asyncio.get_running_loop()
        client = self._client()
        progress.stage = SmtpStage.CONNECT
        try:
            async with asyncio.timeout_at(self._window(self._dial, deadline, progress, "dial")):
                await client.connect()
            self.stats.connections_opened += 1
            exchange_end = self._window(self._exchange, deadline, progress, "smtp_exchange")
            async with asyncio.timeout_at(exchange_end):
                refusal = await self._establish(client, progress)
        except BaseException:
            drop(client)
            raise
        if refusal is not None:
            quit_later(pool, client)  # QUIT in plaintext is harmless; the refusal is the outcome
            return refusal
        expires_at = loop.time() + self.settings.session_max_age.total_seconds()
        return Session(client, expires_at), exchange_end

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

    async def _establish(self, client: aiosmtplib.SMTP, progress: Progress) -> Outcome | None:
        """EHLO, TLS and AUTH as the policy plans them; an Outcome if the policy refuses."""
        policy = self.settings.policy
        progress.stage = SmtpStage.EHLO
        await client.ehlo()
        starttls = plan_starttls(
            policy,
            starttls_advertised=client.supports_extension("starttls"),
            tls_active=tls_active(client),
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
            tls_active=tls_active(client),
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
        pool: Pool,
        session: Session,
        mail: OutgoingMail,
        progress: Progress,
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
            drop(session.client)
            self.stats.sessions_discarded += 1
            raise
        session.transactions += 1
        self._give_back(pool, session)
        return outcome

    async def _transaction(
        self, client: aiosmtplib.SMTP, mail: OutgoingMail, progress: Progress, *, reused: bool
    ) -> Outcome:
        progress.stage = SmtpStage.MAIL_FROM
        try:
            reply = await client.execute_command(
                b"MAIL", f"FROM:<{mail.envelope_from}>".encode("ascii")
            )
        except aiosmtplib.SMTPServerDisconnected:
            if reused:  # closed by the server while idle; the message never left
                raise StaleSession from None
            raise
        if reply.code == 421 and reused:  # "closing transmission channel": same, said politely
            raise StaleSession
        if not 200 <= reply.code < 300:
            await reset(client)
            return classify_smtp_reply(reply.code, reply.message)
        progress.stage = SmtpStage.RCPT_TO
        accepted: list[str] = []
        refused: list[Refusal] = []
        for recipient in mail.recipients:
            reply = await client.execute_command(b"RCPT", f"TO:<{recipient}>".encode("ascii"))
            if 200 <= reply.code < 300:
                accepted.append(recipient)
            else:
                refused.append(Refusal(recipient, classify_smtp_reply(reply.code, reply.message)))
        if not accepted:
            # Nobody will receive it: the first transient refusal (else the first) is the
            # message's outcome; each recipient's own refusal goes with it.
            await reset(client)
            return attrs.evolve(worst([r.outcome for r in refused]), refused=tuple(refused))
        progress.stage = SmtpStage.AWAITING_DATA_REPLY
        await client.data(mail.data)
        if refused:
            # Only the accepted recipients have it: the core settles the others (ADR 0015).
            return Outcome.sent(delivered_to=tuple(accepted), refused=tuple(refused))
        return Outcome.sent()

    # --- the pool -------------------------------------------------------------------------------

    def _pool_for(self, loop: asyncio.AbstractEventLoop) -> Pool:
        pool = self._pool
        if pool is not None and pool.loop is not loop:
            # Sessions belong to the loop that opened them; that loop's keeper closed them when
            # it ended, so what is left is dead weight (closing it is best effort).
            close_all(pool.idle)
            pool = None
        if pool is None:
            pool = self._pool = Pool(loop, self.settings.max_sessions)
        return pool

    def _usable(self, session: Session) -> bool:
        """Still connected, and still under TLS unless the operator chose plaintext."""
        client = session.client
        if not client.is_connected:
            return False
        return self.settings.policy.mode is SmtpTlsMode.NONE or tls_active(client)

    def _take_idle(self, pool: Pool) -> Session | None:
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

    def _give_back(self, pool: Pool, session: Session) -> None:
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

    def _retire(self, pool: Pool, session: Session) -> None:
        """QUIT ``session`` in the background: the send that retires it doesn't wait for it."""
        self.stats.sessions_retired += 1
        quit_later(pool, session.client)

    async def _keep(self, pool: Pool) -> None:
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
            close_all(pool.idle)
            pool.idle.clear()
