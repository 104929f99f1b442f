"""``outbox enqueue webhook``, ``outbox deliveries`` and ``outbox replay`` (ADR 0017).

``outbox replay`` runs outside any worker, so nobody makes the replayed deliveries' first attempts
in-process: they are born with a zero birth lease, due at once for the webhook retry worker
(``outbox worker --lane webhooks``). ``--json`` prints one JSON document.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import psycopg

from outbox_adapters.cli.endpoints import _repository_call, json_option, when
from outbox_adapters.cli.options import (
    Failure,
    SettingError,
    database_errors,
    database_url,
    option,
    setting_error,
    tenant_option,
)
from outbox_adapters.postgres.webhooks import (
    DeliveryReport,
    Replay,
    TenantWebhooks,
    WebhookRefused,
    enqueue_webhook,
)
from outbox_core.delivery import Status
from outbox_core.errors import InvalidMessage

__all__ = ["deliveries_command", "enqueue_webhook_command", "replay_command"]

#: The deliveries ``outbox replay`` makes are due at once (no in-process first attempt here).
_NO_BIRTH_LEASE = timedelta(0)


@click.command("webhook")
@database_url()
@option("--event-type", env="OUTBOX_WEBHOOK_EVENT_TYPE", required=True, help="e.g. invoice.paid")
@tenant_option(required=True, help_text="The tenant it is about: only its endpoints receive it.")
@option("--data", env="OUTBOX_WEBHOOK_DATA", required=True, metavar="JSON", help="A JSON object.")
@option(
    "--idempotency-key",
    env="OUTBOX_ENQUEUE_IDEMPOTENCY_KEY",
    help="A second enqueue with the same key writes nothing.",
)
@option(
    "--ordering-key",
    env="OUTBOX_WEBHOOK_ORDERING_KEY",
    help="Deliver in event order with the other events of this key, per endpoint (ADR 0018).",
)
def enqueue_webhook_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    event_type: str,
    tenant: str,
    data: str,
    idempotency_key: str | None,
    ordering_key: str | None,
) -> None:
    """Enqueue one webhook event; prints its webhook outbox row id."""
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise setting_error("--data", "OUTBOX_WEBHOOK_DATA", f"not JSON: {exc}") from None
    with (
        database_errors(),
        psycopg.connect(database_url, connect_timeout=10) as conn,
        conn.transaction(),
    ):
        try:
            result = enqueue_webhook(
                conn,
                event_type,
                document,
                tenant=tenant,
                idempotency_key=idempotency_key,
                ordering_key=ordering_key,
            )
        except InvalidMessage as exc:
            raise SettingError(f"the event was refused, nothing was written: {exc}") from None
    if result.created:
        click.echo(f"enqueued as {result.row_id}")
    else:
        click.echo(f"already enqueued as {result.row_id} (idempotency key seen; nothing written)")


@click.command("deliveries")
@database_url()
@option(
    "--status",
    env="OUTBOX_DELIVERY_STATUS",
    type=click.Choice([s.value for s in Status]),
    help="Only deliveries in this status.",
)
@option("--endpoint", env="OUTBOX_ENDPOINT", type=click.IntRange(min=1), help="Only this endpoint.")
@tenant_option(required=False, help_text="Only the deliveries to this tenant's endpoints.")
@option(
    "--limit",
    env="OUTBOX_DELIVERIES_LIMIT",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Groups to show.",
)
@json_option
def deliveries_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    status: str | None,
    endpoint: int | None,
    tenant: str | None,
    limit: int,
    as_json: bool,  # noqa: FBT001
) -> None:
    """Webhook deliveries grouped by status and error, with the last HTTP status and response."""
    report: DeliveryReport = _repository_call(
        database_url,
        lambda r: r.deliveries(status=status, endpoint_id=endpoint, limit=limit, tenant=tenant),
    )
    if as_json:
        click.echo(json.dumps(_report_json(report)))
        return
    if not report.groups:
        click.echo("no deliveries")
        return
    click.echo("  ".join(f"{s.value}={n}" for s, n in sorted(report.by_status.items())))
    for g in report.groups:
        click.echo(
            f"{g.deliveries:>6}  {g.status.value:<10}  {g.error or '(no error)'}"
            f"  [{when(g.first_at)} .. {when(g.last_at)}]  endpoints {list(g.endpoint_ids)}"
        )
        if g.last_status is not None or g.response:
            click.echo(
                f"        last status {g.last_status}, response: {(g.response or '')[:200]!r}"
            )


def _report_json(report: DeliveryReport) -> dict[str, Any]:
    return {
        "by_status": {s.value: n for s, n in report.by_status.items()},
        "groups": [
            {
                "status": g.status.value,
                "error": g.error,
                "deliveries": g.deliveries,
                "first_at": when(g.first_at),
                "last_at": when(g.last_at),
                "last_status": g.last_status,
                "response": g.response,
                "endpoint_ids": list(g.endpoint_ids),
            }
            for g in report.groups
        ],
    }


def _moment(value: str | None, name: str, env: str) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise setting_error(
            name, env, f"{value!r} is not an ISO time (2026-05-01T12:00Z)"
        ) from None
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


def _tenant_replay(database_url: str, tenant: str, event_id: int, endpoint: int | None) -> Replay:
    """The replay of one tenant's event, through the host API (refused for another tenant's)."""
    with (
        database_errors(),
        psycopg.connect(database_url, connect_timeout=10) as conn,
        conn.transaction(),
    ):
        try:
            return TenantWebhooks(tenant).replay(conn, event_id, endpoint_id=endpoint)
        except WebhookRefused as exc:
            raise Failure(str(exc)) from None


def _replay_json(replay: Replay) -> dict[str, Any]:
    return {
        "event_id": replay.event_id,
        "replay_of": replay.replay_of,
        "msg_id": replay.msg_id,
        "endpoint_id": replay.endpoint_id,
        "deliveries": list(replay.delivery_ids),
        "resumed": replay.resumed,
    }


@click.command("replay")
@click.argument("event_id", type=click.IntRange(min=1), required=False)
@database_url()
@option("--endpoint", env="OUTBOX_ENDPOINT", type=click.IntRange(min=1), help="Only this endpoint.")
@option(
    "--failed",
    env="OUTBOX_REPLAY_FAILED",
    is_flag=True,
    help="Replay the failed deliveries of a time range.",
)
@option(
    "--since",
    env="OUTBOX_REPLAY_SINCE",
    metavar="ISO-TIME",
    help="With --failed: failed at or after (UTC if no offset).",
)
@option(
    "--before", env="OUTBOX_REPLAY_BEFORE", metavar="ISO-TIME", help="With --failed: failed before."
)
@tenant_option(
    required=False,
    help_text="Only this tenant's: the event must be its, --failed replays its endpoints' only.",
)
@json_option
def replay_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    event_id: int | None,
    database_url: str,
    endpoint: int | None,
    tenant: str | None,
    failed: bool,  # noqa: FBT001
    since: str | None,
    before: str | None,
    as_json: bool,  # noqa: FBT001
) -> None:
    """Replay an event (to --endpoint, or to every endpoint of its type), or with --failed the
    failed deliveries of a time range. A replay interrupted earlier is completed, never doubled."""
    # No process here makes a first attempt: the deliveries are due at once for the retry lane of
    # `outbox worker --lane webhooks` (no birth lease, no claim, no attempt counted).
    lease: dict[str, Any] = {"birth_lease": _NO_BIRTH_LEASE, "birth_token": None}
    if failed:
        if event_id is not None:
            raise SettingError("give an EVENT_ID or --failed with --since, not both")
        start = _moment(since, "--since", "OUTBOX_REPLAY_SINCE")
        if start is None:
            raise setting_error("--since", "OUTBOX_REPLAY_SINCE", "--failed needs --since")
        end = _moment(before, "--before", "OUTBOX_REPLAY_BEFORE")
        replays: list[Replay] = _repository_call(
            database_url,
            lambda r: r.replay_failed(
                since=start, before=end, endpoint_id=endpoint, tenant=tenant, **lease
            ),
        )
    else:
        if event_id is None:
            raise SettingError("name the event: outbox replay EVENT_ID, or --failed --since TIME")
        if since is not None or before is not None:
            raise SettingError("--since and --before go with --failed")
        replays = [
            _tenant_replay(database_url, tenant, event_id, endpoint)
            if tenant is not None
            else _repository_call(
                database_url, lambda r: r.replay(event_id, endpoint_id=endpoint, **lease)
            )
        ]
    if as_json:
        click.echo(json.dumps({"replays": [_replay_json(r) for r in replays]}))
        return
    if not replays:
        click.echo("no failed delivery to replay")
    for r in replays:
        verb = "completed the interrupted replay of" if r.resumed else "replayed"
        click.echo(
            f"{verb} event {r.replay_of} as event {r.event_id} ({r.msg_id}):"
            f" {len(r.delivery_ids)} delivery(ies) due now"
        )
