"""``outbox worker``: claim, send and mark e-mail rows until SIGTERM/SIGINT (or ``--drain``).

Every setting is checked before the first connection (a broken one exits 2 naming it); then the
worker prints what it will do: timing, the duplicate bound of ``--rows-in-flight``, the relay and
its sessions, the sealed-field keys, and how it wakes (LISTEN, or polling alone).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import attrs
import click
from click.core import ParameterSource

from outbox_adapters.app import EmailLane, EmailLaneRun, run_email_lane
from outbox_adapters.cli import APP_KEY
from outbox_adapters.cli.options import (
    Failure,
    SettingError,
    allow_options,
    database_errors,
    database_url,
    describe_keys,
    encryption_keys,
    encryptor_from,
    lane_option,
    option,
    run,
    setting_error,
    stop_on_signals,
)
from outbox_adapters.cli.telemetry import metrics_options
from outbox_adapters.cli.wakeup import listen_option
from outbox_adapters.cli.worker_settings import (
    EMAIL_ONLY,
    WEBHOOKS_ONLY,
    check_lane_options,
    email_lane_config,
    email_timing,
    smtp_options,
    smtp_settings,
)
from outbox_adapters.extras import missing_extra
from outbox_adapters.lanes.email import EMAIL_LANE
from outbox_adapters.lanes.webhooks import WEBHOOK_LANE
from outbox_adapters.postgres import WAKEUP_CHANNEL, schema
from outbox_adapters.runtime import Worker, WorkerStats
from outbox_core.errors import ConfigurationError
from outbox_core.timing import EmailTiming

if TYPE_CHECKING:
    # The smtp extra is imported when the command runs, so `outbox schema sql` works without it.
    from outbox_adapters.app import Outbox
    from outbox_adapters.smtp import SmtpSettings

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
def worker_command(  # noqa: C901, PLR0912, PLR0913, PLR0915, PLR0917 - one parameter per option, each source
    database_url: str | None,
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
    app: Outbox | None = ctx.meta.get(APP_KEY)
    if app is not None and database_url is None:
        database_url = app.database_url
    if database_url is None:
        raise SettingError("Missing option '--database-url' (OUTBOX_DATABASE_URL).")
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
    try:
        described = app.lane(lane) if app is not None else EmailLane(name=lane)
    except ConfigurationError as exc:
        raise setting_error("--lane", "OUTBOX_LANE", str(exc)) from None
    timing_flags = ("batch_size", "batch_timeout", "budgets", "rows_in_flight")
    if app is not None and all(
        ctx.get_parameter_source(name) is ParameterSource.DEFAULT for name in timing_flags
    ):
        timing, rows_in_flight = described.timing, described.rows_in_flight
    else:
        timing = email_timing(budgets, batch_size, batch_timeout)
    smtp: SmtpSettings | None = app.smtp if app is not None else None
    if sender is None and app is not None:
        sender = app.sender
    if sender is None and smtp is not None:
        sender = smtp.policy.sender
    if smtp_url is None and smtp is None and described.mailer is None:
        raise SettingError(f"--smtp-url (OUTBOX_SMTP_URL) is required for the e-mail lane {lane!r}")
    if sender is None:
        raise SettingError(f"--sender (OUTBOX_SENDER) is required for the e-mail lane {lane!r}")
    if smtp_url is not None:
        smtp = smtp_settings(
            smtp_url,
            tls=smtp_tls,
            sender=sender,
            environment=environment,
            allow_plaintext=allow_plaintext,
            ca_file=smtp_ca_file,
            sessions=smtp_sessions,
        )
    described = attrs.evolve(
        described, timing=timing, sender_name=sender_name or described.sender_name
    )
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    try:
        lane_run = EmailLaneRun(
            database_url=database_url,
            lane=described,
            config=email_lane_config(
                lane, timing, poll_interval, rows_in_flight, group_marks=group_marks
            ),
            sender=sender,
            smtp=smtp,
            encryptor=encryptor if encryptor is not None or app is None else app.encryptor,
            leader=leader,
            listen=listen,
            drain=drain,
        )
    except ConfigurationError as exc:
        raise SettingError(str(exc)) from None
    click.echo(f"timing: {timing.describe()}")
    waits = ""
    if smtp is not None and rows_in_flight > smtp.max_sessions:
        waits = (
            f"; only {smtp.max_sessions} SMTP session(s) (--smtp-sessions): the rest wait for one"
        )
    click.echo(
        f"rows in flight: {rows_in_flight} (a crash can duplicate at most {rows_in_flight} row(s))"
        + ("; marks grouped per window of rows in flight" if group_marks else "")
        + waits
    )
    click.echo(smtp.describe() if smtp is not None else "mailer: the application's own")
    click.echo(describe_keys(lane_run.encryptor))
    with database_errors():
        problems = schema.verify(database_url)
    if problems:
        raise Failure(f"the outbox schema is incomplete ({problems[0]}): run `outbox schema apply`")
    stats = run(_work(lane_run))
    click.echo("worker stopped: " + ", ".join(f"{k} {v}" for k, v in attrs.asdict(stats).items()))


async def _work(lane_run: EmailLaneRun) -> WorkerStats:
    every = f"polling every {lane_run.config.poll_interval:g}s"
    click.echo(
        f"wake-up: LISTEN {WAKEUP_CHANNEL} ({every} stays the fallback)"
        if lane_run.listen
        else f"wake-up: {every}"
    )

    def started(_worker: Worker) -> None:
        click.echo(
            f"lane {lane_run.config.lane}: holder {lane_run.holder}, leader lease"
            f" {'on' if lane_run.leader else 'off'},"
            f" {'drain' if lane_run.drain else 'until SIGTERM/SIGINT'}"
        )

    stop = asyncio.Event()
    with stop_on_signals(stop.set):
        try:
            return await run_email_lane(lane_run, stop=stop, started=started)
        except TimeoutError:  # the LISTEN connection; psycopg's own failures reach database_errors
            raise Failure("cannot use the database (--database-url): LISTEN timed out") from None
