# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""The SMTP security policy (catalogue C8): refusals at construction and the decision tables."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from outbox_core.errors import ConfigurationError
from outbox_core.tls import (
    AuthKind,
    AuthPlan,
    SmtpSecurityPolicy,
    SmtpTlsMode,
    StartTlsAction,
    StartTlsKind,
    describe,
    plan_auth,
    plan_starttls,
)

SENDER = "billing@example.org"
PASSWORD = "hunter2-canary-Zq81"
CREDS = {"username": "mailer", "password": PASSWORD}
DEV_PLAINTEXT = {"mode": "none", "allow_plaintext": True}


def policy(**overrides) -> SmtpSecurityPolicy:
    return SmtpSecurityPolicy(**{"sender": SENDER, **overrides})


# --- modes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("starttls", SmtpTlsMode.STARTTLS),
        ("STARTTLS", SmtpTlsMode.STARTTLS),
        (" tls\n", SmtpTlsMode.TLS),
        ("None", SmtpTlsMode.NONE),
        (SmtpTlsMode.TLS, SmtpTlsMode.TLS),
    ],
)
def test_mode_parse_accepts_known_modes_in_any_case(text: str, mode: SmtpTlsMode) -> None:
    assert SmtpTlsMode.parse(text) is mode


@pytest.mark.parametrize(
    ("text", "message"), [("ssl", "'ssl' is not a known"), ("", "not a"), (None, "got None")]
)
def test_mode_parse_refuses_unknown_modes_listing_the_valid_ones(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        SmtpTlsMode.parse(text)
    assert "starttls, tls, none" in str(info.value)


def test_defaults_are_strict_starttls_without_plaintext() -> None:
    default = policy()
    assert default.mode is SmtpTlsMode.STARTTLS
    assert default.allow_plaintext is False
    assert default.environment == "development"
    assert not default.has_credentials


def test_mode_is_parsed_from_configuration_text() -> None:
    assert policy(mode="TLS").mode is SmtpTlsMode.TLS


# --- refusals at construction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sender": ""}, "sender is required"),
        ({"sender": None}, "sender is required"),
        ({"sender": "bill ing@example.org"}, "sender .* whitespace or a control"),
        ({"sender": "billing@example.org\r\nBcc: x@y"}, "sender .* whitespace or a control"),
        ({"sender": "billing@example.org\x00"}, "sender .* control"),
        ({"sender": "billing"}, "sender 'billing' is not an address .*exactly one '@'"),
        ({"sender": "a@b@example.org"}, "exactly one '@'"),
        ({"sender": "@example.org"}, "local@domain"),
        ({"sender": "billing@"}, "local@domain"),
        ({"mode": "ssl"}, "'ssl' is not a known mode"),
        ({**DEV_PLAINTEXT, "environment": "production"}, "mode 'none' .* refused in environment"),
        ({**DEV_PLAINTEXT, "environment": " PRODUCTION "}, "refused in environment"),
        ({"mode": "none", "environment": "Production"}, "refused in environment"),
        ({"mode": "none"}, "mode 'none' .* needs allow_plaintext=True"),
        ({"mode": "none", "allow_plaintext": "true"}, "needs allow_plaintext=True"),
        ({"username": "mailer"}, "credentials are incomplete: password is not set"),
        ({"password": PASSWORD}, "credentials are incomplete: username is not set"),
        ({"username": "", "password": PASSWORD}, "username must be non-empty"),
        ({"username": "mailer", "password": ""}, "password must be non-empty"),
        ({"username": "mailer", "password": "a\0b"}, "password must be .* without NUL"),
        ({"username": 42, "password": PASSWORD}, "username must be non-empty text"),
        ({**DEV_PLAINTEXT, **CREDS}, "with mode 'none' is refused: AUTH is only sent over TLS"),
        ({"environment": ""}, "environment must name the deployment"),
        ({"environment": None}, "environment must name the deployment"),
    ],
)
def test_unsafe_or_incomplete_settings_are_refused_naming_the_setting(overrides, message) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        policy(**overrides)
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize(
    "overrides",
    [
        DEV_PLAINTEXT,
        {**DEV_PLAINTEXT, "environment": "staging"},
        {"mode": "tls", **CREDS, "environment": "production"},
        {"mode": "starttls", **CREDS, "environment": "production"},
        {"mode": "starttls", "allow_plaintext": True, "environment": "production"},  # flag unused
        {"sender": "o'brien+invoices@mail.example.org"},
    ],
)
def test_safe_settings_are_accepted(overrides) -> None:
    assert policy(**overrides).sender


def test_evolve_revalidates() -> None:
    dev = policy(**DEV_PLAINTEXT)
    with pytest.raises(ConfigurationError, match="refused in environment"):
        attrs.evolve(dev, environment="production")


def test_repr_hides_the_password() -> None:
    shown = repr(policy(**CREDS))
    assert PASSWORD not in shown
    assert "password" not in shown
    assert "username='mailer'" in shown


# --- plan_starttls: the whole table ---------------------------------------------------------------

U, A, P, R = (
    StartTlsKind.UPGRADE,
    StartTlsKind.ALREADY_TLS,
    StartTlsKind.PROCEED_PLAINTEXT,
    StartTlsKind.REFUSE,
)
POLICIES = {
    "starttls": policy(),
    "tls": policy(mode="tls"),
    "none": policy(**DEV_PLAINTEXT),
}


@pytest.mark.parametrize(
    ("mode", "advertised", "tls_active", "expected"),
    [
        ("starttls", True, False, U),
        ("starttls", False, False, R),  # strict: no silent downgrade
        ("starttls", True, True, A),
        ("starttls", False, True, A),
        ("tls", True, False, R),  # implicit TLS expected from the first byte
        ("tls", False, False, R),
        ("tls", True, True, A),
        ("tls", False, True, A),
        ("none", True, False, P),  # the operator chose plaintext: no opportunistic upgrade
        ("none", False, False, P),
        ("none", True, True, A),
        ("none", False, True, A),
    ],
)
def test_plan_starttls_table(mode: str, advertised: bool, tls_active: bool, expected) -> None:
    action = plan_starttls(POLICIES[mode], starttls_advertised=advertised, tls_active=tls_active)
    assert action.kind is expected
    assert action.refused == (expected is R)
    assert bool(action.reason) == (expected is R)


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("starttls", "did not advertise STARTTLS and mode 'starttls' is strict: no plaintext"),
        ("tls", "mode 'tls' expects implicit TLS"),
    ],
)
def test_starttls_refusals_say_why(mode: str, message: str) -> None:
    action = plan_starttls(POLICIES[mode], starttls_advertised=False, tls_active=False)
    assert message in action.reason


# --- plan_auth: the whole table -------------------------------------------------------------------

WITH_CREDS = policy(**CREDS)
NO_CREDS = policy()


@pytest.mark.parametrize(
    ("pol", "mechanisms", "tls_active", "expected", "mechanism"),
    [
        (NO_CREDS, {"PLAIN", "LOGIN"}, True, AuthKind.NONE, None),
        (NO_CREDS, set(), False, AuthKind.NONE, None),
        (POLICIES["none"], {"PLAIN"}, False, AuthKind.NONE, None),
        (WITH_CREDS, {"PLAIN", "LOGIN"}, False, AuthKind.REFUSE, None),  # never AUTH in clear
        (WITH_CREDS, {"PLAIN", "LOGIN"}, True, AuthKind.PLAIN, "PLAIN"),  # PLAIN preferred
        (WITH_CREDS, {"LOGIN", "CRAM-MD5"}, True, AuthKind.LOGIN, "LOGIN"),
        (WITH_CREDS, {"plain"}, True, AuthKind.PLAIN, "PLAIN"),  # names are case-insensitive
        (WITH_CREDS, {"CRAM-MD5", "XOAUTH2"}, True, AuthKind.REFUSE, None),
        (WITH_CREDS, set(), True, AuthKind.REFUSE, None),  # AUTH not advertised at all
        (policy(mode="tls", **CREDS), ["LOGIN"], True, AuthKind.LOGIN, "LOGIN"),
        (WITH_CREDS, "LOGIN PLAIN", True, AuthKind.PLAIN, "PLAIN"),  # the EHLO parameter as is
        (WITH_CREDS, "CRAM-MD5 LOGIN", True, AuthKind.LOGIN, "LOGIN"),
    ],
)
def test_plan_auth_table(pol, mechanisms, tls_active: bool, expected, mechanism) -> None:
    plan = plan_auth(pol, auth_mechanisms=mechanisms, tls_active=tls_active)
    assert plan.kind is expected
    assert plan.mechanism == mechanism
    assert plan.refused == (expected is AuthKind.REFUSE)
    assert PASSWORD not in plan.reason


@pytest.mark.parametrize(
    ("mechanisms", "tls_active", "message"),
    [
        ({"PLAIN"}, False, "only sent over TLS"),
        ({"CRAM-MD5"}, True, "none of the AUTH mechanisms this mailer supports (PLAIN, LOGIN)"),
    ],
)
def test_auth_refusals_say_why(mechanisms, tls_active: bool, message: str) -> None:
    assert (
        message in plan_auth(WITH_CREDS, auth_mechanisms=mechanisms, tls_active=tls_active).reason
    )


@pytest.mark.parametrize(
    ("cls", "kind", "reason"),
    [
        (StartTlsAction, StartTlsKind.REFUSE, ""),
        (StartTlsAction, StartTlsKind.UPGRADE, "because"),
        (AuthPlan, AuthKind.REFUSE, ""),
        (AuthPlan, AuthKind.PLAIN, "because"),
    ],
)
def test_a_reason_goes_with_a_refusal_and_only_with_one(cls, kind, reason: str) -> None:
    with pytest.raises(ValueError, match="a reason goes with a refusal"):
        cls(kind, reason)


# --- the property: nothing sensitive in plaintext unless plaintext was explicitly allowed ---------

policies: st.SearchStrategy[dict[str, Any]] = st.builds(
    dict,
    mode=st.sampled_from(["starttls", "tls", "none"]),
    allow_plaintext=st.booleans(),
    environment=st.sampled_from(["development", "staging", "production", "PRODUCTION", "test"]),
    credentials=st.booleans(),
)


def build(spec: dict[str, Any]) -> SmtpSecurityPolicy:
    creds = CREDS if spec.pop("credentials") else {}
    try:
        return policy(**spec, **creds)
    except ConfigurationError:
        reject()


@given(
    spec=policies,
    starttls_advertised=st.booleans(),
    implicit_tls=st.booleans(),
    mechanisms_before=st.frozensets(st.sampled_from(["PLAIN", "LOGIN", "CRAM-MD5", "login"])),
    mechanisms_after=st.frozensets(st.sampled_from(["PLAIN", "LOGIN", "CRAM-MD5", "login"])),
)
def test_no_auth_or_message_command_in_plaintext_unless_explicitly_allowed(
    spec, starttls_advertised, implicit_tls, mechanisms_before, mechanisms_after
) -> None:
    pol = build(spec)
    sent = simulate_session(
        pol, starttls_advertised, implicit_tls, mechanisms_before, mechanisms_after
    )
    plaintext_allowed = (
        pol.mode is SmtpTlsMode.NONE
        and pol.allow_plaintext
        and pol.environment.strip().lower() != "production"
    )
    in_clear = [command for command, encrypted in sent if not encrypted]
    if in_clear:
        assert plaintext_allowed, (pol, in_clear)
    assert ("AUTH", False) not in sent  # AUTH never in clear, whatever the policy
    if pol.has_credentials and ("MAIL", True) in sent:
        assert any(command == "AUTH" for command, _ in sent)  # configured AUTH is never skipped
    if not pol.has_credentials:
        assert all(command != "AUTH" for command, _ in sent)


def simulate_session(pol, starttls_advertised, implicit_tls, before, after):
    """Drive both plans as the adapter does; return the commands sent and their TLS state."""
    tls = implicit_tls
    action = plan_starttls(pol, starttls_advertised=starttls_advertised, tls_active=tls)
    if action.refused:
        return []
    mechanisms = before
    if action.kind is StartTlsKind.UPGRADE:
        tls, mechanisms = True, after  # RFC 3207: EHLO again, forget the pre-TLS answer
    sent: list[tuple[str, bool]] = []
    auth = plan_auth(pol, auth_mechanisms=mechanisms, tls_active=tls)
    if auth.refused:
        return sent
    if auth.mechanism is not None:
        sent.append(("AUTH", tls))
    sent.extend((command, tls) for command in ("MAIL", "RCPT", "DATA"))
    return sent


# --- describe -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({}, "SMTP security: starttls (strict), auth: none"),
        (CREDS, "SMTP security: starttls (strict), auth: configured"),
        ({"mode": "tls", **CREDS}, "SMTP security: tls (implicit), auth: configured"),
        (
            {**DEV_PLAINTEXT, "environment": "dev"},
            "SMTP security: none (PLAINTEXT, allowed in environment 'dev'), auth: none",
        ),
    ],
)
def test_describe_is_one_line_without_the_password(overrides, line: str) -> None:
    described = describe(policy(**overrides))
    assert described == line
    assert PASSWORD not in described


# --- found by mutation testing (docs/testing.md): refusals are whole sentences -----------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sender": ""}, "sender is required: set the address mail is sent from"),
        ({"environment": " "}, "environment must name the deployment, e.g. 'production'"),
        (
            {**DEV_PLAINTEXT, "environment": "production"},
            (
                "mode 'none' (plaintext SMTP) is refused in environment 'production': production mail"
                " must use 'starttls' or 'tls', whatever allow_plaintext says"
            ),
        ),
        (
            {"mode": "none"},
            (
                "mode 'none' (plaintext SMTP) needs allow_plaintext=True, an explicit opt-in for a"
                " local development server"
            ),
        ),
        (
            {**DEV_PLAINTEXT, **CREDS},
            "username/password with mode 'none' is refused: AUTH is only sent over TLS",
        ),
        # The password is checked even when the username is missing: a NUL is refused first.
        ({"password": "a\0b"}, "password must be non-empty text without NUL characters"),
    ],
)
def test_policy_refusals_are_whole_sentences(overrides, message) -> None:
    with pytest.raises(ConfigurationError) as refused:
        policy(**overrides)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        (
            "starttls",
            (
                "the server did not advertise STARTTLS and mode 'starttls' is strict: no plaintext"
                " fallback (a stripped advertisement is how a downgrade attack looks)"
            ),
        ),
        (
            "tls",
            "mode 'tls' expects implicit TLS from the first byte, but the connection is plaintext",
        ),
    ],
)
def test_starttls_refusals_are_whole_sentences(mode: str, message: str) -> None:
    action = plan_starttls(POLICIES[mode], starttls_advertised=False, tls_active=False)
    assert action.reason == message


@pytest.mark.parametrize(
    ("mechanisms", "tls_active", "message"),
    [
        ({"PLAIN"}, False, "SMTP credentials are only sent over TLS, and TLS is off"),
        (
            {"CRAM-MD5"},
            True,
            (
                "the server offers none of the AUTH mechanisms this mailer supports (PLAIN, LOGIN),"
                " and credentials are configured"
            ),
        ),
    ],
)
def test_auth_refusals_are_whole_sentences(mechanisms, tls_active: bool, message: str) -> None:
    plan = plan_auth(WITH_CREDS, auth_mechanisms=mechanisms, tls_active=tls_active)
    assert plan.reason == message
