"""How ``outbox endpoints`` shows an endpoint: its JSON, its health's JSON, its rate cap, and what
its receiver verifies with (a ``v1`` secret itself, a ``v1a`` key's public key; never a private
key)."""

from __future__ import annotations

from typing import Any

import click

from outbox_adapters.cli.options import when
from outbox_adapters.postgres.webhooks import Endpoint
from outbox_adapters.webhook_keys import public_key_of
from outbox_adapters.webhook_model import EndpointHealth
from outbox_core.signing_keys import SigningKey

__all__ = ["echo_handed_out", "endpoint_json", "handed_out", "health_json", "rate"]


def endpoint_json(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "id": endpoint.id,
        "tenant": endpoint.tenant,
        "url": endpoint.url,
        "event_types": list(endpoint.event_types),
        "enabled": endpoint.enabled,
        "owner_email": endpoint.owner_email,
        "disabled_reason": endpoint.disabled_reason,
        "disabled_at": when(endpoint.disabled_at),
        "created_at": when(endpoint.created_at),
        "scheme": endpoint.scheme,
        "max_per_second": endpoint.max_per_second,
        "description": endpoint.description,
    }


def health_json(health: EndpointHealth) -> dict[str, Any]:
    return {
        "last_success_at": when(health.last_success_at),
        "last_failure_at": when(health.last_failure_at),
        "failure_streak": health.failure_streak,
    }


def rate(endpoint: Endpoint) -> str:
    return "no rate cap" if endpoint.max_per_second is None else f"{endpoint.max_per_second}/s"


def handed_out(key_text: str) -> dict[str, str]:
    """What the receiver is given: a v1 secret itself, or a v1a key's PUBLIC key (never the
    private key)."""
    if key_text.startswith("whsk_"):
        return {"public_key": public_key_of(SigningKey.parse(key_text)).to_text()}
    return {"secret": key_text}


def echo_handed_out(handed: dict[str, str]) -> None:
    if "public_key" in handed:
        click.echo(f"public key: {handed['public_key']}")
        click.echo("(give the public key to the receiver; the private key is never shown)")
    else:
        click.echo(f"secret: {handed['secret']}")
        click.echo("(give the secret to the receiver; it is not shown again)")
