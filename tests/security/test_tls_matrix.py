"""Security promise 4: the SMTP TLS policy matrix (RELIABILITY.md).

"SMTP: STARTTLS required (or implicit TLS), certificate and hostname verified, AUTH only over TLS,
plaintext only with an explicit non-production flag."

Every combination of: the mailer's mode (starttls, tls, none) x the server offers STARTTLS or not x
the server speaks implicit TLS or not x AUTH configured or not x production or not, plus an
untrusted certificate and a certificate for another name under starttls and tls. Each scenario has
its own real SMTP server (``SmtpSink``: aiosmtpd, which counts every MAIL, RCPT, DATA and AUTH
command and how many arrived without TLS) and its own real ``SmtpMailer``; all of them run at once.

In every scenario: 0 plaintext MAIL/RCPT/DATA/AUTH, except mode none with ``allow_plaintext``
outside production, where plaintext MAIL/RCPT/DATA are expected and counted (and still 0 AUTH:
credentials with mode none are refused at construction). A policy that can't be safe is refused
at construction; those scenarios are counted too.

Mechanisms under test: ``outbox_core.tls`` (``SmtpSecurityPolicy`` validation, ``plan_starttls``
strict STARTTLS, ``plan_auth`` never in plaintext) as the SMTP adapter carries them out, with
certificate and hostname verification on. Replace the adapter's ``start_tls=False`` + plan with
aiosmtplib's opportunistic default and the "server does not offer STARTTLS" rows send plaintext.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import trustme
from aiosmtpd.controller import Controller

from outbox_adapters.clock import SystemClock
from outbox_adapters.demo import sink as smtp_sink
from outbox_adapters.demo.sink import SinkTls, SmtpSink
from outbox_adapters.lanes.email import EmailHandler
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.errors import ConfigurationError
from outbox_core.messages import ClaimedRow, ClaimToken
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.timing import EmailStepBudgets
from outbox_core.tls import SmtpSecurityPolicy

pytestmark = pytest.mark.integration

SENDER = "noreply@shop.example"
USER = "mailer"
#: Also in tests/log_canary.py FIXED_CANARIES: it must never be logged.
PASSWORD = "sec-smtp-pass-7f3a9c"
#: Long enough for a loopback connect + TLS handshake under load; short, because a client that
#: speaks plaintext to an implicit-TLS port (or the reverse) waits for it to run out.
DIAL = timedelta(seconds=2)
PLAINTEXT_COMMANDS = ("MAIL", "RCPT", "DATA")


@attrs.frozen
class Scenario:
    mode: str
    offers_starttls: bool
    implicit_tls: bool
    auth: bool
    production: bool
    #: "" (a certificate the client trusts, for the name it dials), "untrusted" or "wrong-name".
    certificate: str = ""

    @property
    def name(self) -> str:
        server = ("implicit-tls" if self.implicit_tls else "plain-start") + (
            "+starttls" if self.offers_starttls else ""
        )
        flags = [self.mode, server, "auth" if self.auth else "no-auth"]
        flags.append("production" if self.production else "development")
        return "/".join([*flags, *([f"cert-{self.certificate}"] if self.certificate else [])])

    @property
    def explicit_plaintext(self) -> bool:
        return self.mode == "none"

    def expected_refusal_at_construction(self) -> bool:
        return self.mode == "none" and (self.production or self.auth)

    def expected_delivery(self) -> bool:
        if self.certificate:
            return False
        if self.mode == "starttls":
            return self.offers_starttls and not self.implicit_tls
        if self.mode == "tls":
            return self.implicit_tls
        return not self.implicit_tls  # none: plaintext, no upgrade even when offered


SCENARIOS = [
    Scenario(mode, offers, implicit, auth, production)
    for mode, offers, implicit, auth, production in itertools.product(
        ("starttls", "tls", "none"), (True, False), (True, False), (True, False), (True, False)
    )
] + [
    Scenario("starttls", True, False, True, True, "untrusted"),
    Scenario("starttls", True, False, True, True, "wrong-name"),
    Scenario("tls", False, True, True, True, "untrusted"),
    Scenario("tls", False, True, True, True, "wrong-name"),
]


class ImplicitTlsSink(SmtpSink):
    """Implicit TLS that ALSO advertises STARTTLS (aiosmtpd offers it whenever it has a
    ``tls_context``): the one server shape ``SmtpSink`` doesn't make by itself."""

    def start(self) -> ImplicitTlsSink:
        original = Controller
        context = self._server_context()

        def controller(handler: Any, **kwargs: Any) -> Any:
            return original(handler, tls_context=context, **kwargs)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(smtp_sink, "Controller", controller)
            super().start()
        return self


def sink_for(scenario: Scenario) -> SmtpSink:
    credentials: dict[str, Any] = {"username": USER, "password": PASSWORD} if scenario.auth else {}
    host = "127.0.0.2" if scenario.certificate == "wrong-name" else "127.0.0.1"
    if scenario.implicit_tls:
        kind = ImplicitTlsSink if scenario.offers_starttls else SmtpSink
        return kind(tls="tls", host=host, **credentials).start()
    tls: SinkTls = "starttls" if scenario.offers_starttls else "none"
    return SmtpSink(tls=tls, host=host, **credentials).start()


def policy_for(scenario: Scenario) -> SmtpSecurityPolicy:
    credentials = {"username": USER, "password": PASSWORD} if scenario.auth else {}
    return SmtpSecurityPolicy(
        sender=SENDER,
        mode=scenario.mode,
        allow_plaintext=scenario.mode == "none",
        environment="production" if scenario.production else "development",
        **credentials,
    )


@attrs.define
class Result:
    scenario: Scenario
    refused_at_construction: bool = False
    outcome: Outcome | None = None
    delivered: int = 0
    delivered_without_tls: int = 0
    commands: dict[str, int] = attrs.Factory(dict)
    plaintext: dict[str, int] = attrs.Factory(dict)

    def violations(self) -> list[str]:
        """Every way this scenario broke the promise (empty: it kept it)."""
        if self.refused_at_construction != self.scenario.expected_refusal_at_construction():
            return [f"refused at construction: {self.refused_at_construction}"]
        if self.refused_at_construction:
            return []
        return [*self._delivery(), *self._plaintext(), *self._auth()]

    def _delivery(self) -> list[str]:
        s = self.scenario
        sent = self.outcome is not None and self.outcome.kind is OutcomeKind.SENT
        found = []
        if sent != s.expected_delivery() or self.delivered != int(s.expected_delivery()):
            found.append(f"delivered {self.delivered}, outcome {self.outcome}")
        if not s.expected_delivery() and any(self.commands.values()):
            found.append(f"commands reached a server it refused: {self.commands}")
        reason = getattr(self.outcome, "reason", "")
        if s.certificate and "CERTIFICATE_VERIFY_FAILED" not in reason:
            found.append(f"a bad certificate was not the refusal: {self.outcome}")
        return found

    def _plaintext(self) -> list[str]:
        plaintext = {c: self.plaintext.get(c, 0) for c in PLAINTEXT_COMMANDS}
        if self.scenario.explicit_plaintext:
            expected = dict.fromkeys(PLAINTEXT_COMMANDS, int(self.scenario.expected_delivery()))
            if plaintext != expected:
                return [f"plaintext commands {plaintext} in explicit plaintext mode"]
        elif any(plaintext.values()) or self.delivered_without_tls:
            return [f"plaintext commands {plaintext} outside explicit plaintext mode"]
        return []

    def _auth(self) -> list[str]:
        found = []
        if self.plaintext.get("AUTH", 0):
            found.append(f"AUTH in plaintext x{self.plaintext['AUTH']}")
        s = self.scenario
        if s.auth and s.expected_delivery() and self.commands.get("AUTH") != 1:
            found.append(f"AUTH over TLS x{self.commands.get('AUTH', 0)}, expected 1")
        return found


def client_context(scenario: Scenario, sink: SmtpSink) -> ssl.SSLContext:
    if scenario.certificate == "untrusted":
        context = ssl.create_default_context()
        trustme.CA().configure_trust(context)  # a CA the server's certificate does not come from
        return context
    return sink.client_context()


def row_for(scenario: Scenario) -> ClaimedRow:
    now = datetime.now(UTC)
    return ClaimedRow(
        id=1,
        lane="email",
        payload={"to": "ann@example.org", "subject": "Matrix", "text": scenario.name},
        attempts=1,
        token=ClaimToken.from_entropy(b"m" * 16),
        lease_expires_at=now + timedelta(minutes=5),
        created_at=now,
    )


def prepare(scenario: Scenario) -> tuple[Result, SmtpSettings | None, SmtpSink | None]:
    """Build the policy (or record its refusal) and start the scenario's server.

    Done for every scenario BEFORE any send: starting a server blocks, and must not eat into the
    dial budget of sends already running.
    """
    result = Result(scenario)
    try:
        policy = policy_for(scenario)
    except ConfigurationError:
        result.refused_at_construction = True
        return result, None, None
    sink = sink_for(scenario)
    settings = SmtpSettings(
        host=sink.host,
        port=sink.port,
        policy=policy,
        tls_context=client_context(scenario, sink),
    )
    return result, settings, sink


async def run(result: Result, settings: SmtpSettings | None, sink: SmtpSink | None) -> Result:
    if settings is None or sink is None:
        return result
    async with SmtpMailer(settings, steps=EmailStepBudgets(dial=DIAL)) as mailer:
        handler = EmailHandler(mailer, sender=SENDER, clock=SystemClock())
        result.outcome = await handler(row_for(result.scenario), budget=timedelta(seconds=10))
    received = sink.received
    result.delivered = len(received)
    result.delivered_without_tls = sum(not mail.tls for mail in received)
    result.commands = dict(sink.handler.commands)
    result.plaintext = dict(sink.handler.plaintext_commands)
    return result


async def test_no_plaintext_command_outside_explicit_plaintext_mode(report_figure):
    prepared = [prepare(scenario) for scenario in SCENARIOS]
    try:
        results = await asyncio.gather(*(run(*one) for one in prepared))
    finally:
        for _, _, sink in prepared:
            if sink is not None:
                sink.stop()

    problems = {r.scenario.name: r.violations() for r in results if r.violations()}
    plaintext_outside = sum(
        sum(r.plaintext.get(c, 0) for c in (*PLAINTEXT_COMMANDS, "AUTH"))
        for r in results
        if not r.scenario.explicit_plaintext
    )
    explicit = sum(sum(r.plaintext.values()) for r in results if r.scenario.explicit_plaintext)
    refused = sum(r.refused_at_construction for r in results)
    delivered = sum(r.delivered for r in results)
    report_figure(
        f"P4 scenarios={len(results)} plaintext_commands={plaintext_outside} (outside explicit"
        f" plaintext mode) explicit_plaintext_commands={explicit}"
        f" refused_at_construction={refused} delivered={delivered}"
    )
    assert problems == {}
    assert plaintext_outside == 0
    # Not vacuous: the matrix delivers where it should, refuses where it should.
    assert delivered == sum(
        s.expected_delivery() and not s.expected_refusal_at_construction() for s in SCENARIOS
    )
    assert refused == sum(s.expected_refusal_at_construction() for s in SCENARIOS)
    assert explicit > 0
