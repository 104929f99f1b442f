"""The operator's view of the rows: ``outbox get``, ``requeue`` and ``stats`` (``failed`` is in
:mod:`outbox_adapters.cli.failed`).

Every command talks to the store through :class:`outbox_core.ports.OperatorStore` (built by
:func:`operator_store`), never through SQL. ``outbox get`` shows a payload with its secret values
masked (:meth:`outbox_core.scrub.ScrubRules.redact`); the other commands print no payload value at
all: failed rows are shown by id, lane, attempts and error.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import click

from outbox_adapters.cli.options import (
    Failure,
    SettingError,
    connection_pool,
    database_url,
    lane_option,
    option,
    run,
    setting_error,
)
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.queues import QUEUES
from outbox_core.delivery import Status
from outbox_core.operator import LaneStats, StoredRow
from outbox_core.ports import OperatorStore, RequeueRequest, RequeueResult
from outbox_core.scrub import DEFAULT_SECRET_KEYS, ScrubRules

__all__ = [
    "default_actor",
    "get_command",
    "operator_store",
    "requeue_command",
    "shown_row",
    "stats_command",
    "stats_table",
    "when",
]


@contextlib.asynccontextmanager
async def operator_store(
    database_url: str, queue: str = "messages"
) -> AsyncIterator[OperatorStore]:
    """The store of ``queue`` (:data:`~outbox_adapters.postgres.queues.QUEUES`) the operator
    commands use, on a small pool closed afterwards."""
    async with connection_pool(database_url) as pool:
        yield PostgresStore(pool, table=QUEUES[queue])


def queue_option(command: Any) -> Any:  # noqa: ANN401 - a click command
    """``--queue messages|webhooks|deliveries|events``: which queue table the command reads."""
    return option(
        "--queue",
        env="OUTBOX_QUEUE",
        type=click.Choice(list(QUEUES)),
        default="messages",
        show_default=True,
        help="Which outbox: e-mail messages, the webhook outbox, webhook deliveries, events.",
    )(command)


def when(moment: datetime | None) -> str:
    """An instant as the operator commands print it (UTC, seconds; ``-`` for none)."""
    return "-" if moment is None else moment.astimezone(UTC).isoformat(timespec="seconds")


def _since(value: str | None, flag: str = "--since") -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise setting_error(
            flag,
            f"OUTBOX_REQUEUE_{flag[2:].upper()}",
            f"{value!r} is not an ISO time (2026-05-01T12:00Z)",
        ) from None
    # A time without an offset is read as UTC, the clock the database stores.
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


def default_actor() -> str:
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
    before: str | None,
    lane: str | None,
    error_contains: str | None,
    yes: bool,
    actor: str,
    reason: str | None,
) -> RequeueRequest:
    filters = any(f is not None for f in (since, before, lane, error_contains))
    if ids and all_failed:
        raise SettingError("give row ids or --all-failed, not both")
    if ids:
        if filters:
            raise SettingError(
                "--since, --before, --lane and --error-contains go with --all-failed, not ids"
            )
        return RequeueRequest(actor=actor, row_ids=ids, reason=reason)
    if not all_failed:
        raise SettingError("name the rows: give row ids, or --all-failed with filters")
    if not filters and not yes:
        raise setting_error(
            "--yes",
            "OUTBOX_REQUEUE_YES",
            "--all-failed without --since/--before/--lane/--error-contains requeues every failed"
            " row;"
            " add --yes to confirm",
        )
    return RequeueRequest(
        actor=actor,
        lane=lane,
        failed_since=_since(since),
        failed_before=_since(before, "--before"),
        error_contains=error_contains,
        reason=reason,
    )


@click.command("requeue")
@click.argument("ids", nargs=-1, type=int)
@database_url()
@queue_option
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
@option(
    "--before",
    env="OUTBOX_REQUEUE_BEFORE",
    metavar="ISO-TIME",
    help="Only rows that failed before this time (UTC if no offset).",
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
    default=default_actor,
    show_default="$USER@host",
    help="Who requeues (kept in the audit table).",
)
@option(
    "--reason",
    env="OUTBOX_REQUEUE_REASON",
    metavar="TEXT",
    help="Why (a ticket, one line): kept in the audit table beside who and when.",
)
def requeue_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    ids: tuple[int, ...],
    database_url: str,
    queue: str,
    all_failed: bool,  # noqa: FBT001
    since: str | None,
    before: str | None,
    lane: str | None,
    error_contains: str | None,
    yes: bool,  # noqa: FBT001
    actor: str,
    reason: str | None,
) -> None:
    """Put failed rows back to pending (attempts reset, audited). Sent rows are refused."""
    try:
        request = _requeue_request(
            ids,
            all_failed=all_failed,
            since=since,
            before=before,
            lane=lane,
            error_contains=error_contains,
            yes=yes,
            actor=actor,
            reason=reason,
        )
    except ValueError as exc:  # the reason's own check (RequeueRequest)
        raise setting_error("--reason", "OUTBOX_REQUEUE_REASON", str(exc)) from None

    async def requeue() -> RequeueResult:
        async with operator_store(database_url, queue) as store:
            return await store.requeue_failed(request)

    result = run(requeue())
    if result.requeued:
        shown = ", ".join(str(row_id) for row_id in result.requeued)
        said = f" ({reason})" if reason else ""
        click.echo(f"requeued {len(result.requeued)} row(s) as {actor}{said}: {shown}")
    elif not result.refused:
        click.echo("no failed row matched; nothing requeued")
    for row_id, why in result.refused.items():
        click.echo(f"refused {row_id}: {why}")
    if result.refused:
        raise Failure(f"{len(result.refused)} row(s) refused")


def stats_table(stats: Mapping[str, LaneStats]) -> list[str]:
    """``outbox stats``'s lines: one per lane, rows per status, then the stale marks."""
    if not stats:
        return ["the outbox is empty"]
    width = max(12, *(len(lane) for lane in stats))
    header = f"{'lane':<{width}}" + "".join(f"  {status.value:>10}" for status in Status)
    lines = [header + f"  {'stale marks':>11}"]
    for lane, lane_stats in sorted(stats.items()):
        rows = lane_stats.rows
        lines.append(
            f"{lane:<{width}}"
            + "".join(f"  {rows.get(status, 0):>10}" for status in Status)
            + f"  {lane_stats.stale_marks:>11}"
        )
    return lines


@click.command("stats")
@database_url()
@queue_option
def stats_command(database_url: str, queue: str) -> None:
    """Rows per lane and status, and the marks the fence refused (stale marks) per lane."""

    async def read() -> Mapping[str, LaneStats]:
        async with operator_store(database_url, queue) as store:
            return await store.lane_stats()

    for line in stats_table(run(read())):
        click.echo(line)


def _next_attempt(row: StoredRow) -> str | None:
    """When a pending row is tried next; a terminal row (sent, skipped, failed) is never: ``-``."""
    return when(row.next_attempt_at) if row.status is Status.PENDING else "-"


def shown_row(row: StoredRow, rules: ScrubRules) -> list[str]:
    """``outbox get``'s lines: the row's columns, then its payload with secret values masked.

    A payload that can't be decoded (a poison row) is not shown at all: it could hold anything.
    """
    lines = [
        f"id:              {row.id}",
        f"lane:            {row.lane}",
        f"status:          {row.status.value}",
        f"attempts:        {row.attempts}",
        f"next attempt at: {_next_attempt(row)}",
        f"claimed at:      {when(row.claimed_at)}",
        f"last error:      {row.last_error or '-'}",
        f"idempotency key: {row.idempotency_key or '-'}",
        f"created at:      {when(row.created_at)}",
        f"updated at:      {when(row.updated_at)}",
        f"resolved at:     {when(row.resolved_at)}",
        f"scrubbed at:     {when(row.scrubbed_at)}",
    ]
    if isinstance(row.payload, str):
        lines.append("payload:         (cannot be decoded; not shown)")
    else:
        shown = json.dumps(rules.redact(row.payload), indent=2, ensure_ascii=False, default=str)
        lines.append("payload (secret values masked):")
        lines.extend(f"  {line}" for line in shown.splitlines())
    return lines


@click.command("get")
@click.argument("row_id", type=click.IntRange(min=1))
@database_url()
@queue_option
@option(
    "--secret-key",
    "secret_keys",
    env="OUTBOX_SECRET_KEYS",
    multiple=True,
    metavar="KEY",
    help="A payload key whose value is masked, besides the default secret keys"
    f" ({', '.join(sorted(DEFAULT_SECRET_KEYS))}). Repeat for more.",
)
def get_command(row_id: int, database_url: str, queue: str, secret_keys: tuple[str, ...]) -> None:
    """One row: its columns and its payload, secret values masked. Exit 1 if there is no such row."""
    rules = ScrubRules(DEFAULT_SECRET_KEYS | frozenset(secret_keys))

    async def read() -> StoredRow | None:
        async with operator_store(database_url, queue) as store:
            return await store.get(row_id)

    row = run(read())
    if row is None:
        raise Failure(f"no row {row_id}")
    for line in shown_row(row, rules):
        click.echo(line)
