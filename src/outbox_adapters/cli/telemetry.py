"""The worker commands' telemetry options: ``--metrics-port`` / ``--metrics-host`` (ADR 0028).

:func:`metrics_options` adds both to a command and, when a port is given, serves the library's
metrics (:func:`outbox_adapters.telemetry.prometheus.serve`) for as long as the command runs. With
no port nothing listens. The host defaults to 127.0.0.1; any other host is the operator's explicit
choice, and the command says so when it is not a loopback address.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from outbox_adapters.cli.options import SettingError, option
from outbox_adapters.telemetry.prometheus import DEFAULT_HOST, is_loopback, serve
from outbox_core.errors import ConfigurationError

__all__ = ["metrics_options"]

F = TypeVar("F", bound=Callable[..., Any])


def metrics_options(command: F) -> F:
    """Add ``--metrics-port`` and ``--metrics-host`` to ``command`` (put it under ``@click.command``)."""

    @option(
        "--metrics-port",
        env="OUTBOX_METRICS_PORT",
        type=click.IntRange(1, 65535),
        default=None,
        help="Serve Prometheus metrics on this port (/metrics); none: no endpoint.",
    )
    @option(
        "--metrics-host",
        env="OUTBOX_METRICS_HOST",
        default=DEFAULT_HOST,
        show_default=True,
        help="The address the metrics endpoint binds to (anything but loopback is exposed).",
    )
    @functools.wraps(command)
    def wrapper(*args: Any, metrics_port: int | None, metrics_host: str, **kwargs: Any) -> Any:  # noqa: ANN401
        if metrics_port is None:
            return command(*args, **kwargs)
        try:
            endpoint = serve(metrics_port, host=metrics_host)
        except ConfigurationError as exc:
            raise SettingError(f"--metrics-port/--metrics-host: {exc}") from None
        click.echo(f"metrics: {endpoint.url}")
        if not is_loopback(metrics_host):
            click.echo(
                f"warning: the metrics endpoint listens on {metrics_host}, beyond this host",
                err=True,
            )
        try:
            return command(*args, **kwargs)
        finally:
            endpoint.close()

    return wrapper  # type: ignore[return-value]
