"""``outbox endpoints add|list|disable|enable|rotate-secret|public-key``: the webhook endpoints
(ADR 0017).

A new endpoint's URL passes the destination guard's registration check first (ADR 0016); its first
key is drawn here (``secrets.token_bytes(32)``). With ``--scheme v1`` (the default) it is an HMAC
secret, printed once as ``whsec_...``: the receiver needs it to verify signatures, and the library
never shows it again. With ``--scheme v1a`` it is an Ed25519 private key, which is never shown:
the command prints its PUBLIC key, ``whpk_...``, which the receiver verifies with (``public-key``
prints it again, any time). ``--json`` prints one JSON document.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import click

from outbox_adapters.cli.endpoint_views import (
    echo_handed_out,
    endpoint_json,
    handed_out,
    health_json,
    rate,
)
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
    tenant_option,
    when,
)
from outbox_adapters.cli.tenant_scope import for_tenant
from outbox_adapters.http import DestinationGuard
from outbox_adapters.postgres.webhooks import (
    DEFAULT_SECRET_OVERLAP,
    Endpoint,
    Missed,
    WebhookRefused,
    WebhookRepository,
)
from outbox_adapters.webhook_keys import new_signing_secret
from outbox_adapters.webhook_model import EndpointHealth
from outbox_core.errors import (
    BlockedDestination,
    ConfigurationError,
    InvalidMessage,
    SecretUnavailable,
)
from outbox_core.ports import Encryptor
from outbox_core.signing_keys import V1, V1A
from outbox_core.webhook_secrets import SCHEMES

__all__ = [
    "allow_options",
    "destination_guard",
    "endpoint_json",
    "endpoints_group",
    "json_option",
    "when",
]


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
    except (WebhookRefused, SecretUnavailable) as exc:
        raise Failure(str(exc)) from None


@click.group("endpoints")
def endpoints_group() -> None:
    """Webhook endpoints: add, list, show, disable, enable, rotate-secret, public-key."""


@endpoints_group.command("add")
@database_url()
@tenant_option(required=True, help_text="The tenant it belongs to: it receives only its events.")
@option("--url", env="OUTBOX_ENDPOINT_URL", required=True, help="Where the events are POSTed.")
@option(
    "--event-type",
    "event_types",
    env="OUTBOX_EVENT_TYPE",
    required=True,
    multiple=True,
    help="An event type it receives ('*' for every type, 'invoice.*' for every type under"
    " 'invoice.'); repeat for more.",
)
@option("--owner", env="OUTBOX_ENDPOINT_OWNER", help="Owner's e-mail, told when it is disabled.")
@option(
    "--description", env="OUTBOX_ENDPOINT_DESCRIPTION", help="What it is (shown by the portal)."
)
@option(
    "--scheme",
    env="OUTBOX_ENDPOINT_SCHEME",
    type=click.Choice(SCHEMES),
    default=V1,
    show_default=True,
    help="v1: HMAC-SHA256, a shared whsec_ secret; v1a: Ed25519, the receiver gets a whpk_ public"
    " key (needs the crypto extra).",
)
@option(
    "--max-per-second",
    env="OUTBOX_ENDPOINT_MAX_PER_SECOND",
    type=int,
    default=None,
    help="At most this many deliveries a second to it, per sending process (default: no cap).",
)
@allow_options
@encryption_keys()
@json_option
def add_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    tenant: str,
    url: str,
    event_types: tuple[str, ...],
    owner: str | None,
    description: str | None,
    scheme: str,
    max_per_second: int | None,
    allow: tuple[str, ...],
    allow_http: bool,  # noqa: FBT001
    encryption_keys: str | None,
    encryption_keys_file: str | None,
    as_json: bool,  # noqa: FBT001
) -> None:
    """Register an endpoint; prints its id and what its receiver verifies with: the first signing
    secret (v1, shown once) or the public key (v1a). With encryption keys the secret or private
    key is stored sealed under the first key."""
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    _check_url(url, allow, allow_http=allow_http)
    secret = new_signing_secret(scheme)
    handed = handed_out(secret)  # v1a: the crypto extra is checked before anything is written
    try:
        endpoint: Endpoint = _repository_call(
            database_url,
            lambda repo: repo.add_endpoint(
                url,
                event_types,
                tenant=tenant,
                owner_email=owner,
                secret=secret,
                max_per_second=max_per_second,
                description=description,
            ),
            encryptor,
        )
    except InvalidMessage as exc:
        raise SettingError(f"the endpoint was refused, nothing was written: {exc}") from None
    if as_json:
        click.echo(json.dumps({"endpoint": endpoint_json(endpoint), **handed}))
        return
    click.echo(
        f"endpoint {endpoint.id} of tenant {endpoint.tenant!r} added for"
        f" {', '.join(endpoint.event_types)} (scheme {endpoint.scheme}, {rate(endpoint)})"
    )
    echo_handed_out(handed)
    click.echo(describe_secrets(encryptor))


@endpoints_group.command("list")
@database_url()
@tenant_option(required=False, help_text="Only this tenant's endpoints.")
@json_option
def list_command(database_url: str, tenant: str | None, as_json: bool) -> None:  # noqa: FBT001
    """Every endpoint (or one tenant's): id, tenant, state, event types, URL, signature scheme,
    rate cap (never a secret)."""
    endpoints: list[Endpoint] = _repository_call(
        database_url, lambda r: r.list_endpoints(tenant=tenant)
    )
    if as_json:
        click.echo(json.dumps({"endpoints": [endpoint_json(e) for e in endpoints]}))
        return
    if not endpoints:
        click.echo("no endpoints")
    for e in endpoints:
        state = "enabled" if e.enabled else f"disabled ({e.disabled_reason})"
        click.echo(
            f"{e.id:>6}  {e.tenant}  {state}  {','.join(e.event_types)}  {e.url}  {e.scheme}"
            f"  {rate(e)}"
        )


@endpoints_group.command("show")
@click.argument("endpoint_id", type=click.IntRange(min=1))
@database_url()
@for_tenant
@json_option
def show_command(endpoint_id: int, database_url: str, as_json: bool) -> None:  # noqa: FBT001
    """One endpoint: its settings (rate cap included) and its health: last success, last failure,
    failure streak since the last success, and why and since when it is disabled."""

    async def read(repo: WebhookRepository) -> tuple[Endpoint | None, EndpointHealth]:
        return await repo.endpoint(endpoint_id), await repo.endpoint_health(endpoint_id)

    endpoint, health = _repository_call(database_url, read)
    assert endpoint is not None  # noqa: S101 - endpoint_health refused an unknown one
    if as_json:
        click.echo(json.dumps({"endpoint": endpoint_json(endpoint), "health": health_json(health)}))
        return
    state = "enabled" if health.enabled else "disabled"
    click.echo(f"endpoint {endpoint.id}: {endpoint.url}")
    click.echo(f"  tenant:         {endpoint.tenant}")
    click.echo(f"  event types:    {', '.join(endpoint.event_types)}")
    click.echo(f"  scheme:         {endpoint.scheme}")
    click.echo(f"  rate cap:       {rate(endpoint)}")
    click.echo(f"  state:          {state}")
    if not health.enabled:
        click.echo(f"  disabled:       {when(health.disabled_at)} ({health.disabled_reason})")
    click.echo(f"  last success:   {when(health.last_success_at) or 'never'}")
    click.echo(f"  last failure:   {when(health.last_failure_at) or 'never'}")
    click.echo(f"  failure streak: {health.failure_streak}")


@endpoints_group.command("disable")
@click.argument("endpoint_id", type=click.IntRange(min=1))
@database_url()
@for_tenant
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
@for_tenant
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
@for_tenant
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
    """Add a new signing secret (or Ed25519 key, for a v1a endpoint); the old ones keep signing
    for the overlap. Prints the new secret (v1) or the new public key (v1a). With encryption keys
    it is stored sealed under the first key."""
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    overlap = timedelta(hours=overlap_hours)

    async def rotate(repo: WebhookRepository) -> str:
        endpoint = await repo.endpoint(endpoint_id)
        secret = new_signing_secret(V1 if endpoint is None else endpoint.scheme)
        await repo.rotate_secret(endpoint_id, new_secret=secret, overlap=overlap)
        return secret

    handed = handed_out(_repository_call(database_url, rotate, encryptor))
    if as_json:
        click.echo(
            json.dumps({"endpoint_id": endpoint_id, **handed, "overlap_hours": overlap_hours})
        )
        return
    if "public_key" in handed:
        click.echo(f"endpoint {endpoint_id}: new public key {handed['public_key']}")
        click.echo(
            f"(the old keys keep signing for {overlap_hours:g} h: give the receiver the new public"
            " key beside the old one; `outbox endpoints public-key` lists them)"
        )
    else:
        click.echo(f"endpoint {endpoint_id}: new secret {handed['secret']}")
        click.echo(
            f"(the old secrets keep signing for {overlap_hours:g} h; this one is not shown again)"
        )
    click.echo(describe_secrets(encryptor))


@endpoints_group.command("public-key")
@click.argument("endpoint_id", type=click.IntRange(min=1))
@database_url()
@for_tenant
@encryption_keys()
@json_option
def public_key_command(
    endpoint_id: int,
    database_url: str,
    encryption_keys: str | None,
    encryption_keys_file: str | None,
    as_json: bool,  # noqa: FBT001
) -> None:
    """The whpk_ public keys a v1a endpoint's receiver verifies with (every unexpired key, newest
    first: two while a key rotates). Needs the encryption keys its private keys are sealed under."""
    encryptor = encryptor_from(encryption_keys, encryption_keys_file)
    keys = _repository_call(database_url, lambda r: r.public_keys(endpoint_id), encryptor)
    texts = [key.to_text() for key in keys]
    if as_json:
        click.echo(json.dumps({"endpoint_id": endpoint_id, "scheme": V1A, "public_keys": texts}))
        return
    for text in texts:
        click.echo(text)
