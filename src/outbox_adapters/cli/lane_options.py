"""The options of the event lanes (``--broker``, ``--topic``, ``--max-age-days``, ``--public-url``,
``--platform-owner``), shared by ``outbox worker``, ``outbox relay``, ``outbox consume`` and
``outbox dlq``: one definition each, so the commands cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from outbox_adapters.app.event_lanes import DEFAULT_TOPIC
from outbox_adapters.brokers import require_broker
from outbox_adapters.cli.options import option, setting_error
from outbox_core.errors import ConfigurationError

__all__ = [
    "DEFAULT_TOPIC",
    "broker_option",
    "max_age_option",
    "platform_owner_option",
    "public_url_option",
    "topic_option",
    "topics_option",
]

F = TypeVar("F", bound=Callable[..., Any])


def _checked_broker(_ctx: click.Context, _param: click.Parameter, url: str | None) -> str | None:
    """The URL, once it parses and its broker's extra is installed (before anything connects)."""
    if url is not None:
        try:
            require_broker(url)
        except (ConfigurationError, ValueError) as exc:
            raise setting_error("--broker", "OUTBOX_BROKER", str(exc)) from None
    return url


def broker_option(*, required: bool) -> Callable[[F], F]:
    return option(
        "--broker",
        env="OUTBOX_BROKER",
        required=required,
        callback=_checked_broker,
        metavar="URL",
        help="nats://HOST:PORT or kafka://HOST:PORT[,HOST:PORT...]; over TLS tls://... (NATS)"
        " or kafkas://... (Kafka), with USER:PASSWORD@ and, for Kafka, ?sasl=MECH;"
        " ?ca=PATH trusts a private CA",
    )


def topics_option(command: F) -> F:
    """``--topic`` repeatable (the relay declares and publishes every one)."""
    return option(
        "--topic",
        "topics",
        env="OUTBOX_TOPIC",
        multiple=True,
        default=(DEFAULT_TOPIC,),
        show_default=True,
        help="A topic (NATS subject / Kafka topic) to declare and work; repeat for more"
        " (a consumer channel takes one).",
    )(command)


def topic_option(command: F) -> F:
    """``--topic`` once (a consumer channel, the dead letters of one topic)."""
    return option(
        "--topic", env="OUTBOX_TOPIC", default=DEFAULT_TOPIC, show_default=True, help="Topic."
    )(command)


def max_age_option(command: F) -> F:
    return option(
        "--max-age-days",
        env="OUTBOX_STREAM_MAX_AGE_DAYS",
        type=click.FloatRange(min=0, min_open=True),
        default=7.0,
        show_default=True,
        help="How long the broker keeps events (short: they carry personal data).",
    )(command)


def public_url_option(command: F) -> F:
    return option(
        "--public-url",
        env="OUTBOX_PUBLIC_URL",
        metavar="URL",
        help="The application's public URL, for the links in e-mails (email channel: required).",
    )(command)


def platform_owner_option(command: F) -> F:
    return option(
        "--platform-owner",
        env="OUTBOX_PLATFORM_OWNER",
        metavar="ADDR",
        help="Who is told of every new tenant (owner_notify); none: that e-mail is left out.",
    )(command)
