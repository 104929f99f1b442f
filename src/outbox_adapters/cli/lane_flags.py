"""From a command's options to the application and the lane description the runner runs.

Without ``--app`` the built-in description of ``--lane`` is used (:func:`builtin_lane`) and every
option applies, defaults included. With ``--app`` the application's own description is used and
only the options given (on the command line, through ``OUTBOX_*`` or ``--config``) replace what it
says. Each refusal names its option.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypeVar

import attrs
import click
from click.core import ParameterSource

from outbox_adapters.app import (
    EmailChannelLane,
    EmailLane,
    InAppChannelLane,
    Lane,
    Outbox,
    RelayLane,
    WebhookLane,
)
from outbox_adapters.cli import APP_KEY
from outbox_adapters.cli.options import SettingError, encryptor_from, setting_error
from outbox_adapters.cli.worker_settings import check_lane_options, email_timing, smtp_settings
from outbox_adapters.lanes.email_channel import (
    EMAIL_CHANNEL_LANE,
    email_channel_disabled_warning,
)
from outbox_adapters.lanes.inapp import INAPP_CHANNEL_GROUP
from outbox_adapters.lanes.webhooks import WEBHOOK_LANE
from outbox_adapters.postgres.events import RELAY_LANE
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.mail import validate_address

L = TypeVar("L")

__all__ = ["BUILTIN_LANES", "Flags", "builtin_lane", "chosen", "with_flags"]

#: The lanes ``--lane`` knows without ``--app`` (any other name is an e-mail lane of that name).
BUILTIN_LANES: Mapping[str, type[Lane]] = {
    WEBHOOK_LANE: WebhookLane,
    RELAY_LANE: RelayLane,
    EMAIL_CHANNEL_LANE: EmailChannelLane,
    INAPP_CHANNEL_GROUP: InAppChannelLane,
}


def builtin_lane(name: str) -> Lane:
    """The built-in description of the lane ``name``."""
    kind = BUILTIN_LANES.get(name)
    if kind is not None:
        return kind()
    return EmailLane(name=name)


#: The options that set a field of the application itself (not of one lane).
_APP_OPTIONS = (
    "database_url",
    "broker",
    "sender",
    "environment",
    "leader",
    "listen",
    "poll_interval",
)


@attrs.frozen
class Flags:
    """The options of the running command, and whether each one replaces the app's value."""

    ctx: click.Context
    app: Outbox | None

    def given(self, name: str) -> bool:
        """Whether ``name`` is one of the command's options and says something: any value
        without ``--app``; with it, only one the operator set (not the option's default)."""
        if name not in self.ctx.params:
            return False
        source = self.ctx.get_parameter_source(name)
        return self.app is None or source not in {ParameterSource.DEFAULT, None}

    def __getitem__(self, name: str) -> Any:  # noqa: ANN401 - an option's value
        return self.ctx.params[name]


def _lane_of(ctx: click.Context, name: str, *, fallback: bool) -> tuple[Outbox | None, Lane]:
    app: Outbox | None = ctx.meta.get(APP_KEY)
    try:
        if app is None or (fallback and name not in {lane.name for lane in app.lanes}):
            return app, builtin_lane(name)
        return app, app.lane(name)
    except ConfigurationError as exc:
        raise setting_error("--lane", "OUTBOX_LANE", str(exc)) from None


def chosen(
    ctx: click.Context, name: str, *, refuse_others: bool = False, builtin_fallback: bool = False
) -> tuple[Outbox, Lane]:
    """The application (``--app``'s, or one made of the options) and its lane ``name``, each
    with the options given applied; SettingError naming an option that is wrong. With
    ``refuse_others`` an option of the command the lane does not take is refused, naming it and
    the lane (one set through the environment or ``--config`` is reported as unused). With
    ``builtin_fallback`` (the commands of one lane: ``relay``, ``consume``) an app that does not
    describe the lane runs the built-in one with the app's settings."""
    app, lane = _lane_of(ctx, name, fallback=builtin_fallback)
    if refuse_others:
        check_lane_options(ctx, name, [p for p in ctx.params if p not in lane.options])
    flags = Flags(ctx, app)
    lane = with_flags(lane, flags)
    return _app_with_flags(app or Outbox(lanes=(lane,)), lane, flags), lane


def _app_with_flags(app: Outbox, lane: Lane, flags: Flags) -> Outbox:
    changes: dict[str, Any] = {
        name: flags[name]
        for name in _APP_OPTIONS
        if flags.given(name) and (flags[name] is not None or name != "database_url")
    }
    if flags.given("encryption_keys") or flags.given("encryption_keys_file"):
        encryptor = encryptor_from(
            flags["encryption_keys"] if "encryption_keys" in flags.ctx.params else None,
            flags["encryption_keys_file"] if "encryption_keys_file" in flags.ctx.params else None,
        )
        if encryptor is not None:
            changes["encryptor"] = encryptor
    app = attrs.evolve(app, **changes)
    mail = lane if isinstance(lane, EmailLane) else getattr(lane, "mail", None)
    if isinstance(mail, EmailLane):
        app = _smtp_from_flags(app, mail, flags)
    if app.database_url is None:
        raise SettingError("Missing option '--database-url' (OUTBOX_DATABASE_URL).")
    return app


def _smtp_from_flags(app: Outbox, mail: EmailLane, flags: Flags) -> Outbox:
    smtp_url = flags["smtp_url"] if flags.given("smtp_url") else None
    if smtp_url is None and app.smtp is None and mail.mailer is None:
        if mail.name == EMAIL_CHANNEL_LANE:
            click.echo(email_channel_disabled_warning(), err=True)
        raise SettingError(
            f"--smtp-url (OUTBOX_SMTP_URL) is required for the e-mail lane {mail.name!r}"
        )
    sender = app.sender_address()
    if sender is None:
        raise SettingError(
            f"--sender (OUTBOX_SENDER) is required for the e-mail lane {mail.name!r}"
        )
    if flags.given("sender"):
        try:
            validate_address(sender)
        except InvalidMessage as exc:
            raise setting_error("--sender", "OUTBOX_SENDER", str(exc)) from None
    if smtp_url is None:
        return app
    smtp = smtp_settings(
        smtp_url,
        tls=flags["smtp_tls"],
        sender=sender,
        environment=app.environment,
        allow_plaintext=flags["allow_plaintext"],
        ca_file=flags["smtp_ca_file"],
        sessions=flags["smtp_sessions"],
    )
    return attrs.evolve(app, smtp=smtp)


@functools.singledispatch
def with_flags(lane: Lane, flags: Flags) -> Lane:
    """``lane`` with the options given for it applied (a host's own kind of lane: as it is)."""
    del flags
    return lane


def _evolve(lane: L, what: str, **changes: Any) -> L:  # noqa: ANN401 - the fields' values
    try:
        return attrs.evolve(lane, **changes)  # type: ignore[misc]  # every description is attrs
    except (ConfigurationError, TypeError, ValueError) as exc:
        raise SettingError(f"{what}: {exc}") from None


@with_flags.register
def _email(lane: EmailLane, flags: Flags) -> EmailLane:
    changes: dict[str, Any] = {}
    if any(flags.given(name) for name in ("batch_size", "batch_timeout", "budgets")):
        changes["timing"] = email_timing(
            flags["budgets"], flags["batch_size"], flags["batch_timeout"]
        )
    for name in ("rows_in_flight", "group_marks", "sender_name"):
        if flags.given(name) and flags[name] is not None:
            changes[name] = flags[name]
    lane = _evolve(lane, "--rows-in-flight / --group-marks", **changes)
    lane = _with_caps(lane, flags, ("max_per_domain", "max_per_second"))
    probe = Outbox(lanes=(lane,))
    # Each step can refuse only its own option: the rows in flight, then the grouped marks.
    try:
        attrs.evolve(lane, group_marks=False).config(probe)
    except ConfigurationError as exc:
        raise setting_error("--rows-in-flight", "OUTBOX_ROWS_IN_FLIGHT", str(exc)) from None
    try:
        lane.config(probe)
    except ConfigurationError as exc:
        raise setting_error("--group-marks", "OUTBOX_GROUP_MARKS", str(exc)) from None
    return lane


#: The send-cap options and their environment variables.
_CAP_OPTIONS: Mapping[str, tuple[str, str]] = {
    "max_per_domain": ("--max-per-domain", "OUTBOX_MAX_PER_DOMAIN"),
    "max_per_second": ("--max-per-second", "OUTBOX_MAX_PER_SECOND"),
}


def _with_caps(lane: L, flags: Flags, names: tuple[str, ...]) -> L:
    """``lane`` with the send caps given among ``names``, each refusal naming its option."""
    for name in names:
        if flags.given(name) and flags[name] is not None:
            try:
                lane = attrs.evolve(lane, **{name: flags[name]})  # type: ignore[misc]
            except ConfigurationError:
                raise setting_error(
                    *_CAP_OPTIONS[name], f"a whole number of at least 1; got {flags[name]!r}"
                ) from None
    return lane


def _topics(flags: Flags) -> tuple[str, ...] | None:
    if flags.given("topics"):
        return tuple(flags["topics"])
    if flags.given("topic"):
        return (flags["topic"],)
    return None


def _one_topic(flags: Flags, lane: str) -> dict[str, str]:
    topics = _topics(flags)
    if topics is None:
        return {}
    if len(topics) != 1:
        raise setting_error("--topic", "OUTBOX_TOPIC", f"the lane {lane!r} consumes one topic")
    return {"topic": topics[0]}


@with_flags.register
def _channel(lane: EmailChannelLane, flags: Flags) -> EmailChannelLane:
    changes: dict[str, Any] = _one_topic(flags, lane.name)
    for name in ("public_url", "platform_owner"):
        if flags.given(name) and flags[name] is not None:
            changes[name] = flags[name]
    mail = _with_caps(lane.mail, flags, ("max_per_domain", "max_per_second"))
    if flags.given("sender_name") and flags["sender_name"] is not None:
        mail = attrs.evolve(mail, sender_name=flags["sender_name"])
    if mail is not lane.mail:
        changes["mail"] = mail
    return _evolve(lane, "--public-url / --platform-owner", **changes)


@with_flags.register
def _inapp(lane: InAppChannelLane, flags: Flags) -> InAppChannelLane:
    return _evolve(lane, "--topic", **_one_topic(flags, lane.name))


@with_flags.register
def _relay(lane: RelayLane, flags: Flags) -> RelayLane:
    changes: dict[str, Any] = {}
    topics = _topics(flags)
    if topics is not None:
        changes["topics"] = topics
    if flags.given("max_age_days"):
        changes["max_age"] = timedelta(days=flags["max_age_days"])
    return _evolve(lane, "--topic / --max-age-days", **changes)


@with_flags.register
def _webhooks(lane: WebhookLane, flags: Flags) -> WebhookLane:
    changes: dict[str, Any] = {
        name: flags[name] for name in ("allow", "allow_http") if flags.given(name)
    }
    lane = _evolve(lane, "--allow-destination / --allow-http", **changes)
    return _with_caps(lane, flags, ("max_per_second",))
