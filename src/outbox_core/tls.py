# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""The SMTP security policy and the decisions it makes over what a server offers (ADR 0007).

Theory of operation
-------------------
The policy is plain data, checked once when it is built; the SMTP adapter asks it two questions on
every connection and acts on the answers, which are plain values too::

    connect (implicit TLS first in mode "tls") → EHLO
      plan_starttls(policy, starttls_advertised=..., tls_active=...)
        UPGRADE            → STARTTLS, then EHLO again (RFC 3207 §4.2: forget what the server
                             said before TLS, so the AUTH list must come from the new EHLO)
        ALREADY_TLS        → go on
        PROCEED_PLAINTEXT  → go on without TLS (mode "none" only)
        REFUSE             → QUIT; the attempt fails before any AUTH, MAIL, RCPT or DATA
      plan_auth(policy, auth_mechanisms=..., tls_active=...)
        NONE               → no AUTH (no credentials configured)
        PLAIN / LOGIN      → AUTH with that mechanism
        REFUSE             → QUIT; the attempt fails before MAIL, RCPT or DATA
      MAIL / RCPT / DATA

A refusal is a value (``kind`` REFUSE and a ``reason``), not an exception: the adapter turns it into
``Outcome.transient(plan.reason)``. It is transient on purpose: a missing STARTTLS is as likely a
passing fault or an attacker stripping the advertisement as a permanent property of the server, and
a message must not be failed for good because of either. The reason names the rule and never a
credential.

Strictness is a decision of its own (ADR 0007): mode "starttls" never falls back to plaintext
when STARTTLS is missing (a man in the middle can strip the advertisement, and an opportunistic path
would silently send invoices in clear); mode "none" is refused in production whatever the flags, and
elsewhere needs an explicit ``allow_plaintext``; AUTH goes only over TLS and only when configured.
"""

from __future__ import annotations

import enum
import unicodedata
from typing import TYPE_CHECKING, Final

import attrs

from outbox_core.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = [
    "SUPPORTED_AUTH_MECHANISMS",
    "AuthKind",
    "AuthPlan",
    "SmtpSecurityPolicy",
    "SmtpTlsMode",
    "StartTlsAction",
    "StartTlsKind",
    "describe",
    "plan_auth",
    "plan_starttls",
]

#: The SASL mechanisms the adapter speaks, best first. Both send the password as is, which is why
#: AUTH happens only over TLS. RFC 4616 (PLAIN); LOGIN is the de-facto draft-murchison-sasl-login.
SUPPORTED_AUTH_MECHANISMS: Final = ("PLAIN", "LOGIN")


class SmtpTlsMode(enum.StrEnum):
    """How the connection is protected."""

    #: Connect in plaintext, then STARTTLS (RFC 3207) — required: no STARTTLS, no send.
    STARTTLS = "starttls"
    #: TLS from the first byte (implicit TLS, RFC 8314, usually port 465).
    TLS = "tls"
    #: No TLS at all: development only, and only with ``allow_plaintext``.
    NONE = "none"

    @classmethod
    def parse(cls, text: str) -> SmtpTlsMode:
        """A mode from configuration text (case and outer whitespace ignored)."""
        valid = ", ".join(mode.value for mode in cls)
        if not isinstance(text, str):
            raise ConfigurationError(f"SMTP TLS mode must be one of {valid}; got {text!r:.60}")
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ConfigurationError(
                f"SMTP TLS mode {text!r:.60} is not a known mode; use one of {valid}"
            ) from None


def _to_mode(value: str) -> SmtpTlsMode:
    # A named function: mypy's attrs plugin does not follow a classmethod used as a converter.
    return SmtpTlsMode.parse(value)


def _has_control_or_space(text: str) -> bool:
    return any(ch.isspace() or unicodedata.category(ch) == "Cc" for ch in text)


def _check_sender(_inst: object, _attribute: object, sender: str) -> None:
    # A first, minimal check so a policy with no usable sender fails at boot. The SMTP adapter
    # re-validates the full addr-spec with outbox_core.mail.validate_address before every send.
    if not isinstance(sender, str) or not sender:
        raise ConfigurationError("sender is required: set the address mail is sent from")
    if _has_control_or_space(sender):
        raise ConfigurationError(
            f"sender {sender!r:.80} contains whitespace or a control character"
        )
    local, _, domain = sender.partition("@")
    if sender.count("@") != 1 or not local or not domain:
        raise ConfigurationError(
            f"sender {sender!r:.80} is not an address of the form local@domain (exactly one '@')"
        )


def _is_production(environment: str) -> bool:
    return environment.strip().casefold() == "production"


@attrs.frozen(kw_only=True)
class SmtpSecurityPolicy:
    """The SMTP security settings, refused at construction when they cannot be safe."""

    #: The address mail is sent from (required; minimal check here, full check in the adapter).
    sender: str = attrs.field(validator=_check_sender)
    #: How the connection is protected. Configuration text is accepted and parsed.
    mode: SmtpTlsMode = attrs.field(default=SmtpTlsMode.STARTTLS, converter=_to_mode)
    #: The explicit opt-in mode "none" needs outside production.
    allow_plaintext: bool = False
    #: The deployment's name; "production" (any case) forbids mode "none".
    environment: str = "development"
    #: AUTH user name; set together with ``password`` or not at all.
    username: str | None = None
    #: AUTH password; never shown by repr, :func:`describe` or any refusal reason.
    password: str | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.environment, str) or not self.environment.strip():
            raise ConfigurationError("environment must name the deployment, e.g. 'production'")
        self._check_plaintext()
        self._check_credentials()

    def _check_plaintext(self) -> None:
        if self.mode is not SmtpTlsMode.NONE:
            return
        if _is_production(self.environment):
            raise ConfigurationError(
                f"mode 'none' (plaintext SMTP) is refused in environment {self.environment!r}: "
                "production mail must use 'starttls' or 'tls', whatever allow_plaintext says"
            )
        if self.allow_plaintext is not True:
            raise ConfigurationError(
                "mode 'none' (plaintext SMTP) needs allow_plaintext=True, an explicit opt-in "
                "for a local development server"
            )

    def _check_credentials(self) -> None:
        for name, value in (("username", self.username), ("password", self.password)):
            if value is None:
                continue
            # RFC 4616: PLAIN separates its fields with NUL, so neither may contain one.
            if not isinstance(value, str) or not value or "\0" in value:
                raise ConfigurationError(f"{name} must be non-empty text without NUL characters")
        if (self.username is None) != (self.password is None):
            missing = "password" if self.password is None else "username"
            raise ConfigurationError(
                f"SMTP credentials are incomplete: {missing} is not set (set both or neither)"
            )
        if self.has_credentials and self.mode is SmtpTlsMode.NONE:
            raise ConfigurationError(
                "username/password with mode 'none' is refused: AUTH is only sent over TLS"
            )

    @property
    def has_credentials(self) -> bool:
        return self.username is not None


# --- decisions over what the server offered ------------------------------------------------------


class StartTlsKind(enum.StrEnum):
    UPGRADE = "upgrade"
    ALREADY_TLS = "already_tls"
    PROCEED_PLAINTEXT = "proceed_plaintext"
    REFUSE = "refuse"


def _reason_iff_refused(inst: StartTlsAction | AuthPlan, _attribute: object, reason: str) -> None:
    if (inst.kind == "refuse") != bool(reason):
        raise ValueError(f"a reason goes with a refusal and only with one: {inst.kind}, {reason!r}")


@attrs.frozen
class StartTlsAction:
    """What to do about TLS after the first EHLO."""

    #: The step to take.
    kind: StartTlsKind
    #: Why the send is refused (REFUSE only); safe to store and log.
    reason: str = attrs.field(default="", validator=_reason_iff_refused)

    @property
    def refused(self) -> bool:
        return self.kind is StartTlsKind.REFUSE


class AuthKind(enum.StrEnum):
    NONE = "none"
    PLAIN = "plain"
    LOGIN = "login"
    REFUSE = "refuse"


@attrs.frozen
class AuthPlan:
    """Whether and how to authenticate, after TLS is settled."""

    #: The step to take.
    kind: AuthKind
    #: Why the send is refused (REFUSE only); safe to store and log.
    reason: str = attrs.field(default="", validator=_reason_iff_refused)

    @property
    def refused(self) -> bool:
        return self.kind is AuthKind.REFUSE

    @property
    def mechanism(self) -> str | None:
        """The SASL mechanism name to send ("PLAIN" or "LOGIN"), or None for no AUTH."""
        return self.kind.value.upper() if self.kind in {AuthKind.PLAIN, AuthKind.LOGIN} else None


def plan_starttls(
    policy: SmtpSecurityPolicy, *, starttls_advertised: bool, tls_active: bool
) -> StartTlsAction:
    """Decide the TLS step after EHLO. Only mode "none" ever continues without TLS."""
    if tls_active:
        return StartTlsAction(StartTlsKind.ALREADY_TLS)
    if policy.mode is SmtpTlsMode.NONE:
        # The policy was refused at construction unless plaintext is allowed and not production.
        # No opportunistic upgrade either: the operator chose plaintext (a dev sink whose
        # certificate would not verify), and half-trying TLS would only make failures confusing.
        return StartTlsAction(StartTlsKind.PROCEED_PLAINTEXT)
    if policy.mode is SmtpTlsMode.TLS:
        return StartTlsAction(
            StartTlsKind.REFUSE,
            "mode 'tls' expects implicit TLS from the first byte, but the connection is plaintext",
        )
    if starttls_advertised:
        return StartTlsAction(StartTlsKind.UPGRADE)
    return StartTlsAction(
        StartTlsKind.REFUSE,
        "the server did not advertise STARTTLS and mode 'starttls' is strict: no plaintext "
        "fallback (a stripped advertisement is how a downgrade attack looks)",
    )


def plan_auth(
    policy: SmtpSecurityPolicy, *, auth_mechanisms: Collection[str], tls_active: bool
) -> AuthPlan:
    """Decide AUTH from the (post-STARTTLS) EHLO's mechanisms. Never AUTH in plaintext.

    ``auth_mechanisms`` is a collection of names, or the EHLO ``AUTH`` parameter as one string
    ("PLAIN LOGIN", RFC 4954 §3), which is how some clients expose it.
    """
    if not policy.has_credentials:
        return AuthPlan(AuthKind.NONE)
    if not tls_active:
        return AuthPlan(AuthKind.REFUSE, "SMTP credentials are only sent over TLS, and TLS is off")
    # A str is a Collection[str] too: iterating it would yield letters, so split it instead.
    names = auth_mechanisms.split() if isinstance(auth_mechanisms, str) else auth_mechanisms
    offered = {mechanism.upper() for mechanism in names}
    for name in SUPPORTED_AUTH_MECHANISMS:
        if name in offered:
            return AuthPlan(AuthKind(name.lower()))
    return AuthPlan(
        AuthKind.REFUSE,
        "the server offers none of the AUTH mechanisms this mailer supports (PLAIN, LOGIN), "
        "and credentials are configured",
    )


def describe(policy: SmtpSecurityPolicy) -> str:
    """One line for the boot log, e.g. "SMTP security: starttls (strict), auth: configured"."""
    if policy.mode is SmtpTlsMode.STARTTLS:
        mode = "starttls (strict)"
    elif policy.mode is SmtpTlsMode.TLS:
        mode = "tls (implicit)"
    else:
        mode = f"none (PLAINTEXT, allowed in environment {policy.environment!r})"
    auth = "configured" if policy.has_credentials else "none"
    return f"SMTP security: {mode}, auth: {auth}"
