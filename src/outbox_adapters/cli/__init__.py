"""``outbox``: the operator's command line (docs/reference/cli.md).

Every option has an ``OUTBOX_*`` environment twin (shown in ``--help``), so a container can be
configured by environment alone. Exit codes: 0 done; 1 the work found a problem (schema
incomplete, a requeue refused, the database unreachable, demo invariants broken, a relay
``--drain`` that left due events unpublished or any ``--drain`` with a mark not recorded,
``top --once`` with its ``--broker`` unreachable); 2 the command
line or configuration can't work, said in one line that names the setting. Secrets are never
printed: no database URL, no SMTP password (``SmtpSettings.describe()``), no payload values; every
error line, ``outbox config show`` and both log formats go through the library's one redaction
(:mod:`outbox_core.redaction`) as a second line of defence.

One module per command family, each a plain click command or group that :func:`main` loads only
when it is run (:data:`COMMANDS`), so a command's technology is imported only then: ``outbox
schema sql`` needs no SMTP, HTTP or broker library, and a command whose extra is missing exits 2
with one line naming the extra to install (:mod:`outbox_adapters.extras`). The modules: :mod:`.schema`, :mod:`.enqueue`, :mod:`.worker`, :mod:`.operator` (get, failed,
requeue, stats), :mod:`.keys`, :mod:`.demo` (the command only; the demo lives in
:mod:`outbox_adapters.demo`), :mod:`.endpoints` (webhook endpoints), :mod:`.webhooks`
(``enqueue webhook``, ``deliveries``, ``replay``), :mod:`.feed` (``feed prune``) and :mod:`.prune`
(``prune``: retention for every table) , :mod:`.health` (``healthcheck``) and :mod:`.top` (``top``); :mod:`.config` reads ``--config FILE`` and shows the effective settings. What they
share (options, errors and exit codes, the database helpers) is in :mod:`.options`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any, Final

import click

from outbox_adapters import __version__
from outbox_adapters.extras import MissingExtra, missing_extra
from outbox_core.redaction import redact_text

__all__ = ["APP_KEY", "COMMANDS", "SUBCOMMANDS", "main"]

#: Where ``--app`` leaves the loaded application in ``click.Context.meta``.
APP_KEY: Final = "outbox.app"

#: Every command: its module, the click object's name there, and its one-line help (for
#: ``outbox --help``, which loads no command; tests/unit/test_cli_lazy.py keeps it true).
COMMANDS: Final[Mapping[str, tuple[str, str, str]]] = {
    "schema": ("schema", "schema_group", "Print, apply or verify the outbox tables' DDL."),
    "publish": (
        "events",
        "publish_command",
        "Write one event into the event outbox (the relay publishes it).",
    ),
    "relay": (
        "events",
        "relay_command",
        "Publish the event outbox to the broker, in key order, until SIGTERM (or --drain).",
    ),
    "consume": (
        "consume",
        "consume_command",
        "Consume TOPIC into one channel until SIGTERM (or, with --drain, until nothing arrives).",
    ),
    "dlq": (
        "events",
        "dlq_group",
        "Dead letters: the events a consumer channel parked (list without consuming; redrive).",
    ),
    "enqueue": (
        "enqueue",
        "enqueue_group",
        "Write one message to the outbox (an operator's smoke test).",
    ),
    "worker": (
        "worker",
        "worker_command",
        "Work one lane until SIGTERM/SIGINT (or, with --drain, until none is due).",
    ),
    "get": (
        "operator",
        "get_command",
        "One row: its columns and its payload, secret values masked.",
    ),
    "failed": (
        "failed",
        "failed_command",
        (
            "Failed rows grouped by error class (or exact error), then the newest ones by id (never"
            " payload values)."
        ),
    ),
    "requeue": (
        "operator",
        "requeue_command",
        "Put failed rows back to pending (attempts reset, audited).",
    ),
    "stats": (
        "operator",
        "stats_command",
        "Rows per lane and status, and the marks the fence refused (stale marks) per lane.",
    ),
    "prune": (
        "prune",
        "prune_command",
        "Delete delivered rows older than --older-than, in short batches; pending and failed stay.",
    ),
    "healthcheck": (
        "health",
        "healthcheck_command",
        "Exit 0 if this host's worker of --lane is alive, 1 (naming what failed) if not.",
    ),
    "top": (
        "top",
        "top_command",
        (
            "Every lane's backlog, flow, failures and leader, refreshed live (Ctrl-C ends it); with"
            " --broker, every consumer channel's lag too."
        ),
    ),
    "keys": (
        "keys",
        "keys_group",
        "Keys of sealed payload fields: generate one, re-seal unsent rows under the active key.",
    ),
    "demo": (
        "demo",
        "demo_command",
        "Run every lane on embedded servers, then check the invariants.",
    ),
    "endpoints": (
        "endpoints",
        "endpoints_group",
        "Webhook endpoints: add, list, show, disable, enable, rotate-secret, public-key.",
    ),
    "deliveries": (
        "webhooks",
        "deliveries_command",
        "Webhook deliveries grouped by status and error, with the last HTTP status and response.",
    ),
    "replay": (
        "webhooks",
        "replay_command",
        (
            "Replay an event (to --endpoint, or to every endpoint of its type), or with --failed the"
            " failed deliveries of a time range."
        ),
    ),
    "feed": ("feed", "feed_group", "The in-app feed's maintenance."),
    "config": (
        "config",
        "config_group",
        "The effective configuration (flags aside): environment, --config file, defaults.",
    ),
}

#: Subcommands of a group that live in another command family's module (loaded the same way).
SUBCOMMANDS: Final[Mapping[str, Mapping[str, tuple[str, str, str]]]] = {
    "enqueue": {
        "webhook": (
            "webhooks",
            "enqueue_webhook_command",
            "Enqueue one webhook event; prints its webhook outbox row id.",
        ),
    },
}


def _missing(name: str, exc: MissingExtra, help_text: str) -> click.Command:
    """A stand-in for a command whose extra is missing: ``--help`` or a run says so and exits 2."""

    def refuse() -> None:
        click.echo(f"Error: outbox {name}: {exc}", err=True)
        raise SystemExit(2)

    return click.Command(
        name,
        callback=refuse,
        help=help_text,
        short_help=help_text,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


def _load(name: str, entry: tuple[str, str, str]) -> click.Command:
    module, attribute, help_text = entry
    try:
        command: click.Command = getattr(
            importlib.import_module(f"outbox_adapters.cli.{module}"), attribute
        )
    except ImportError as exc:
        found = missing_extra(exc, f"`outbox {name}`")
        if not isinstance(found, MissingExtra):
            raise
        return _missing(name, found, help_text)
    if isinstance(command, click.Group):
        for sub, sub_entry in SUBCOMMANDS.get(name, {}).items():
            if sub not in command.commands:
                command.add_command(_load(f"{name} {sub}", sub_entry), sub)
    return command


class LazyGroup(click.Group):
    """``outbox``: lists :data:`COMMANDS` without importing them; loads one when it runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        del ctx
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        del ctx
        entry = COMMANDS.get(cmd_name)
        return None if entry is None else _load(cmd_name, entry)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        del ctx
        rows = [(name, entry[2]) for name, entry in COMMANDS.items()]
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            formatter.write_dl(
                [
                    (name, click.Command(name, short_help=text).get_short_help_str(limit))
                    for name, text in rows
                ]
            )

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,  # noqa: ANN401 - click's
    ) -> click.Context:
        """``outbox``'s own options (``--config``, ``--app``): their errors redacted as well."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            vars(exc)["message"] = redact_text(exc.message)  # click types it Final; set once here
            raise

    def invoke(self, ctx: click.Context) -> Any:  # noqa: ANN401 - click's
        """A technology asked for at run time whose extra is missing: one line, exit 2. Every
        error line (a refused setting, a failure, a usage error) goes through the one redaction
        (:func:`outbox_core.redaction.redact_text`): it may quote a value that holds a secret."""
        try:
            return super().invoke(ctx)
        except MissingExtra as exc:
            click.echo(f"Error: {redact_text(str(exc))}", err=True)
            ctx.exit(2)
        except click.ClickException as exc:
            vars(exc)["message"] = redact_text(exc.message)  # click types it Final; set once here
            raise


def _read_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
    """``--config``: the TOML file becomes every command's defaults (cli/config.py)."""
    if path and not ctx.resilient_parsing:
        from outbox_adapters.cli.config import default_map  # noqa: PLC0415 - loads every command

        assert isinstance(ctx.command, click.Group)  # noqa: S101 - outbox's main is a group
        ctx.default_map = default_map(path, ctx.command)
    return path


def _read_app(ctx: click.Context, _param: click.Parameter, spec: str | None) -> str | None:
    """``--app package.module:attribute``: the host's :class:`~outbox_adapters.app.Outbox`, which
    ``outbox worker`` runs instead of the built-in description."""
    if spec and not ctx.resilient_parsing:
        from outbox_adapters.app import load_app  # noqa: PLC0415 - only with --app
        from outbox_core.errors import ConfigurationError  # noqa: PLC0415

        try:
            ctx.meta[APP_KEY] = load_app(spec)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param_hint="'--app' / OUTBOX_APP") from None
    return spec


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="outbox")
@click.option(
    "--app",
    envvar="OUTBOX_APP",
    show_envvar=True,
    metavar="MODULE:ATTR",
    expose_value=False,
    callback=_read_app,
    help="The host's outbox application object (an outbox_adapters.app.Outbox, or a function"
    " returning one), e.g. myapp.outbox:outbox: its lanes, hooks and settings.",
)
@click.option(
    "--config",
    "config_file",
    envvar="OUTBOX_CONFIG",
    show_envvar=True,
    metavar="FILE",
    is_eager=True,
    expose_value=False,
    callback=_read_config,
    help="A TOML file of settings: a table per command, top-level keys for every command"
    " (flags and OUTBOX_* variables win over it).",
)
@click.option(
    "--log-level",
    envvar="OUTBOX_LOG_LEVEL",
    show_envvar=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="warning",
    show_default=True,
    help="Log level of the library's logs on stderr.",
)
@click.option(
    "--log-format",
    envvar="OUTBOX_LOG_FORMAT",
    show_envvar=True,
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
    help="Logs as text lines, or as one JSON object per line (level, logger, message, lane, trace"
    " and span ids; secrets masked).",
)
def main(log_level: str, log_format: str) -> None:
    """leased-outbox: operate the transactional outbox (schema, enqueue, worker, webhooks, events,
    requeue, demo)."""
    root = logging.getLogger()
    if root.handlers:  # a host (or a test runner) that configured logging keeps its setup
        return
    from outbox_adapters.telemetry.logs import TextFormatter, json_logging  # noqa: PLC0415

    if log_format.lower() == "json":
        json_logging(log_level.upper())
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(TextFormatter())
        root.addHandler(handler)
    root.setLevel(log_level.upper())
