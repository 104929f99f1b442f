"""``outbox healthcheck``: is this host's worker of a lane alive? For a container's liveness probe.

::

    outbox healthcheck --lane email [--host HOST] [--max-skew 2s] [--no-leader] [--json]

Cheap, and it never depends on SMTP, a webhook receiver or a broker (a worker whose peer is down is
healthy and retrying; restarting it helps nothing). The checks, in order:

- ``database``: reachable within 3 s (one connection, three short queries);
- ``clock``: this host's clock within ``--max-skew`` of the database's;
- ``heartbeat``: a worker of the lane on this host (``--host``, default this host's name) beat
  within the bound it stated itself (its lane's batch timeout, poll interval and beat interval);
- ``leader`` (unless ``--no-leader``): the lane has a leader whose term runs.

Exit codes: **0** every check passed; **1** a check failed (each printed, or in the JSON);
**2** the command line or configuration is wrong (one line naming the setting).
"""

from __future__ import annotations

import json
import socket
import sys

import click
import psycopg

from outbox_adapters.cli.options import database_url, json_option, option, setting_error
from outbox_adapters.cli.prune import parse_duration
from outbox_adapters.postgres.errors import as_unavailable
from outbox_adapters.postgres.health import read_health
from outbox_core.health import DEFAULT_MAX_SKEW, Check, assess, healthy

__all__ = ["healthcheck_command"]


@click.command("healthcheck")
@database_url()
@option("--lane", env="OUTBOX_LANE", required=True, help="The lane whose worker is checked.")
@option(
    "--host",
    env="OUTBOX_HEALTH_HOST",
    default=None,
    help="Whose heartbeat counts (default: this host's name, socket.gethostname()).",
)
@option(
    "--max-skew",
    env="OUTBOX_HEALTH_MAX_SKEW",
    default=f"{int(DEFAULT_MAX_SKEW.total_seconds())}s",
    show_default=True,
    metavar="DURATION",
    help="How far this host's clock may be from the database's.",
)
@option(
    "--leader/--no-leader",
    env="OUTBOX_LEADER",
    default=True,
    show_default=True,
    help="Require a live leader on the lane (as `outbox worker --leader` runs it).",
)
@json_option
def healthcheck_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    lane: str,
    host: str | None,
    max_skew: str,
    leader: bool,  # noqa: FBT001
    as_json: bool,  # noqa: FBT001
) -> None:
    """Exit 0 if this host's worker of --lane is alive, 1 (naming what failed) if not."""
    try:
        bound = parse_duration(max_skew)
    except ValueError as exc:
        raise setting_error("--max-skew", "OUTBOX_HEALTH_MAX_SKEW", str(exc)) from None
    who = host or socket.gethostname()
    try:
        reading = read_health(database_url, lane, who)
    except (psycopg.Error, OSError) as exc:
        checks = [
            Check("database", ok=False, detail=f"unreachable: {as_unavailable(exc, 'healthcheck')}")
        ]
    else:
        checks = [Check("database", ok=True, detail="reachable")]
        checks += assess(
            lane=lane,
            host=who,
            skew=reading.skew,
            beats=reading.beats,
            leader=reading.leader,
            max_skew=bound,
            require_leader=leader,
        )
    ok = healthy(checks)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "healthy": ok,
                    "lane": lane,
                    "host": who,
                    "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
                }
            )
        )
    else:
        for check in checks:
            click.echo(f"{'ok  ' if check.ok else 'FAIL'} {check.name:<9} {check.detail}")
    sys.exit(0 if ok else 1)
