"""``outbox``: the operator's command line (catalogue A12).

Every option has an ``OUTBOX_*`` environment twin (shown in ``--help``), so a container can be
configured by environment alone. Exit codes: 0 done; 1 the work found a problem (schema
incomplete, a requeue refused, the database unreachable, demo invariants broken); 2 the command
line or configuration can't work, said in one line that names the setting. Secrets are never
printed: no database URL, no SMTP password (``SmtpSettings.describe()``), no payload values.

The asyncio parts are small functions below each command; the demo lives in
:mod:`outbox_adapters.demo`.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import click
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.clock import SystemClock
from outbox_adapters.email import EMAIL_LANE, EmailHandler, email_message
from outbox_adapters.postgres import (
    FailedReport,
    PostgresLeaderLease,
    PostgresStore,
    enqueue,
    schema,
)
from outbox_adapters.worker import LaneConfig, Worker, WorkerStats
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.mail import validate_address
from outbox_core.messages import JSONObject
from outbox_core.payload import RESERVED_KEYS
from outbox_core.ports import Encryptor, RequeueRequest, RequeueResult
from outbox_core.sealing import reseal
from outbox_core.timing import EmailTiming

if TYPE_CHECKING:
    # The smtp and demo extras are imported when a command needs them, so `outbox schema sql`
    # works with the postgres and cli extras alone.
    from outbox_adapters.postgres.store import PayloadRewrites
    from outbox_adapters.smtp import SmtpSettings

__all__ = ["main"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class SettingError(click.ClickException):
    """A setting that can't work: one line naming it, exit status 2 (as click's usage errors)."""

    exit_code = 2


class Failure(click.ClickException):
    """The command ran and found a problem: exit status 1."""

    exit_code = 1


def _setting(option: str, envvar: str, message: str) -> SettingError:
    return SettingError(f"{option} ({envvar}): {message}")


def option(*decls: str, env: str, **kwargs: Any) -> Callable[[F], F]:  # noqa: ANN401
    """A click option with its ``OUTBOX_*`` environment twin, shown in ``--help``."""
    return click.option(*decls, envvar=env, show_envvar=True, **kwargs)


# --- shared options -------------------------------------------------------------------------------


def _check_database_url(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> str | None:
    if value is None:
        return None
    try:
        conninfo_to_dict(value)
    except psycopg.ProgrammingError:
        # psycopg's message quotes the value, which may hold a password: say what, not where.
        raise SettingError(
            "--database-url: not a PostgreSQL URL or key=value connection string "
            "(details withheld: the value may hold a password)"
        ) from None
    return value


def database_url(
    env: str = "OUTBOX_DATABASE_URL",
    *,
    required: bool = True,
    help_text: str = "PostgreSQL URL (postgresql://user:pass@host:5432/db) or key=value string.",
) -> Callable[[F], F]:
    return option(
        "--database-url", env=env, required=required, callback=_check_database_url, help=help_text
    )


def lane_option(default: str | None, help_text: str) -> Callable[[F], F]:
    return option(
        "--lane",
        env="OUTBOX_LANE",
        default=default,
        show_default=default is not None,
        help=help_text,
    )


@contextlib.contextmanager
def _database_errors() -> Iterator[None]:
    """psycopg's failures as one line each; anything else is a bug and keeps its traceback."""
    try:
        yield
    except psycopg.errors.UndefinedTable:
        raise Failure("the outbox tables are missing: run `outbox schema apply`") from None
    except psycopg.OperationalError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Failure(f"cannot use the database (--database-url): {first_line}") from None


def _run(coro: Coroutine[Any, Any, T]) -> T:
    with _database_errors():
        return asyncio.run(coro)


@contextlib.asynccontextmanager
async def _pool(dsn: str, *, max_size: int = 2) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """An autocommit pool (as ``PostgresStore.open`` makes) that the store and the lease share."""
    # One direct connection first: a wrong host fails in seconds with psycopg's own reason,
    # where a pool would retry in the background until its timeout.
    conn = await psycopg.AsyncConnection.connect(dsn, connect_timeout=10)
    await conn.close()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True},
        open=False,
        name="outbox-cli",
    )
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()


_KEYS_OPTION = "--encryption-keys (OUTBOX_ENCRYPTION_KEYS) / --encryption-keys-file"


def encryption_keys(*, required: bool = False) -> Callable[[F], F]:
    """``--encryption-keys`` and ``--encryption-keys-file``: the sealed-field keys (B1)."""

    def decorate(command: F) -> F:
        command = option(
            "--encryption-keys-file",
            env="OUTBOX_ENCRYPTION_KEYS_FILE",
            type=click.Path(exists=True, dir_okay=False),
            help="File holding the key list (kid:base64key, one per line or comma-separated).",
        )(command)
        return option(
            "--encryption-keys",
            env="OUTBOX_ENCRYPTION_KEYS",
            metavar="KID:BASE64KEY,...",
            help="Keys for sealed payload fields; the first one seals, all open."
            " Prefer the environment variable or the file: a command line is visible to others."
            + (" Required (or the file)." if required else ""),
        )(command)

    return decorate


def _encryptor(keys: str | None, keys_file: str | None) -> Encryptor | None:
    """The encryptor the options describe; ``None`` when neither is given."""
    if keys is None and keys_file is None:
        return None
    if keys is not None and keys_file is not None:
        raise SettingError(f"{_KEYS_OPTION}: give the key list once, not both")
    try:
        from outbox_adapters.crypto import AesGcmEncryptor  # noqa: PLC0415 - the crypto extra
    except ImportError:
        raise Failure(
            "sealed fields need the crypto extra: pip install 'leased-outbox[crypto]'"
        ) from None
    try:
        if keys_file is not None:
            return AesGcmEncryptor.from_file(keys_file)
        return AesGcmEncryptor.from_key_list(keys or "", source="the key list")
    except ConfigurationError as exc:
        # The messages name key ids and positions, never key material.
        raise SettingError(f"{_KEYS_OPTION}: {exc}") from None


def _describe_keys(encryptor: Encryptor | None) -> str:
    if encryptor is None:
        return "sealed fields: off (no encryption keys)"
    others = sorted(encryptor.key_ids - {encryptor.active_key_id})
    return f"sealed fields: key {encryptor.active_key_id!r} seals" + (
        f", also opening {', '.join(map(repr, others))}" if others else ""
    )


# --- the group ------------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@option(
    "--log-level",
    env="OUTBOX_LOG_LEVEL",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="warning",
    show_default=True,
    help="Log level of the library's logs on stderr.",
)
def main(log_level: str) -> None:
    """leased-outbox: operate the transactional outbox (schema, enqueue, worker, requeue, demo)."""
    root = logging.getLogger()
    if not root.handlers:  # a host (or a test runner) that configured logging keeps its setup
        logging.basicConfig(
            level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )


# --- schema ---------------------------------------------------------------------------------------


@main.group("schema")
def schema_group() -> None:
    """Print, apply or verify the outbox tables' DDL."""


@schema_group.command("sql")
def schema_sql() -> None:
    """Print the DDL (for review, or for your own migration tool)."""
    click.echo(schema.ddl_sql(), nl=False)


@schema_group.command("apply")
@database_url()
def schema_apply(database_url: str) -> None:
    """Create whatever is missing (IF NOT EXISTS; never alters what exists)."""
    with _database_errors():
        schema.apply(database_url)
    click.echo(f"schema applied ({len(schema.ddl_statements())} statements, IF NOT EXISTS)")


@schema_group.command("verify")
@database_url()
def schema_verify(database_url: str) -> None:
    """Check every table, column, index and check constraint; exit 1 listing what is missing."""
    with _database_errors():
        problems = schema.verify(database_url)
    if problems:
        for problem in problems:
            click.echo(f"schema problem: {problem}")
        raise Failure(f"the schema has {len(problems)} problem(s); `outbox schema apply` adds them")
    click.echo("schema OK: every table, column, index and check constraint is present")


# --- enqueue --------------------------------------------------------------------------------------


@main.group("enqueue")
def enqueue_group() -> None:
    """Write one message to the outbox (an operator's smoke test)."""


def _fields(pairs: Sequence[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise _setting("--field", "OUTBOX_ENQUEUE_FIELD", f"expected KEY=VALUE, got {key!r}")
        if key in RESERVED_KEYS:
            raise _setting(
                "--field",
                "OUTBOX_ENQUEUE_FIELD",
                f"{key!r} is a message part, set by its own option (--{key.replace('_', '-')})",
            )
        fields[key] = value
    return fields


@enqueue_group.command("email")
@database_url()
@option(
    "--to",
    "to",
    env="OUTBOX_ENQUEUE_TO",
    required=True,
    multiple=True,
    help="Recipient address (repeat for more).",
)
@option(
    "--subject",
    env="OUTBOX_ENQUEUE_SUBJECT",
    required=True,
    help="Subject ($name placeholders are filled from --field).",
)
@option("--text", env="OUTBOX_ENQUEUE_TEXT", required=True, help="Plain-text body template.")
@option("--html", env="OUTBOX_ENQUEUE_HTML", help="HTML body template.")
@option(
    "--field",
    "fields",
    env="OUTBOX_ENQUEUE_FIELD",
    multiple=True,
    metavar="KEY=VALUE",
    help="A payload field, e.g. password_reset_url=https://... (repeat).",
)
@option(
    "--idempotency-key",
    env="OUTBOX_ENQUEUE_IDEMPOTENCY_KEY",
    help="A second enqueue with the same key writes nothing.",
)
@lane_option(EMAIL_LANE, "Lane to write to.")
@encryption_keys()
def enqueue_email(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    to: tuple[str, ...],
    subject: str,
    text: str,
    html: str | None,
    fields: tuple[str, ...],
    idempotency_key: str | None,
    lane: str,
    encryption_keys: str | None,
    encryption_keys_file: str | None,
) -> None:
    """Enqueue one e-mail; prints its row id. With encryption keys, secret fields are sealed."""
    encryptor = _encryptor(encryption_keys, encryption_keys_file)
    try:
        message = email_message(
            to=list(to),
            subject=subject,
            text=text,
            html=html,
            fields=_fields(fields),
            idempotency_key=idempotency_key,
            lane=lane,
            encryptor=encryptor,
        )
    except InvalidMessage as exc:
        raise SettingError(f"the message was refused, nothing was written: {exc}") from None
    with (
        _database_errors(),
        psycopg.connect(database_url, connect_timeout=10) as conn,
        conn.transaction(),
    ):
        result = enqueue(conn, message)
    if result.created:
        click.echo(f"enqueued as {result.row_id}")
    else:
        click.echo(f"already enqueued as {result.row_id} (idempotency key seen; nothing written)")


# --- worker ---------------------------------------------------------------------------------------


@attrs.frozen
class WorkerOptions:
    """The worker's settings after validation."""

    database_url: str
    lane: str
    timing: EmailTiming
    sender: str
    sender_name: str | None
    poll_interval: float
    drain: bool
    leader: bool
    encryptor: Encryptor | None = None


def _budgets(pairs: Sequence[str]) -> dict[str, float]:
    budgets: dict[str, float] = {}
    for pair in pairs:
        name, _, seconds = pair.partition("=")
        try:
            budgets[name.strip()] = float(seconds)
        except ValueError:
            names = ", ".join(EmailTiming.override_names())
            raise _setting(
                "--budget",
                "OUTBOX_BUDGET",
                f"expected STEP=SECONDS with STEP one of {names}; got {pair!r}",
            ) from None
    return budgets


def _timing(budgets: Sequence[str], batch_size: int, batch_timeout: float | None) -> EmailTiming:
    try:
        return EmailTiming.with_overrides(
            _budgets(budgets), batch_size=batch_size, batch_timeout=batch_timeout
        )
    except ConfigurationError as exc:
        raise SettingError(f"timing (--budget, --batch-size, --batch-timeout): {exc}") from None


def _smtp_settings(  # noqa: PLR0913 - one parameter per option
    url: str, *, tls: str, sender: str, environment: str, allow_plaintext: bool, ca_file: str | None
) -> SmtpSettings:
    try:
        from outbox_adapters.smtp import SmtpSettings  # noqa: PLC0415 - the smtp extra
    except ImportError:
        raise Failure(
            "the worker needs the smtp extra: pip install 'leased-outbox[smtp]'"
        ) from None
    try:
        validate_address(sender)
    except InvalidMessage as exc:
        raise _setting("--sender", "OUTBOX_SENDER", str(exc)) from None
    try:
        return SmtpSettings.from_url(
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


@main.command("worker")
@database_url()
@option(
    "--smtp-url",
    env="OUTBOX_SMTP_URL",
    required=True,
    metavar="URL",
    help="smtp://[user:pass@]host:port of the relay.",
)
@option(
    "--smtp-tls",
    env="OUTBOX_SMTP_TLS",
    type=click.Choice(["starttls", "tls", "none"], case_sensitive=False),
    default="starttls",
    show_default=True,
    help="starttls: strict upgrade; tls: implicit; none: development only.",
)
@option(
    "--sender",
    env="OUTBOX_SENDER",
    required=True,
    metavar="ADDR",
    help="The From address (DMARC-aligned).",
)
@option("--sender-name", env="OUTBOX_SENDER_NAME", help="The From display name.")
@option(
    "--allow-plaintext",
    env="OUTBOX_ALLOW_PLAINTEXT",
    is_flag=True,
    help="Permit --smtp-tls none (never in production).",
)
@option(
    "--environment",
    env="OUTBOX_ENVIRONMENT",
    default="development",
    show_default=True,
    help="Deployment name; 'production' refuses plaintext SMTP.",
)
@option(
    "--smtp-ca-file",
    env="OUTBOX_SMTP_CA_FILE",
    type=click.Path(exists=True, dir_okay=False),
    help="CA bundle to trust instead of the system store.",
)
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
    "--poll-interval",
    env="OUTBOX_POLL_INTERVAL",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Sleep after a claim that found less than a batch.",
)
@option(
    "--budget",
    "budgets",
    env="OUTBOX_BUDGET",
    multiple=True,
    metavar="STEP=SECONDS",
    help=f"Override a step budget or the lease grace (repeat): {', '.join(EmailTiming.override_names())}.",
)
@lane_option(EMAIL_LANE, "Lane to work.")
@option(
    "--leader/--no-leader",
    env="OUTBOX_LEADER",
    default=True,
    show_default=True,
    help="Hold the lane's leader lease (one worker per lane across replicas).",
)
@encryption_keys()
def worker_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    smtp_url: str,
    smtp_tls: str,
    sender: str,
    sender_name: str | None,
    allow_plaintext: bool,  # noqa: FBT001 - click passes flags positionally by name
    environment: str,
    smtp_ca_file: str | None,
    drain: bool,  # noqa: FBT001
    batch_size: int,
    batch_timeout: float | None,
    poll_interval: float,
    budgets: tuple[str, ...],
    lane: str,
    leader: bool,  # noqa: FBT001
    encryption_keys: str | None,
    encryption_keys_file: str | None,
) -> None:
    """Claim, send and mark e-mail rows until SIGTERM/SIGINT (or, with --drain, until none is due)."""
    options = WorkerOptions(
        database_url=database_url,
        lane=lane,
        timing=_timing(budgets, batch_size, batch_timeout),
        sender=sender,
        sender_name=sender_name,
        poll_interval=poll_interval,
        drain=drain,
        leader=leader,
        encryptor=_encryptor(encryption_keys, encryption_keys_file),
    )
    smtp = _smtp_settings(
        smtp_url,
        tls=smtp_tls,
        sender=sender,
        environment=environment,
        allow_plaintext=allow_plaintext,
        ca_file=smtp_ca_file,
    )
    click.echo(f"timing: {options.timing.describe()}")
    click.echo(smtp.describe())
    click.echo(_describe_keys(options.encryptor))
    with _database_errors():
        problems = schema.verify(database_url)
    if problems:
        raise Failure(f"the outbox schema is incomplete ({problems[0]}): run `outbox schema apply`")
    stats = _run(_work(options, smtp))
    click.echo("worker stopped: " + ", ".join(f"{k} {v}" for k, v in attrs.asdict(stats).items()))


async def _work(options: WorkerOptions, smtp: SmtpSettings) -> WorkerStats:
    from outbox_adapters.smtp import SmtpMailer  # noqa: PLC0415 - the smtp extra, checked above

    # One claim, one mark and the leader lease at a time: marks are awaited row by row.
    async with _pool(options.database_url, max_size=4) as pool, SmtpMailer(smtp) as mailer:
        clock = SystemClock()
        handler = EmailHandler(
            mailer,
            sender=options.sender,
            sender_name=options.sender_name,
            clock=clock,
            encryptor=options.encryptor,
        )
        config = LaneConfig(
            lane=options.lane, timing=options.timing, poll_interval=options.poll_interval
        )
        leader = PostgresLeaderLease(pool) if options.leader else None
        holder = f"{socket.gethostname()}:{os.getpid()}"
        worker = Worker(
            PostgresStore(pool), handler, config, clock=clock, leader=leader, holder=holder
        )
        click.echo(
            f"lane {options.lane}: holder {holder}, leader lease {'on' if leader else 'off'},"
            f" {'drain' if options.drain else 'until SIGTERM/SIGINT'}"
        )
        with _stop_on_signals(worker.request_stop):
            return await worker.run(drain=options.drain)


@contextlib.contextmanager
def _stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM/SIGINT ask the worker to stop: no new claim, the row in flight finishes."""
    loop = asyncio.get_running_loop()
    installed = []

    def on_signal(name: str) -> None:
        click.echo(f"{name}: stopping (finishing the row in flight, releasing the rest)", err=True)
        stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        # Not on Windows, and not outside the main thread: then Ctrl-C is a KeyboardInterrupt.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


# --- failed, requeue, stats -----------------------------------------------------------------------


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).isoformat(timespec="seconds")


@main.command("failed")
@database_url()
@lane_option(None, "Only this lane.")
@option(
    "--limit",
    env="OUTBOX_FAILED_LIMIT",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Newest failed rows to list.",
)
def failed_command(database_url: str, lane: str | None, limit: int) -> None:
    """Failed rows, grouped by error, then the newest ones (ids, never payload values)."""

    async def read() -> FailedReport:
        async with _pool(database_url) as pool:
            return await PostgresStore(pool).list_failed(lane=lane, limit=limit)

    report = _run(read())
    if not report.by_error:
        click.echo("no failed rows" + (f" in lane {lane}" if lane else ""))
        return
    click.echo("failed rows by error:")
    for group in report.by_error:
        click.echo(
            f"  {group.rows:>6}  {group.error or '(no error recorded)'}"
            f"  [{_when(group.first_failed_at)} .. {_when(group.last_failed_at)}]"
        )
    click.echo(f"newest {len(report.rows)} failed row(s):")
    click.echo(f"  {'id':>10}  {'lane':<12} {'attempts':>8}  {'failed at':<25}  error")
    for row in report.rows:
        click.echo(
            f"  {row.id:>10}  {row.lane:<12} {row.attempts:>8}  {_when(row.resolved_at):<25}"
            f"  {row.last_error or '-'}"
        )


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _setting(
            "--since", "OUTBOX_REQUEUE_SINCE", f"{value!r} is not an ISO time (2026-05-01T12:00Z)"
        ) from None
    # A time without an offset is read as UTC, the clock the database stores.
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


def _default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name (a container with an unknown uid)
        user = f"uid{os.getuid()}" if hasattr(os, "getuid") else "unknown"
    return f"{user}@{socket.gethostname()}"


def _requeue_request(  # noqa: PLR0913 - one parameter per option
    ids: tuple[int, ...],
    *,
    all_failed: bool,
    since: str | None,
    lane: str | None,
    error_contains: str | None,
    yes: bool,
    actor: str,
) -> RequeueRequest:
    filters = since is not None or lane is not None or error_contains is not None
    if ids and all_failed:
        raise SettingError("give row ids or --all-failed, not both")
    if ids:
        if filters:
            raise SettingError("--since, --lane and --error-contains go with --all-failed, not ids")
        return RequeueRequest(actor=actor, row_ids=ids)
    if not all_failed:
        raise SettingError("name the rows: give row ids, or --all-failed with filters")
    if not filters and not yes:
        raise _setting(
            "--yes",
            "OUTBOX_REQUEUE_YES",
            "--all-failed without --since/--lane/--error-contains requeues every failed row;"
            " add --yes to confirm",
        )
    return RequeueRequest(
        actor=actor, lane=lane, failed_since=_since(since), error_contains=error_contains
    )


@main.command("requeue")
@click.argument("ids", nargs=-1, type=int)
@database_url()
@option(
    "--all-failed",
    env="OUTBOX_REQUEUE_ALL_FAILED",
    is_flag=True,
    help="Requeue every failed row matching the filters.",
)
@option(
    "--since",
    env="OUTBOX_REQUEUE_SINCE",
    metavar="ISO-TIME",
    help="Only rows that failed at or after this time (UTC if no offset).",
)
@lane_option(None, "Only rows of this lane.")
@option(
    "--error-contains",
    env="OUTBOX_REQUEUE_ERROR_CONTAINS",
    metavar="TEXT",
    help="Only rows whose error contains TEXT.",
)
@option(
    "--yes", env="OUTBOX_REQUEUE_YES", is_flag=True, help="Confirm --all-failed without a filter."
)
@option(
    "--actor",
    env="OUTBOX_ACTOR",
    default=_default_actor,
    show_default="$USER@host",
    help="Who requeues (kept in the audit table).",
)
def requeue_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    ids: tuple[int, ...],
    database_url: str,
    all_failed: bool,  # noqa: FBT001
    since: str | None,
    lane: str | None,
    error_contains: str | None,
    yes: bool,  # noqa: FBT001
    actor: str,
) -> None:
    """Put failed rows back to pending (attempts reset, audited). Sent rows are refused."""
    request = _requeue_request(
        ids,
        all_failed=all_failed,
        since=since,
        lane=lane,
        error_contains=error_contains,
        yes=yes,
        actor=actor,
    )

    async def requeue() -> RequeueResult:
        async with _pool(database_url) as pool:
            return await PostgresStore(pool).requeue_failed(request)

    result = _run(requeue())
    if result.requeued:
        shown = ", ".join(str(row_id) for row_id in result.requeued)
        click.echo(f"requeued {len(result.requeued)} row(s) as {actor}: {shown}")
    elif not result.refused:
        click.echo("no failed row matched; nothing requeued")
    for row_id, reason in result.refused.items():
        click.echo(f"refused {row_id}: {reason}")
    if result.refused:
        raise Failure(f"{len(result.refused)} row(s) refused")


@main.command("stats")
@database_url()
def stats_command(database_url: str) -> None:
    """Rows per lane and status."""

    async def counts() -> dict[str, dict[Status, int]]:
        async with _pool(database_url) as pool:
            return await PostgresStore(pool).counts()

    result = _run(counts())
    if not result:
        click.echo("the outbox is empty")
        return
    width = max(12, *(len(lane) for lane in result))
    click.echo(f"{'lane':<{width}}" + "".join(f"  {status.value:>10}" for status in Status))
    for lane, by_status in sorted(result.items()):
        click.echo(
            f"{lane:<{width}}" + "".join(f"  {by_status.get(status, 0):>10}" for status in Status)
        )


# --- keys -----------------------------------------------------------------------------------------


@main.group("keys")
def keys_group() -> None:
    """Keys of sealed payload fields: generate one, re-seal unsent rows under the active key."""


@keys_group.command("generate")
@click.argument("kid")
def keys_generate(kid: str) -> None:
    """Print a new kid:base64key entry (256 random bits) to put FIRST in the key list."""
    try:
        from outbox_adapters.crypto import format_key_entry, generate_key  # noqa: PLC0415
    except ImportError:
        raise Failure("keys need the crypto extra: pip install 'leased-outbox[crypto]'") from None
    try:
        click.echo(format_key_entry(kid, generate_key()))
    except ConfigurationError as exc:
        raise SettingError(f"KID: {exc}") from None


@keys_group.command("rotate")
@database_url()
@encryption_keys(required=True)
@lane_option(None, "Only rows of this lane.")
@option(
    "--batch-size",
    env="OUTBOX_ROTATE_BATCH_SIZE",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Rows per transaction.",
)
def keys_rotate(
    database_url: str,
    encryption_keys: str | None,
    encryption_keys_file: str | None,
    lane: str | None,
    batch_size: int,
) -> None:
    """Re-seal the sealed fields of pending and failed rows under the active (first) key.

    Each batch is one transaction, and each row is written only if its payload is still the one
    read (a row a worker marks meanwhile is left alone). Afterwards no unsent row needs the other
    keys: drop them from every worker's key list. Exit 1 if a row could not be opened.
    """
    encryptor = _encryptor(encryption_keys, encryption_keys_file)
    if encryptor is None:
        raise SettingError(f"{_KEYS_OPTION}: give the key list (the first key is the new one)")
    unreadable: dict[int, str] = {}

    def rewrite(row_id: int, row_lane: str, payload: JSONObject) -> dict[str, Any] | None:
        try:
            return reseal(payload, lane=row_lane, encryptor=encryptor)
        except InvalidMessage as exc:
            unreadable[row_id] = str(exc)  # names the field and the key id, never a value
            return None

    async def rotate() -> PayloadRewrites:
        async with _pool(database_url) as pool:
            return await PostgresStore(pool).rewrite_payloads(
                rewrite, lane=lane, batch_size=batch_size
            )

    report = _run(rotate())
    click.echo(
        f"re-sealed {len(report.rewritten)} row(s) under key {encryptor.active_key_id!r}"
        f" ({report.examined} unsent row(s) read in {report.batches} batch(es) of at most"
        f" {batch_size})"
    )
    if report.changed:
        click.echo(
            f"{len(report.changed)} row(s) changed while being re-sealed (a worker marked them),"
            " left as they were; run again to pick up any still unsent"
        )
    for row_id, reason in sorted(unreadable.items()):
        click.echo(f"cannot re-seal row {row_id}: {reason}")
    if unreadable:
        raise Failure(f"{len(unreadable)} row(s) could not be re-sealed (see above)")


# --- demo -----------------------------------------------------------------------------------------


@main.command("demo")
@option(
    "--rows",
    env="OUTBOX_DEMO_ROWS",
    type=click.IntRange(1, 100_000),
    default=300,
    show_default=True,
    help="E-mails to enqueue.",
)
@database_url(
    "OUTBOX_DEMO_DATABASE_URL",
    required=False,
    help_text="PostgreSQL to use instead of an embedded one (the demo writes to a lane of its own).",
)
def demo_command(rows: int, database_url: str | None) -> None:
    """Enqueue and deliver e-mails through a local SMTP server, then check the invariants.

    Without --database-url it starts an embedded PostgreSQL (pgserver) and throws it away after.
    It deliberately ignores OUTBOX_DATABASE_URL: a demo must not write to your real outbox.
    """
    try:
        from outbox_adapters.demo import run_demo  # noqa: PLC0415 - the embedded extra
    except ImportError as exc:
        raise Failure(
            f"the demo needs the demo extra ({exc.name} is missing):"
            " pip install 'leased-outbox[demo]'"
        ) from None
    with _database_errors():
        report = run_demo(rows=rows, database_url=database_url, out=sys.stdout, err=sys.stderr)
    if report.broken():
        raise Failure("the demo's invariants do not hold (see above)")
