"""``outbox worker``: claim, send and mark e-mail rows until SIGTERM/SIGINT (or ``--drain``).

Every setting is checked before the first connection (a broken one exits 2 naming it); then the
worker prints what it will do: timing, the duplicate bound of ``--rows-in-flight``, the relay and
its sessions, the sealed-field keys, and how it wakes (LISTEN, or polling alone).
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

import attrs
import click

from outbox_adapters.cli.options import (
    Failure,
    SettingError,
    allow_options,
    connection_pool,
    database_errors,
    database_url,
    describe_keys,
    encryption_keys,
    encryptor_from,
    lane_option,
    option,
    run,
    stop_on_signals,
)
from outbox_adapters.cli.telemetry import metrics_options
from outbox_adapters.cli.wakeup import lane_wakeups, listen_option
from outbox_adapters.cli.worker_settings import (
    EMAIL_ONLY,
    WEBHOOKS_ONLY,
    check_lane_options,
    email_lane_config,
    email_timing,
    smtp_options,
    smtp_settings,
)
from outbox_adapters.clock import SystemClock
from outbox_adapters.extras import missing_extra
from outbox_adapters.lanes.email import EMAIL_LANE, EmailHandler
from outbox_adapters.lanes.webhooks import WEBHOOK_LANE
from outbox_adapters.postgres import (
    PostgresHeartbeat,
    PostgresLeaderLease,
    PostgresStore,
    schema,
)
from outbox_adapters.runtime import LaneConfig, Worker, WorkerStats
from outbox_core.ports import Encryptor
from outbox_core.timing import EmailStepBudgets, EmailTiming

if TYPE_CHECKING:
    # The smtp extra is imported when the command runs, so `outbox schema sql` works without it.
    from outbox_adapters.smtp import SmtpSettings

__all__ = ["worker_command"]


@attrs.frozen
class WorkerOptions:
    """The worker's settings after validation."""

    database_url: str
    config: LaneConfig
    sender: str
    sender_name: str | None
    drain: bool
    leader: bool
    listen: bool
    #: The step budgets the lease is derived from; the mailer's dial and exchange windows too.
    steps: EmailStepBudgets = attrs.field(factory=EmailStepBudgets)
    encryptor: Encryptor | None = None


@click.command("worker")
@metrics_options
@database_url()
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
    f"Lane to work: an e-mail lane, or {WEBHOOK_LANE!r} (the webhook drainer and retry worker).",
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
def worker_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    smtp_url: str | None,
    smtp_tls: str,
    sender: str | None,
    sender_name: str | None,
    allow_plaintext: bool,  # noqa: FBT001 - click passes flags positionally by name
    environment: str,
    smtp_ca_file: str | None,
    smtp_sessions: int,
    drain: bool,  # noqa: FBT001
    batch_size: int,
    batch_timeout: float | None,
    rows_in_flight: int,
    group_marks: bool,  # noqa: FBT001
    poll_interval: float,
    listen: bool,  # noqa: FBT001
    budgets: tuple[str, ...],
    lane: str,
    leader: bool,  # noqa: FBT001
    allow: tuple[str, ...],
    allow_http: bool,  # noqa: FBT001
    encryption_keys: str | None,
    encryption_keys_file: str | None,
) -> None:
    """Claim, send and mark rows until SIGTERM/SIGINT (or, with --drain, until none is due)."""
    ctx = click.get_current_context()
    check_lane_options(ctx, lane, EMAIL_ONLY if lane == WEBHOOK_LANE else WEBHOOKS_ONLY)
    if lane == WEBHOOK_LANE:
        try:
            from outbox_adapters.cli.webhook_worker import run_webhook_workers  # noqa: PLC0415
        except ImportError as exc:  # the webhooks extra (httpx) is missing
            raise missing_extra(exc, f"the {WEBHOOK_LANE!r} lane") from exc

        run_webhook_workers(
            database_url,
            allow=allow,
            allow_http=allow_http,
            environment=environment,
            drain=drain,
            leader=leader,
            listen=listen,
            poll_interval=poll_interval,
            encryptor=encryptor_from(encryption_keys, encryption_keys_file),
        )
        return
    if smtp_url is None or sender is None:
        missing = "--smtp-url (OUTBOX_SMTP_URL)" if smtp_url is None else "--sender (OUTBOX_SENDER)"
        raise SettingError(f"{missing} is required for the e-mail lane {lane!r}")
    timing = email_timing(budgets, batch_size, batch_timeout)
    options = WorkerOptions(
        database_url=database_url,
        config=email_lane_config(
            lane, timing, poll_interval, rows_in_flight, group_marks=group_marks
        ),
        sender=sender,
        sender_name=sender_name,
        drain=drain,
        leader=leader,
        listen=listen,
        steps=timing.budgets,
        encryptor=encryptor_from(encryption_keys, encryption_keys_file),
    )
    smtp = smtp_settings(
        smtp_url,
        tls=smtp_tls,
        sender=sender,
        environment=environment,
        allow_plaintext=allow_plaintext,
        ca_file=smtp_ca_file,
        sessions=smtp_sessions,
    )
    click.echo(f"timing: {timing.describe()}")
    waits = f"; only {smtp.max_sessions} SMTP session(s) (--smtp-sessions): the rest wait for one"
    click.echo(
        f"rows in flight: {rows_in_flight} (a crash can duplicate at most {rows_in_flight} row(s))"
        + ("; marks grouped per window of rows in flight" if group_marks else "")
        + (waits if rows_in_flight > smtp.max_sessions else "")
    )
    click.echo(smtp.describe())
    click.echo(describe_keys(options.encryptor))
    with database_errors():
        problems = schema.verify(database_url)
    if problems:
        raise Failure(f"the outbox schema is incomplete ({problems[0]}): run `outbox schema apply`")
    stats = run(_work(options, smtp))
    click.echo("worker stopped: " + ", ".join(f"{k} {v}" for k, v in attrs.asdict(stats).items()))


async def _work(options: WorkerOptions, smtp: SmtpSettings) -> WorkerStats:
    from outbox_adapters.smtp import SmtpMailer  # noqa: PLC0415 - the smtp extra, checked above

    config = options.config
    # One claim, the leader lease and one mark per row in flight at a time (marks are detached,
    # so up to rows_in_flight of them run at once), plus one spare.
    pool_size = 3 + config.rows_in_flight
    async with (
        connection_pool(options.database_url, max_size=pool_size) as pool,
        lane_wakeups(
            options.database_url,
            [config.lane],
            listen=options.listen,
            poll_interval=config.poll_interval,
        ) as (wakeup,),
        SmtpMailer(smtp, steps=options.steps) as mailer,
    ):
        clock = SystemClock()
        handler = EmailHandler(
            mailer,
            sender=options.sender,
            sender_name=options.sender_name,
            clock=clock,
            steps=options.steps,
            encryptor=options.encryptor,
        )
        leader = PostgresLeaderLease(pool) if options.leader else None
        holder = f"{socket.gethostname()}:{os.getpid()}"
        worker = Worker(
            PostgresStore(pool),
            handler,
            config,
            clock=clock,
            leader=leader,
            holder=holder,
            wakeup=wakeup,
            heartbeat=PostgresHeartbeat(pool),
        )
        click.echo(
            f"lane {config.lane}: holder {holder}, leader lease {'on' if leader else 'off'},"
            f" {'drain' if options.drain else 'until SIGTERM/SIGINT'}"
        )
        with stop_on_signals(worker.request_stop):
            return await worker.run(drain=options.drain)
