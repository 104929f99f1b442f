"""Traces, metrics and structured logs (ADR 0028): OpenTelemetry API only, a no-op without it.

Theory of operation
-------------------
The library depends on ``opentelemetry-api`` alone, and only through the ``otel`` extra. Without it
:mod:`.providers` finds nothing and every function here does nothing (and imports nothing more).
With it, spans and measurements go to the global providers, which are the API's no-ops until the
host configures an SDK (or to the providers given to :func:`use`).

=================  ===========================================================================
module             what it does
=================  ===========================================================================
``providers``      the tracer and the instruments, from the API if installed; :func:`use`
``context``        the row's ``trace_context`` text and the W3C broker headers, both ways
``tracing``        the PRODUCER span at enqueue, the CONSUMER span per delivery (linked)
``metrics``        :class:`LaneMetrics`: what the runtime counted, reported per lane
``logs``           :func:`json_logging`: one JSON object per line, secrets redacted
``prometheus``     :func:`~.prometheus.serve`: a ``/metrics`` endpoint, only when asked for
=================  ===========================================================================

The runtime decides nothing here: it reports what it already counted (its ``BatchReport``), the
claim's duration and each dispatched row's age; the spans wrap work the runtime does anyway.
"""

from outbox_adapters.telemetry.context import from_headers, to_headers
from outbox_adapters.telemetry.logs import JsonFormatter, json_logging
from outbox_adapters.telemetry.metrics import LaneMetrics
from outbox_adapters.telemetry.providers import AVAILABLE, use
from outbox_adapters.telemetry.tracing import consuming, delivering, producing

__all__ = [
    "AVAILABLE",
    "JsonFormatter",
    "LaneMetrics",
    "consuming",
    "delivering",
    "from_headers",
    "json_logging",
    "producing",
    "to_headers",
    "use",
]
