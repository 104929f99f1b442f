"""Hostile or broken configuration (RELIABILITY.md, hostile input: "Configuration").

Promise: a budget chain that doesn't hold, ``tls=none`` in production, a missing sender, an unknown
TLS mode, a bad port or URL is refused when the object is built, with a ConfigurationError whose
message names the broken setting; through the CLI, ``outbox worker`` exits 2 with the one error line
naming the option, before it prints anything else or touches the database or the relay.

Mechanisms under test: the attrs validators of ``EmailTiming``/``EmailStepBudgets`` (the chain
``batch_size * per_row <= batch_timeout < claim_lease``), ``LaneConfig``, ``SmtpSecurityPolicy``
and ``SmtpSettings`` (+ ``from_url``), ``ScrubRules``, and the CLI's ``SettingError`` mapping.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from click.testing import CliRunner

from outbox_adapters.cli import main
from outbox_adapters.clock import SystemClock
from outbox_adapters.lanes.email import EmailHandler, email_lane
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.errors import ConfigurationError
from outbox_core.scrub import ScrubRules
from outbox_core.timing import EmailStepBudgets, EmailTiming
from outbox_core.tls import SmtpSecurityPolicy

SENDER = "noreply@shop.example"


def policy(**kwargs):
    return SmtpSecurityPolicy(**{"sender": SENDER, **kwargs})


def settings(**kwargs):
    return SmtpSettings(**{"host": "smtp.example.org", "port": 587, "policy": policy(), **kwargs})


def from_url(url, **kwargs):
    return SmtpSettings.from_url(url, **{"sender": SENDER, **kwargs})


# (id, a constructor call, words the ConfigurationError must contain: the setting's name)
REFUSED = [
    # the budget chain: batch_size * per_row <= batch_timeout < claim_lease
    ("chain-timeout-too-short", lambda: EmailTiming(batch_size=5, batch_timeout=timedelta(seconds=10)), "batch_timeout 10s is shorter than batch_size 5"),
    ("chain-timeout-past-lease", lambda: EmailTiming(batch_size=2, batch_timeout=timedelta(seconds=200)), "is not shorter than claim_lease 180s"),
    ("chain-grace-zero", lambda: EmailTiming(lease_grace=timedelta(0)), "lease_grace must be a duration above 0s"),
    ("budget-zero", lambda: EmailTiming.with_overrides({"dial": 0}), "dial must be a duration above 0s"),
    ("budget-negative", lambda: EmailStepBudgets(mark=timedelta(seconds=-1)), "mark must be a duration above 0s"),
    ("budget-infinite", lambda: EmailTiming.with_overrides({"smtp_exchange": float("inf")}), "smtp_exchange must be a finite number"),
    ("budget-unknown", lambda: EmailTiming.with_overrides({"dialling": 3}), "unknown budget name(s) dialling"),
    ("batch-zero", lambda: EmailTiming(batch_size=0), "batch_size must be a whole number"),
    ("batch-bool", lambda: EmailTiming(batch_size=True), "batch_size must be a whole number"),
    ("rows-in-flight", lambda: email_lane(rows_in_flight=6), "rows_in_flight must be between 1 and the batch size 5"),
    # tls=none: never in production, elsewhere only with the explicit opt-in, never with AUTH
    ("none-in-production", lambda: policy(mode="none", allow_plaintext=True, environment="production"), "refused in environment 'production'"),
    ("none-in-PRODUCTION", lambda: policy(mode="none", allow_plaintext=True, environment=" PRODUCTION "), "refused in environment ' PRODUCTION '"),
    ("none-via-url-in-production", lambda: from_url("smtp://127.0.0.1:25", tls="none", allow_plaintext=True, environment="production"), "refused in environment 'production'"),
    ("none-without-opt-in", lambda: policy(mode="none"), "needs allow_plaintext=True"),
    ("none-opt-in-not-true", lambda: policy(mode="none", allow_plaintext="yes"), "needs allow_plaintext=True"),
    ("none-with-auth", lambda: policy(mode="none", allow_plaintext=True, username="u", password="p"), "AUTH is only sent over TLS"),
    ("environment-empty", lambda: policy(environment=" "), "environment must name the deployment"),
    # the sender
    ("sender-missing", lambda: SmtpSecurityPolicy(sender=""), "sender is required"),
    ("sender-none", lambda: SmtpSecurityPolicy(sender=None), "sender is required"),  # type: ignore[arg-type]  # the wrong type is the point
    ("sender-no-at", lambda: policy(sender="noreply"), "sender 'noreply' is not an address"),
    ("sender-crlf", lambda: policy(sender="noreply@shop.example\r\nBcc: eve@evil.example"), "control character"),
    ("sender-display-name", lambda: policy(sender="Shop <noreply@shop.example>"), "whitespace"),
    ("sender-dotless", lambda: settings(policy=policy(sender="noreply@localhost")), "SMTP sender is not a usable address"),
    ("sender-quoted", lambda: settings(policy=policy(sender='"no.reply"@shop.example')), "SMTP sender is not a usable address"),
    # the TLS mode
    ("mode-unknown", lambda: policy(mode="ssl"), "SMTP TLS mode 'ssl' is not a known mode"),
    ("mode-empty", lambda: policy(mode=""), "is not a known mode"),
    ("mode-not-text", lambda: policy(mode=None), "SMTP TLS mode must be one of"),
    ("mode-unknown-via-url", lambda: from_url("smtp://127.0.0.1:587", tls="opportunistic"), "'opportunistic' is not a known mode"),
    # credentials
    ("credentials-half", lambda: policy(username="mailer"), "password is not set"),
    ("credentials-half-url", lambda: from_url("smtp://mailer@127.0.0.1:587"), "password is not set"),
    ("credentials-nul", lambda: policy(username="mailer", password="a\x00b"), "password must be non-empty text without NUL"),
    # host, port, URL
    ("port-zero", lambda: settings(port=0), "SMTP port must be 1..65535, got 0"),
    ("port-too-high", lambda: settings(port=70_000), "SMTP port must be 1..65535, got 70000"),
    ("port-negative", lambda: settings(port=-25), "got -25"),
    ("host-empty", lambda: settings(host=""), "SMTP host must be a host name or address"),
    ("host-space", lambda: settings(host="smtp example.org"), "SMTP host must be a host name or address"),
    ("host-crlf", lambda: settings(host="smtp.example.org\r\nMAIL"), "SMTP host must be a host name or address"),
    ("url-scheme", lambda: from_url("http://smtp.example.org"), "SMTP URL must start with smtp:// or smtps://"),
    ("url-port-too-high", lambda: from_url("smtp://smtp.example.org:99999"), "SMTP URL has an invalid port"),
    ("url-port-text", lambda: from_url("smtp://smtp.example.org:submission"), "SMTP URL has an invalid port"),
    ("url-no-host", lambda: from_url("smtp://:587"), "SMTP host must be a host name or address"),
    # timeouts and the session pool
    ("mailer-steps-not-budgets", lambda: SmtpMailer(settings(), steps={"dial": 10}), "SmtpMailer steps must be the lane's EmailStepBudgets"),  # type: ignore[arg-type]  # the wrong type is the point
    ("mailer-and-handler-disagree", lambda: EmailHandler(SmtpMailer(settings()), sender=SENDER, clock=SystemClock(), steps=EmailStepBudgets(dial=timedelta(seconds=12))), "the mailer's step budgets differ from the handler's"),
    ("sessions-zero", lambda: settings(max_sessions=0), "SMTP max_sessions must be a whole number from 1 to 64"),
    ("sessions-too-many", lambda: settings(max_sessions=65), "SMTP max_sessions must be a whole number from 1 to 64"),
    ("sessions-bool", lambda: settings(max_sessions=True), "SMTP max_sessions must be a whole number"),
    # what is scrubbed
    ("scrub-mutable-set", lambda: ScrubRules(keys={"password_reset_url"}), "ScrubRules.keys must be a frozenset"),  # type: ignore[arg-type]  # the wrong type is the point
    ("scrub-empty-key", lambda: ScrubRules(keys=frozenset({""})), "ScrubRules.keys must hold non-empty strings"),
]  # fmt: skip


@pytest.mark.parametrize(("build", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_configuration_that_cannot_work_is_refused_at_construction(build, words):
    with pytest.raises(ConfigurationError) as refused:
        build()
    assert words in str(refused.value)


def test_the_password_is_never_part_of_a_refusal_or_a_description():
    password = "cfg-secret-9c1e"
    with pytest.raises(ConfigurationError) as refused:
        from_url(f"smtp://mailer:{password}@127.0.0.1:587", tls="none", allow_plaintext=True)
    assert password not in str(refused.value)
    good = from_url(f"smtp://mailer:{password}@127.0.0.1:587")
    assert password not in good.describe()
    assert password not in repr(good)


# Gaps the security review found (each once accepted, or refused with a bare TypeError/ValueError
# instead of a ConfigurationError): now refused at construction, naming the setting.
GAPS = [
    ("url-port-zero", lambda: from_url("smtp://smtp.example.org:0"), "port"),
    ("port-bool", lambda: settings(port=True), "port"),
    ("port-text", lambda: settings(port="587"), "port"),
    ("lane-invalid", lambda: email_lane(lane="Email "), "lane"),
    ("poll-zero", lambda: email_lane(poll_interval=0), "poll_interval"),
    ("leader-ttl-zero", lambda: email_lane(leader_ttl=timedelta(0)), "leader_ttl"),
    (
        "retry-after-cap-negative",
        lambda: email_lane(retry_after_cap=timedelta(seconds=-1)),
        "retry_after_cap",
    ),
]


@pytest.mark.parametrize(("build", "words"), [c[1:] for c in GAPS], ids=[c[0] for c in GAPS])
def test_a_configuration_gap_is_refused_at_construction(build, words):
    with pytest.raises(ConfigurationError, match=words):
        build()


# --- through the CLI: exit 2, one error line naming the option, nothing else done ----------------

# The database URL only has to parse: a refusal must come before any connection is tried.
BASE = [
    "worker", "--drain", "--database-url", "postgresql://outbox@127.0.0.1:1/outbox",
    "--smtp-url", "smtp://127.0.0.1:1", "--sender", SENDER,
]  # fmt: skip
CLI_REFUSED = [
    ("chain", ["--batch-timeout", "10"], "timing (--budget, --batch-size, --batch-timeout): batch_timeout 10s is shorter"),
    ("chain-lease", ["--batch-size", "2", "--batch-timeout", "200"], "is not shorter than claim_lease 180s"),
    ("budget", ["--budget", "mark=-1"], "mark must be a duration above 0s"),
    ("none-in-production", ["--smtp-tls", "none", "--allow-plaintext", "--environment", "production"], "refused in environment 'production'"),
    ("none-without-opt-in", ["--smtp-tls", "none"], "needs allow_plaintext=True"),
    ("sender-empty", ["--sender", ""], "--sender (OUTBOX_SENDER): '' is not an acceptable"),
    ("sender-no-at", ["--sender", "noreply"], "--sender (OUTBOX_SENDER): 'noreply' is not an acceptable"),
    ("sender-crlf", ["--sender", "noreply@shop.example\r\nBcc: eve@evil.example"], "--sender (OUTBOX_SENDER)"),
    ("url-scheme", ["--smtp-url", "http://127.0.0.1:1"], "SMTP URL must start with smtp:// or smtps://"),
    ("url-port", ["--smtp-url", "smtp://127.0.0.1:99999"], "SMTP URL has an invalid port"),
    ("url-no-host", ["--smtp-url", "smtp://:25"], "SMTP host must be a host name or address"),
    ("url-half-credentials", ["--smtp-url", "smtp://mailer@127.0.0.1:1"], "password is not set"),
    ("database-url", ["--database-url", "not a url at all"], "--database-url: not a PostgreSQL URL"),
]  # fmt: skip
# Errors click itself reports (a value outside a choice, a missing option): exit 2 too, with a
# "Usage:" preamble above the one "Error:" line.
CLICK_REFUSED = [
    ("mode-unknown", ["--smtp-tls", "ssl"], "Invalid value for '--smtp-tls'"),
    ("poll-zero", ["--poll-interval", "0"], "Invalid value for '--poll-interval'"),
    ("ca-file-missing", ["--smtp-ca-file", "/nonexistent/ca.pem"], "Invalid value for '--smtp-ca-file'"),
]  # fmt: skip


def run_cli(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.mark.parametrize(
    ("extra", "words"), [c[1:] for c in CLI_REFUSED], ids=[c[0] for c in CLI_REFUSED]
)
def test_outbox_worker_refuses_a_broken_setting_in_one_line(extra, words):
    result = run_cli(BASE + extra)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    assert words in line
    assert result.stdout == ""  # refused before the timing/SMTP lines, the schema check, a send


@pytest.mark.parametrize(
    ("extra", "words"), [c[1:] for c in CLICK_REFUSED], ids=[c[0] for c in CLICK_REFUSED]
)
def test_outbox_worker_refuses_a_bad_option_value(extra, words):
    result = run_cli(BASE + extra)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1
    assert words in errors[0]
    assert result.stdout == ""


def test_outbox_worker_refuses_a_missing_sender():
    result = run_cli([arg for arg in BASE if arg not in {"--sender", SENDER}])
    assert result.exit_code == 2
    # The option and its environment twin, in one line (required for e-mail lanes only).
    assert result.stderr.strip() == (
        "Error: --sender (OUTBOX_SENDER) is required for the e-mail lane 'email'"
    )


def test_outbox_worker_refuses_port_zero():
    # `port or default` once turned an explicit :0 into the mode's default port (587).
    result = run_cli([*BASE, "--smtp-url", "smtp://127.0.0.1:0"])
    assert result.exit_code == 2
    assert "port" in result.stderr
