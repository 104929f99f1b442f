"""``outbox``: the operator's command line (catalogue A12).

Every option has an ``OUTBOX_*`` environment twin (shown in ``--help``), so a container can be
configured by environment alone. Exit codes: 0 done; 1 the work found a problem (schema
incomplete, a requeue refused, the database unreachable, demo invariants broken); 2 the command
line or configuration can't work, said in one line that names the setting. Secrets are never
printed: no database URL, no SMTP password (``SmtpSettings.describe()``), no payload values.

One module per command family, each a plain click command or group that this module adds to
:func:`main`: :mod:`.schema`, :mod:`.enqueue`, :mod:`.worker`, :mod:`.operator` (get, failed,
requeue, stats), :mod:`.keys`, :mod:`.demo` (the command only; the demo lives in
:mod:`outbox_adapters.demo`), :mod:`.endpoints` (webhook endpoints), :mod:`.webhooks`
(``enqueue webhook``, ``deliveries``, ``replay``), :mod:`.feed` (``feed prune``) and :mod:`.prune`
(``prune``: retention for every table) , :mod:`.health` (``healthcheck``) and :mod:`.top` (``top``); :mod:`.config` reads ``--config FILE`` and shows the effective settings. What they
share (options, errors and exit codes, the database helpers) is in :mod:`.options`.
"""

from __future__ import annotations

import logging

import click

from outbox_adapters.cli.config import config_group, default_map
from outbox_adapters.cli.consume import consume_command
from outbox_adapters.cli.demo import demo_command
from outbox_adapters.cli.endpoints import endpoints_group
from outbox_adapters.cli.enqueue import enqueue_group
from outbox_adapters.cli.events import dlq_group, publish_command, relay_command
from outbox_adapters.cli.failed import failed_command
from outbox_adapters.cli.feed import feed_group
from outbox_adapters.cli.health import healthcheck_command
from outbox_adapters.cli.keys import keys_group
from outbox_adapters.cli.operator import (
    get_command,
    requeue_command,
    stats_command,
)
from outbox_adapters.cli.options import option
from outbox_adapters.cli.prune import prune_command
from outbox_adapters.cli.schema import schema_group
from outbox_adapters.cli.top import top_command
from outbox_adapters.cli.webhooks import deliveries_command, enqueue_webhook_command, replay_command
from outbox_adapters.cli.worker import worker_command
from outbox_adapters.telemetry.logs import json_logging

__all__ = ["main"]


def _read_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
    """``--config``: the TOML file becomes every command's defaults (cli/config.py)."""
    if path and not ctx.resilient_parsing:
        assert isinstance(ctx.command, click.Group)  # noqa: S101 - outbox's main is a group
        ctx.default_map = default_map(path, ctx.command)
    return path


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@option(
    "--config",
    "config_file",
    env="OUTBOX_CONFIG",
    metavar="FILE",
    is_eager=True,
    expose_value=False,
    callback=_read_config,
    help="A TOML file of settings: a table per command, top-level keys for every command"
    " (flags and OUTBOX_* variables win over it).",
)
@option(
    "--log-level",
    env="OUTBOX_LOG_LEVEL",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="warning",
    show_default=True,
    help="Log level of the library's logs on stderr.",
)
@option(
    "--log-format",
    env="OUTBOX_LOG_FORMAT",
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
    if log_format.lower() == "json":
        json_logging(log_level.upper())
        root.setLevel(log_level.upper())
    else:
        logging.basicConfig(
            level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )


for _command in (
    schema_group,
    publish_command,
    relay_command,
    consume_command,
    dlq_group,
    enqueue_group,
    worker_command,
    get_command,
    failed_command,
    requeue_command,
    stats_command,
    prune_command,
    healthcheck_command,
    top_command,
    keys_group,
    demo_command,
    endpoints_group,
    deliveries_command,
    replay_command,
    feed_group,
    config_group,
):
    main.add_command(_command)
enqueue_group.add_command(enqueue_webhook_command)
