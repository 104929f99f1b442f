"""The SMTP relay's settings, refused at construction when they can't work, and the pool's stats."""

from __future__ import annotations

import ssl
from datetime import timedelta
from urllib.parse import unquote, urlsplit

import attrs

from outbox_core._validators import duration, whole_number
from outbox_core.errors import ConfigurationError
from outbox_core.mail import validate_address
from outbox_core.tls import SmtpSecurityPolicy, SmtpTlsMode, describe

__all__ = ["MAX_SESSIONS_LIMIT", "MailerStats", "SmtpSettings"]

DEFAULT_MAX_SESSIONS = 4
DEFAULT_SESSION_MAX_AGE = timedelta(seconds=60)
DEFAULT_MESSAGES_PER_SESSION = 100
#: More sessions than this to one relay is a misconfiguration (relays limit connections per client).
MAX_SESSIONS_LIMIT = 64


def _port(_inst: object, _attribute: object, value: int) -> None:
    # bool is an int subclass (True would be port 1); a str would fail the comparison with a
    # bare TypeError.
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or not 1 <= value <= 65535:
        raise ConfigurationError(f"SMTP port must be 1..65535, got {value!r}")


def _host(_inst: object, _attribute: object, value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise ConfigurationError(f"SMTP host must be a host name or address, got {value!r}")


@attrs.frozen
class SmtpSettings:
    """Where and how to send. Refused at construction when it can't work (ADR 0007).

    No timeouts here: how long a dial or an exchange may take is a step budget of the lane's
    timing (``EmailStepBudgets.dial``, ``.smtp_exchange``), given to :class:`SmtpMailer`, so it
    is the same figure the lease is derived from (ADR 0015).
    """

    #: The relay's host name (also the name its certificate must carry).
    host: str = attrs.field(validator=_host)
    #: The relay's port (587 for STARTTLS, 465 for implicit TLS are the usual ones).
    port: int = attrs.field(validator=_port)
    #: TLS mode, credentials, sender, environment: the pure policy of ``outbox_core.tls``.
    policy: SmtpSecurityPolicy
    #: A CA bundle to trust instead of the system store (``None``: the system store).
    ca_file: str | None = None
    #: A ready SSL context (tests, unusual setups); wins over ``ca_file``.
    tls_context: ssl.SSLContext | None = attrs.field(default=None, repr=False)
    #: The name we give in EHLO (``None``: aiosmtplib's default, the local FQDN).
    local_hostname: str | None = None
    #: Most sessions open to the relay at once (each carries one message at a time).
    max_sessions: int = attrs.field(
        default=DEFAULT_MAX_SESSIONS, validator=whole_number("SMTP", 1, MAX_SESSIONS_LIMIT)
    )
    #: A session this old is QUIT instead of carrying another message.
    session_max_age: timedelta = attrs.field(
        default=DEFAULT_SESSION_MAX_AGE, validator=duration("SMTP")
    )
    #: A session that carried this many transactions is QUIT and replaced.
    messages_per_session: int = attrs.field(
        default=DEFAULT_MESSAGES_PER_SESSION, validator=whole_number("SMTP", 1)
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
