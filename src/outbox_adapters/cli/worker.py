"""``outbox worker --lane NAME``: work one lane until SIGTERM/SIGINT (or ``--drain``).

Any lane: an e-mail lane, the webhook lane, the event relay, a consumer channel, or (with
``--app``) one of the application's own lanes, all through the one runner. An option the lane
does not take is refused naming the lane; every setting is checked before the first connection
(a broken one exits 2 naming it); then the worker prints what it will do (timing, the duplicate
bound of ``--rows-in-flight``, the relay and its sessions, the keys, how it wakes).
"""

from __future__ import annotations

import click

from outbox_adapters.cli.lane_flags import BUILTIN_LANES, chosen
from outbox_adapters.cli.lane_options import (
    broker_option,
    max_age_option,
    platform_owner_option,
    public_url_option,
    topics_option,
)
from outbox_adapters.cli.lane_run import start_lane
from outbox_adapters.cli.options import (
    allow_options,
    database_url,
    encryption_keys,
    lane_option,
    option,
)
from outbox_adapters.cli.telemetry import metrics_options
from outbox_adapters.cli.wakeup import listen_option
from outbox_adapters.cli.worker_settings import smtp_options
from outbox_adapters.lanes.email import EMAIL_LANE
from outbox_core.timing import EmailTiming

__all__ = ["worker_command"]


@click.command("worker")
@metrics_options
@database_url(required=False)
@smtp_options
@option("--drain", env="OUTBOX_DRAIN", is_flag=True, help="Exit once a claim finds nothing due.")
@option(
    "--batch-size",
    env="OUTBOX_BATCH_SIZE",
    type=int,
    default=5,
    show_default=True,
    help="Rows per claim.",
)
@option(
    "--batch-timeout",
    env="OUTBOX_BATCH_TIMEOUT",
    type=float,
    metavar="SECONDS",
    help="Time for one batch [default: batch size x per-row budget].",
)
@option(
    "--rows-in-flight",
    env="OUTBOX_ROWS_IN_FLIGHT",
    type=int,
    default=1,
    show_default=True,
    metavar="N",
    help="Rows of a batch sent at the same time (1 to --batch-size): a crash can duplicate at"
    " most N rows. 1 is the strict mode.",
)
@option(
    "--group-marks/--no-group-marks",
    env="OUTBOX_GROUP_MARKS",
    default=False,
    show_default=True,
    help="Record the rows in flight with one statement per window of N rows (needs"
    " --rows-in-flight 2 or more): the next window starts only once it is recorded, so the"
    " duplicate bound stays N rows per crash.",
)
@option(
    "--max-per-domain",
    env="OUTBOX_MAX_PER_DOMAIN",
    type=int,
    metavar="N",
    help="E-mail lanes: most sends in flight to one recipient domain at a time, in this process"
    " [default: uncapped].",
)
@option(
    "--max-per-second",
    env="OUTBOX_MAX_PER_SECOND",
    type=int,
    metavar="N",
    help="E-mail and webhook lanes: most sends started per second by the lane, in this process"
    " [default: uncapped].",
)
@option(
    "--poll-interval",
    env="OUTBOX_POLL_INTERVAL",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Sleep after a claim that found less than a batch.",
)
@listen_option
@option(
    "--budget",
    "budgets",
    env="OUTBOX_BUDGET",
    multiple=True,
    metavar="STEP=SECONDS",
    help=f"Override a step budget or the lease grace (repeat): {', '.join(EmailTiming.override_names())}.",
)
@lane_option(
    EMAIL_LANE,
    "Lane to work: an e-mail lane (any name), or"
    f" {', '.join(repr(name) for name in BUILTIN_LANES)}; with --app, one of the app's lanes.",
)
@option(
    "--leader/--no-leader",
    env="OUTBOX_LEADER",
    default=True,
    show_default=True,
    help="Hold the lane's leader lease (one worker per lane across replicas).",
)
@allow_options
@encryption_keys()
@broker_option(required=False)
@topics_option
@max_age_option
@public_url_option
@platform_owner_option
def worker_command(**_options: object) -> None:
    """Work one lane until SIGTERM/SIGINT (or, with --drain, until none is due)."""
    ctx = click.get_current_context()
    app, lane = chosen(ctx, ctx.params["lane"], refuse_others=True)
    start_lane(app, lane, drain=ctx.params["drain"])
