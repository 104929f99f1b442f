"""``outbox failed``: the dead letters of one outbox grouped by error class, or the events the
consumer channels parked (``--queue parked``), then the newest ones (never payload values)."""

from __future__ import annotations

from collections.abc import Sequence

import click

from outbox_adapters.cli.operator import operator_store, when
from outbox_adapters.cli.options import connection_pool, database_url, lane_option, option, run
from outbox_adapters.postgres.parked import REDRIVE_HINT, parked_report
from outbox_adapters.postgres.queues import QUEUES
from outbox_core.operator import ErrorGroup, FailedReport, ParkedReport
from outbox_core.top import error_classes

__all__ = ["failed_command"]


@click.command("failed")
@database_url()
@option(
    "--queue",
    env="OUTBOX_QUEUE",
    type=click.Choice([*QUEUES, "parked"]),
    default="messages",
    show_default=True,
    help="Which outbox: e-mail messages, the webhook outbox, webhook deliveries, events; or"
    " `parked`: the events the consumer channels parked on the dead-letter destination.",
)
@lane_option(None, "Only this lane (with --queue parked: only this channel).")
@option(
    "--limit",
    env="OUTBOX_FAILED_LIMIT",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Newest failed rows to list.",
)
@option(
    "--exact",
    env="OUTBOX_FAILED_EXACT",
    is_flag=True,
    help="Group by the exact error text instead of its class (addresses shown).",
)
def failed_command(
    database_url: str,
    queue: str,
    lane: str | None,
    limit: int,
    exact: bool,  # noqa: FBT001
) -> None:
    """Failed rows grouped by error class (or exact error), then the newest ones by id (never
    payload values)."""

    if queue == "parked":
        _print_parked(database_url, lane, limit, exact=exact)
        return

    async def read() -> FailedReport:
        async with operator_store(database_url, queue) as store:
            return await store.list_failed(lane=lane, limit=limit)

    report = run(read())
    if not report.by_error:
        click.echo(f"no failed {queue}" + (f" in lane {lane}" if lane else ""))
        return
    _print_groups(f"failed {queue}", "error", report.by_error, exact=exact)
    click.echo(f"newest {len(report.rows)} failed row(s):")
    click.echo(f"  {'id':>10}  {'lane':<12} {'attempts':>8}  {'failed at':<25}  error")
    for row in report.rows:
        click.echo(
            f"  {row.id:>10}  {row.lane:<12} {row.attempts:>8}  {when(row.resolved_at):<25}"
            f"  {row.last_error or '-'}"
        )


def _print_parked(database_url: str, channel: str | None, limit: int, *, exact: bool) -> None:
    async def read() -> ParkedReport:
        async with connection_pool(database_url) as pool:
            return await parked_report(pool, channel=channel, limit=limit)

    report = run(read())
    if not report.by_error:
        click.echo("no parked events" + (f" in channel {channel}" if channel else ""))
        return
    _print_groups("parked events", "reason", report.by_error, exact=exact)
    click.echo(f"newest {len(report.rows)} parked event(s):")
    click.echo(f"  {'event':<36}  {'channel':<20} {'kind':<18} {'attempts':>8}  parked at")
    for row in report.rows:
        click.echo(
            f"  {row.event_id:<36}  {row.channel:<20} {row.kind:<18} {row.attempts:>8}"
            f"  {when(row.parked_at)}  {row.reason}"
        )
    click.echo(REDRIVE_HINT)


def _print_groups(what: str, cause: str, groups: Sequence[ErrorGroup], *, exact: bool) -> None:
    """``what`` by exact ``cause`` or by error class: count, cause, first and last time."""
    shown = groups if exact else error_classes(groups)
    click.echo(f"{what} by {cause if exact else 'error class'}:")
    for group in shown:
        click.echo(
            f"  {group.rows:>6}  {group.error or f'(no {cause} recorded)'}"
            f"  [{when(group.first_failed_at)} .. {when(group.last_failed_at)}]"
        )
