"""A Prometheus ``/metrics`` endpoint for the library's metrics, only when asked for.

``outbox worker|relay|consume --metrics-port N`` (or :func:`serve` for an embedder) starts it; with
no port, nothing listens. It binds to ``127.0.0.1`` unless a host is given (``--metrics-host``): the
figures name lanes and error counts, which an operator may not want on every interface, so exposing
them further is a decision someone writes down.

It is the OpenTelemetry SDK with its Prometheus reader (``opentelemetry-exporter-prometheus``) over
``prometheus_client``'s HTTP server (a thread): the same instruments feed an OTLP exporter a host
configures itself, so there is one instrumentation, not two (ADR 0028). The ``prometheus`` extra
brings all three. The reader registers with ``prometheus_client``'s default registry, so the
process and Python collectors come along; :meth:`MetricsEndpoint.close` unregisters it.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Final

import attrs

from outbox_adapters.telemetry import providers
from outbox_core.errors import ConfigurationError

__all__ = ["DEFAULT_HOST", "MetricsEndpoint", "is_loopback", "serve"]

#: Where the endpoint listens unless told otherwise: this host only.
DEFAULT_HOST: Final = "127.0.0.1"
_MISSING: Final = (
    "a metrics endpoint needs the prometheus extra (opentelemetry-sdk,"
    " opentelemetry-exporter-prometheus, prometheus-client):"
    " pip install 'leased-outbox[prometheus]'"
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@attrs.define
class MetricsEndpoint:
    """A running endpoint; :meth:`close` stops it and detaches its reader."""

    host: str
    port: int
    _server: Any
    _thread: Any
    _reader: Any
    _provider: Any

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._provider.shutdown()  # the reader unregisters its collector
        providers.use(tracer_provider=providers.current_tracer_provider())


def serve(port: int, *, host: str = DEFAULT_HOST) -> MetricsEndpoint:
    """Serve the library's metrics on ``http://host:port/metrics`` until :meth:`~MetricsEndpoint.close`.

    :class:`ConfigurationError` for a port outside 1-65535, an empty host, or a missing extra.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigurationError(f"a metrics port is 1 to 65535, got {port!r}")
    if not isinstance(host, str) or not host.strip():
        raise ConfigurationError(f"a metrics host is an address or a name, got {host!r}")
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: PLC0415
        from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
        from prometheus_client import start_http_server  # noqa: PLC0415
    except ImportError:
        raise ConfigurationError(_MISSING) from None
    reader = PrometheusMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        server, thread = start_http_server(port, addr=host)
    except OSError as exc:
        provider.shutdown()
        raise ConfigurationError(
            f"the metrics endpoint cannot listen on {host}:{port} ({exc.strerror or exc})"
        ) from None
    providers.use(tracer_provider=providers.current_tracer_provider(), meter_provider=provider)
    return MetricsEndpoint(host, port, server, thread, reader, provider)
