"""The SMTP mailer (catalogue A3), on aiosmtplib.

One delivery path serves every TLS mode (``starttls``, ``tls``, ``none``)::

    dial (≤ dial budget, 10 s)   TCP connect; implicit TLS handshake in mode ``tls``
    exchange (≤ min(30 s, time left in the row budget)):
        EHLO → plan_starttls → [STARTTLS → EHLO] → plan_auth → [AUTH] → MAIL → RCPT… → DATA

The decisions (upgrade or refuse, authenticate or refuse) are made by the pure policy in
``outbox_core.tls``; this module only carries them out. In ``starttls`` mode a server that does not
advertise STARTTLS is refused before a single MAIL, RCPT, DATA or AUTH command is sent — aiosmtplib's
own ``start_tls=None`` default would upgrade only *if* offered, which a man in the middle can strip.

Every third-party exception is translated in ONE place (:func:`_mapped`), by the stage the exchange
had reached, into an ``Outcome``: a reply code goes through ``classify_smtp_reply`` (4xx transient,
5xx permanent), a lost connection through ``classify_smtp_failure`` (transient; "may be delivered"
once the whole message was sent). The mailer never retries and never raises for a delivery problem.

Certificates are verified against the system trust store (so ``SSL_CERT_FILE`` works as usual) or a
CA file the operator names; the hostname is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Iterator
from datetime import timedelta
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

__all__ = ["SmtpMailer", "SmtpSettings"]

_log = logging.getLogger(__name__)

DEFAULT_DIAL = timedelta(seconds=10)
DEFAULT_EXCHANGE_CAP = timedelta(seconds=30)


def _positive(_inst: object, attribute: attrs.Attribute[timedelta], value: timedelta) -> None:
    if value <= timedelta(0):
        raise ConfigurationError(f"SMTP {attribute.name} must be positive, got {value}")


def _port(_inst: object, _attribute: object, value: int) -> None:
    if not 1 <= value <= 65535:
        raise ConfigurationError(f"SMTP port must be 1..65535, got {value}")


def _host(_inst: object, _attribute: object, value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise ConfigurationError(f"SMTP host must be a host name or address, got {value!r}")


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
            port=port or default_port[mode],
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
        return f"{describe(self.policy)}; relay {self.host}:{self.port}"


class _Progress:
    """How far the exchange got: the stage decides what a failure means."""

    def __init__(self) -> None:
        self.stage = SmtpStage.CONNECT


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
        result.append(classify_smtp_failure(progress.stage, "timed out"))
    except ssl.SSLError as exc:
        result.append(classify_smtp_failure(SmtpStage.TLS, f"TLS failed: {exc.reason or exc}"))
    except (aiosmtplib.SMTPException, OSError) as exc:
        result.append(classify_smtp_failure(progress.stage, f"{type(exc).__name__}: {exc}"))


def _tls_active(client: aiosmtplib.SMTP) -> bool:
    return client.is_connected and client.get_transport_info("ssl_object") is not None


class SmtpMailer:
    """:class:`outbox_core.ports.Mailer` over one SMTP relay. Opens a connection per message."""

    def __init__(self, settings: SmtpSettings) -> None:
        self.settings = settings

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget.total_seconds()
        progress = _Progress()
        result: list[Outcome] = []
        client = self._client()
        try:
            with _mapped(progress, result):
                dial = min(self.settings.dial.total_seconds(), budget.total_seconds())
                async with asyncio.timeout(dial):
                    await client.connect()
                exchange = min(self.settings.exchange_cap.total_seconds(), deadline - loop.time())
                async with asyncio.timeout(max(exchange, 0.0)):
                    outcome = await self._exchange(client, mail, progress)
                result.append(outcome)
            if result[0].kind is OutcomeKind.SENT:
                await _quit_politely(client)
        finally:
            await _close(client)
        return result[0]

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

    async def _exchange(
        self, client: aiosmtplib.SMTP, mail: OutgoingMail, progress: _Progress
    ) -> Outcome:
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
        progress.stage = SmtpStage.MAIL_FROM
        await client.mail(mail.envelope_from)
        progress.stage = SmtpStage.RCPT_TO
        refused: list[Outcome] = []
        for recipient in mail.recipients:
            reply = await client.execute_command(b"RCPT", f"TO:<{recipient}>".encode("ascii"))
            if reply.code >= 300:
                refused.append(classify_smtp_reply(reply.code, reply.message))
        if len(refused) == len(mail.recipients):
            # Nobody will receive it: the first refusal decides (5xx permanent, 4xx transient).
            with contextlib.suppress(aiosmtplib.SMTPException):
                await client.rset()
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


def _worst(outcomes: list[Outcome]) -> Outcome:
    """Any transient refusal means a retry could still reach that recipient."""
    for outcome in outcomes:
        if outcome.kind is OutcomeKind.TRANSIENT:
            return outcome
    return outcomes[0]


async def _quit_politely(client: aiosmtplib.SMTP) -> None:
    """QUIT after a delivered message; its fate can't change the outcome any more."""
    with contextlib.suppress(aiosmtplib.SMTPException, OSError, TimeoutError):
        async with asyncio.timeout(1.0):
            await client.quit()


async def _close(client: aiosmtplib.SMTP) -> None:
    if client.is_connected:
        client.close()
