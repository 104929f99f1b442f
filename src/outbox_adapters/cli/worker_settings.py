"""The e-mail worker's settings from its options, each refusal naming its option (``outbox worker``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import click
from click.core import ParameterSource

from outbox_adapters.cli.options import SettingError, option, setting_error
from outbox_adapters.extras import missing_extra
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.mail import validate_address
from outbox_core.timing import EmailTiming

if TYPE_CHECKING:
    # The smtp extra is imported when the command runs, so `outbox schema sql` works without it.
    from outbox_adapters.smtp import SmtpSettings

__all__ = [
    "budget_overrides",
    "check_lane_options",
    "email_timing",
    "smtp_options",
    "smtp_settings",
]


def _flag(ctx: click.Context, name: str) -> str:
    for param in ctx.command.params:
        if param.name == name and isinstance(param, click.Option):
            return param.opts[0]
    return name  # pragma: no cover - every name above is one of the command's options


def check_lane_options(ctx: click.Context, lane: str, not_taken: Sequence[str]) -> None:
    """Refuse an option given on the command line that ``lane`` does not take (exit 2, naming the
    option and the lane); one set through its ``OUTBOX_*`` variable or the ``--config`` file, which
    a deployment may share between lanes, is reported on stderr as ignored by this lane."""
    for name in not_taken:
        source = ctx.get_parameter_source(name)
        if source is ParameterSource.COMMANDLINE:
            raise SettingError(f"{_flag(ctx, name)}: the lane {lane!r} does not take this option")
        if source in {ParameterSource.ENVIRONMENT, ParameterSource.DEFAULT_MAP}:
            where = (
                "its environment variable" if source is ParameterSource.ENVIRONMENT else "--config"
            )
            click.echo(
                f"note: {_flag(ctx, name)} (set by {where}) is not used by the lane {lane!r}",
                err=True,
            )


def budget_overrides(pairs: Sequence[str]) -> dict[str, float]:
    budgets: dict[str, float] = {}
    for pair in pairs:
        name, _, seconds = pair.partition("=")
        try:
            budgets[name.strip()] = float(seconds)
        except ValueError:
            names = ", ".join(EmailTiming.override_names())
            raise setting_error(
                "--budget",
                "OUTBOX_BUDGET",
                f"expected STEP=SECONDS with STEP one of {names}; got {pair!r}",
            ) from None
    return budgets


def email_timing(
    budgets: Sequence[str], batch_size: int, batch_timeout: float | None
) -> EmailTiming:
    try:
        return EmailTiming.with_overrides(
            budget_overrides(budgets), batch_size=batch_size, batch_timeout=batch_timeout
        )
    except ConfigurationError as exc:
        raise SettingError(f"timing (--budget, --batch-size, --batch-timeout): {exc}") from None


def smtp_settings(  # noqa: PLR0913 - one parameter per option
    url: str,
    *,
    tls: str,
    sender: str,
    environment: str,
    allow_plaintext: bool,
    ca_file: str | None,
    sessions: int,
) -> SmtpSettings:
    try:
        from outbox_adapters.smtp import SmtpSettings  # noqa: PLC0415 - the smtp extra
    except ImportError as exc:
        raise missing_extra(exc, "sending e-mail") from None
    try:
        validate_address(sender)
    except InvalidMessage as exc:
        raise setting_error("--sender", "OUTBOX_SENDER", str(exc)) from None
    try:
        settings = SmtpSettings.from_url(
            url,
            tls=tls,
            sender=sender,
            environment=environment,
            allow_plaintext=allow_plaintext,
            ca_file=ca_file,
        )
    except ConfigurationError as exc:
        # Each message names its setting (URL, mode and environment, credentials).
        raise SettingError(f"SMTP (--smtp-url, --smtp-tls, --environment): {exc}") from None
    try:
        # evolve re-runs the validators: 1..MAX_SESSIONS_LIMIT, a whole number.
        return attrs.evolve(settings, max_sessions=sessions)
    except ConfigurationError as exc:
        raise setting_error("--smtp-sessions", "OUTBOX_SMTP_SESSIONS", str(exc)) from None


def smtp_options(command: Any) -> Any:  # noqa: ANN401 - a click command
    """The SMTP options of every command that sends e-mail (``worker``, ``consume``), in one place."""
    decorators = [
        option(
            "--smtp-url",
            env="OUTBOX_SMTP_URL",
            metavar="URL",
            help="smtp://[user:pass@]host:port of the relay (e-mail lanes: required).",
        ),
        option(
            "--smtp-tls",
            env="OUTBOX_SMTP_TLS",
            type=click.Choice(["starttls", "tls", "none"], case_sensitive=False),
            default="starttls",
            show_default=True,
            help="starttls: strict upgrade; tls: implicit; none: development only.",
        ),
        option(
            "--sender",
            env="OUTBOX_SENDER",
            metavar="ADDR",
            help="The From address, DMARC-aligned (e-mail lanes: required).",
        ),
        option("--sender-name", env="OUTBOX_SENDER_NAME", help="The From display name."),
        option(
            "--allow-plaintext",
            env="OUTBOX_ALLOW_PLAINTEXT",
            is_flag=True,
            help="Permit --smtp-tls none (never in production).",
        ),
        option(
            "--environment",
            env="OUTBOX_ENVIRONMENT",
            default="development",
            show_default=True,
            help="Deployment name; 'production' refuses plaintext SMTP and webhooks to http:// URLs.",
        ),
        option(
            "--smtp-ca-file",
            env="OUTBOX_SMTP_CA_FILE",
            type=click.Path(exists=True, dir_okay=False),
            help="CA bundle to trust instead of the system store.",
        ),
        option(
            "--smtp-sessions",
            env="OUTBOX_SMTP_SESSIONS",
            type=int,
            # SmtpSettings' own default (DEFAULT_MAX_SESSIONS); a test keeps the two equal.
            default=4,
            show_default=True,
            metavar="N",
            help="Most SMTP sessions open to the relay at once (1 to 64), each reused for later messages.",
        ),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command
