"""``outbox endpoints add|list|disable|enable|rotate-secret``: the webhook endpoints (ADR 0017).

A new endpoint's URL passes the destination guard's registration check first (ADR 0016); its first secret is
drawn here (``secrets.token_bytes(32)``) and printed once, as ``whsec_...``: the receiver needs it
to verify signatures, and the library never shows it again. ``--json`` prints one JSON document.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import click

from outbox_adapters.cli.options import (
    Failure,
    SettingError,
    allow_options,
    connection_pool,
    database_url,
    describe_secrets,
    encryption_keys,
    encryptor_from,
    json_option,
    option,
    run,
    setting_error,
    when,
)
from outbox_adapters.http import DestinationGuard
from outbox_adapters.postgres.webhooks import (
    DEFAULT_SECRET_OVERLAP,
    Endpoint,
    Missed,
    WebhookRefused,
    WebhookRepository,
)
from outbox_core.errors import BlockedDestination, ConfigurationError, InvalidMessage
from outbox_core.ports import Encryptor
from outbox_core.signing import WebhookSecret

__all__ = [
    "allow_options",
    "destination_guard",
    "endpoint_json",
    "endpoints_group",
    "json_option",
    "when",
]


def endpoint_json(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "id": endpoint.id,
        "url": endpoint.url,
        "event_types": list(endpoint.event_types),
        "enabled": endpoint.enabled,
        "owner_email": endpoint.owner_email,
        "disabled_reason": endpoint.disabled_reason,
        "disabled_at": when(endpoint.disabled_at),
        "created_at": when(endpoint.created_at),
    }


def destination_guard(allow: Sequence[str], *, allow_http: bool) -> DestinationGuard:
    """The guard of ``--allow-destination`` / ``--allow-http`` (one place for every command)."""
    try:
        return DestinationGuard(allow=tuple(allow), require_https=not allow_http)
    except ConfigurationError as exc:
        raise setting_error("--allow-destination", "OUTBOX_ALLOW_DESTINATION", str(exc)) from None


def _check_url(url: str, allow: Sequence[str], *, allow_http: bool) -> None:
    """The registration check of an endpoint URL: the guard's rules, and every address the host
    resolves to now must be public or allowed (the sender checks again at every connect)."""
    guard = destination_guard(allow, allow_http=allow_http)
    try:
        run(guard.check_registration(url))
    except BlockedDestination as exc:
        raise setting_error("--url", "OUTBOX_ENDPOINT_URL", str(exc)) from None


def _repository_call(database: str, call: Any, encryptor: Encryptor | None = None) -> Any:  # noqa: ANN401
    async def go() -> Any:  # noqa: ANN401
        async with connection_pool(database) as pool:
            return await call(WebhookRepository(pool, encryptor=encryptor))

    try:
        return run(go())
    except WebhookRefused as exc:
        raise Failure(str(exc)) from None


@click.group("endpoints")
def endpoints_group() -> None:
    """Webhook endpoints: add, list, disable, enable, rotate-secret."""


@endpoints_group.command("add")
@database_url()
@option("--url", env="OUTBOX_ENDPOINT_URL", required=True, help="Where the events are POSTed.")
@option(
    "--event-type",
    "event_types",
    env="OUTBOX_EVENT_TYPE",
    required=True,
    multiple=True,
    help="An event type it receives ('*' for every type); repeat for more.",
)
@option("--owner", env="OUTBOX_ENDPOINT_OWNER", help="Owner's e-mail, told when it is disabled.")
@allow_options
@encryption_keys()
@json_option
def add_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    url: str,
    event_types: tuple[str, ...],
    owner: str | None,
    allow: tuple[str, ...],
    allow_http: bool,  # noqa: FBT001
    encryption_keys: str | None,
    encryption_keys_file: str | None,
    as_json: bool,  # noqa: FBT001
) -> None:
    """Register an endpoint; prints its id and its first signing secret (shown once). With
    encryption keys the secret is stored sealed under the first key."""
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    _check_url(url, allow, allow_http=allow_http)
    secret = WebhookSecret.generate_from(secrets.token_bytes(32)).to_text()
    try:
        endpoint: Endpoint = _repository_call(
            database_url,
            lambda repo: repo.add_endpoint(url, event_types, owner_email=owner, secret=secret),
            encryptor,
        )
    except InvalidMessage as exc:
        raise SettingError(f"the endpoint was refused, nothing was written: {exc}") from None
    if as_json:
        click.echo(json.dumps({"endpoint": endpoint_json(endpoint), "secret": secret}))
        return
    click.echo(f"endpoint {endpoint.id} added for {', '.join(endpoint.event_types)}")
    click.echo(f"secret: {secret}")
    click.echo("(give the secret to the receiver; it is not shown again)")
    click.echo(describe_secrets(encryptor))


@endpoints_group.command("list")
@database_url()
@json_option
def list_command(database_url: str, as_json: bool) -> None:  # noqa: FBT001
    """Every endpoint: id, state, event types, URL (never a secret)."""
    endpoints: list[Endpoint] = _repository_call(database_url, lambda r: r.list_endpoints())
    if as_json:
        click.echo(json.dumps({"endpoints": [endpoint_json(e) for e in endpoints]}))
        return
    if not endpoints:
        click.echo("no endpoints")
    for e in endpoints:
        state = "enabled" if e.enabled else f"disabled ({e.disabled_reason})"
        click.echo(f"{e.id:>6}  {state}  {','.join(e.event_types)}  {e.url}")


@endpoints_group.command("disable")
@click.argument("endpoint_id", type=click.IntRange(min=1))
@database_url()
@option(
    "--reason",
    env="OUTBOX_DISABLE_REASON",
    default="disabled by an operator",
    show_default=True,
    help="Why (kept on the endpoint).",
)
@json_option
def disable_command(endpoint_id: int, database_url: str, reason: str, as_json: bool) -> None:  # noqa: FBT001
    """Disable an endpoint: no new deliveries, its pending ones are not sent."""
    endpoint: Endpoint = _repository_call(
        database_url, lambda r: r.disable_endpoint(endpoint_id, reason)
    )
    if as_json:
        click.echo(json.dumps({"endpoint": endpoint_json(endpoint)}))
    else:
        click.echo(f"endpoint {endpoint.id} disabled: {endpoint.disabled_reason}")


@endpoints_group.command("enable")
@click.argument("endpoint_id", type=click.IntRange(min=1))
@database_url()
@json_option
def enable_command(endpoint_id: int, database_url: str, as_json: bool) -> None:  # noqa: FBT001
    """Enable an endpoint again, and list the events it missed while disabled."""
    missed: Missed = _repository_call(database_url, lambda r: r.enable_endpoint(endpoint_id))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "endpoint": endpoint_json(missed.endpoint),
                    "disabled_since": when(missed.disabled_since),
                    "missed_event_ids": list(missed.event_ids),
                }
            )
        )
        return
    click.echo(f"endpoint {endpoint_id} enabled")
    if missed.event_ids:
        click.echo(
            f"it missed {len(missed.event_ids)} event(s) while disabled:"
            f" {', '.join(map(str, missed.event_ids))}"
        )
        click.echo(f"replay each with: outbox replay EVENT_ID --endpoint {endpoint_id}")


@endpoints_group.command("rotate-secret")
@click.argument("endpoint_id", type=click.IntRange(min=1))
@database_url()
@option(
    "--overlap-hours",
    env="OUTBOX_SECRET_OVERLAP_HOURS",
    type=click.FloatRange(min=0),
    default=DEFAULT_SECRET_OVERLAP.total_seconds() / 3600,
    show_default=True,
    help="How long the old secrets keep signing beside the new one.",
)
@encryption_keys()
@json_option
def rotate_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    endpoint_id: int,
    database_url: str,
    overlap_hours: float,
    encryption_keys: str | None,
    encryption_keys_file: str | None,
    as_json: bool,  # noqa: FBT001
) -> None:
    """Add a new signing secret; the old ones keep signing for the overlap. Prints the new one.
    With encryption keys it is stored sealed under the first key."""
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    secret = WebhookSecret.generate_from(secrets.token_bytes(32)).to_text()
    overlap = timedelta(hours=overlap_hours)
    _repository_call(
        database_url,
        lambda r: r.rotate_secret(endpoint_id, new_secret=secret, overlap=overlap),
        encryptor,
    )
    if as_json:
        click.echo(
            json.dumps(
                {"endpoint_id": endpoint_id, "secret": secret, "overlap_hours": overlap_hours}
            )
        )
        return
    click.echo(f"endpoint {endpoint_id}: new secret {secret}")
    click.echo(
        f"(the old secrets keep signing for {overlap_hours:g} h; this one is not shown again)"
    )
    click.echo(describe_secrets(encryptor))
