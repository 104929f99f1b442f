"""Where the library's tracer and meter come from: the OpenTelemetry API when it is installed, else
nothing at all.

``opentelemetry-api`` is optional (the ``otel`` extra). When it can't be imported, :data:`AVAILABLE`
is ``False``, :func:`tracer` and :func:`instruments` return ``None`` and every caller in
:mod:`outbox_adapters.telemetry` turns into a no-op; nothing else is imported. When it is installed,
the tracer and meter come from the global providers (``opentelemetry.trace.set_tracer_provider``,
``opentelemetry.metrics.set_meter_provider``: the host's own SDK set-up) unless :func:`use` names
others (a test's in-memory exporter, the ``--metrics-port`` endpoint). The global providers are
proxies until the host configures an SDK, so the instruments made here at first use still report
once it does; with no SDK at all they are the API's no-ops.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs

if TYPE_CHECKING:  # attrs never resolves these annotations: the API stays optional
    from opentelemetry.metrics import Counter, Histogram, MeterProvider  # noqa: TC004
    from opentelemetry.trace import Tracer, TracerProvider

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
except (
    ImportError
):  # pragma: no cover - the `otel` extra is part of `dev`; a subprocess test covers it
    otel_metrics = None  # type: ignore[assignment]
    otel_trace = None  # type: ignore[assignment]

__all__ = [
    "AVAILABLE",
    "SCOPE",
    "Instruments",
    "current_tracer_provider",
    "instruments",
    "tracer",
    "use",
]

#: Whether the OpenTelemetry API could be imported.
AVAILABLE: Final = otel_trace is not None
#: How often the global providers are looked at again while none is configured (seconds).
RECHECK: Final = 1.0
#: The global providers that mean "no SDK configured": the API's no-ops and the proxies it hands
#: out until a provider is set (the meter proxy's class is not exported: looked up, and left out
#: if an API version moved it, which only costs the proxy's no-op calls).
_UNCONFIGURED_TRACING: Final[tuple[type, ...]] = (
    (otel_trace.ProxyTracerProvider, otel_trace.NoOpTracerProvider) if AVAILABLE else ()
)
_UNCONFIGURED_METRICS: Final[tuple[type, ...]] = (
    (
        otel_metrics.NoOpMeterProvider,
        *(
            getattr(importlib.import_module("opentelemetry.metrics._internal"), name)
            for name in ("_ProxyMeterProvider",)
            if hasattr(importlib.import_module("opentelemetry.metrics._internal"), name)
        ),
    )
    if AVAILABLE
    else ()
)
#: The instrumentation scope of every span and metric the library makes.
SCOPE: Final = "leased_outbox"


@attrs.frozen
class Instruments:
    """The library's metric instruments (docs/operations.md, "Metrics"), from one meter."""

    sent: Counter
    skipped: Counter
    failed: Counter
    retried: Counter
    released: Counter
    stale_marks: Counter
    mark_errors: Counter
    handler_errors: Counter
    leadership_lost: Counter
    budget_overruns: Counter
    feed_streams_refused: Counter
    claim_duration: Histogram
    end_to_end: Histogram


_ROWS: Final = "{row}"


def _instruments(provider: MeterProvider | None) -> Instruments:
    assert otel_metrics is not None  # noqa: S101 - only called when AVAILABLE
    meter = otel_metrics.get_meter(SCOPE, meter_provider=provider)

    def rows(name: str, what: str) -> Counter:
        return meter.create_counter(f"outbox.{name}", unit=_ROWS, description=what)

    return Instruments(
        sent=rows("sent", "Rows delivered (marked dispatched)."),
        skipped=rows("skipped", "Rows resolved without a send (marked skipped)."),
        failed=rows("failed", "Rows that failed for good (marked failed: dead letters)."),
        retried=rows("retried", "Attempts that failed and were scheduled again."),
        released=rows("released", "Claimed rows given back unstarted (stop, gates)."),
        stale_marks=rows("stale_marks", "Marks the fence refused: another claim owned the row."),
        mark_errors=rows("mark_errors", "Marks not recorded within their budget."),
        handler_errors=rows("handler_errors", "Attempts whose handler raised (a bug)."),
        leadership_lost=rows(
            "leadership_lost", "Rows not started: the worker could not prove its leadership."
        ),
        budget_overruns=meter.create_counter(
            "outbox.budget_overruns",
            unit="{overrun}",
            description="Row sends cut off by their budget (budget=row) and batches cut off by"
            " their timeout (budget=batch).",
        ),
        feed_streams_refused=meter.create_counter(
            "outbox.feed.streams_refused",
            unit="{stream}",
            description="New feed SSE streams refused at a cap: one principal's"
            " (limit=principal, 429) or the process's (limit=process, 503).",
        ),
        claim_duration=meter.create_histogram(
            "outbox.claim.duration", unit="s", description="How long one claim statement took."
        ),
        end_to_end=meter.create_histogram(
            "outbox.end_to_end.duration",
            unit="s",
            description="From the row's enqueue (its created stamp) to its dispatched mark.",
        ),
    )


@attrs.define
class _State:
    tracer: Any = None
    instruments: Instruments | None = None
    tracer_provider: Any = None
    meter_provider: Any = None
    #: When to look at each unconfigured global provider again (monotonic seconds).
    recheck_at: dict[str, float] = attrs.Factory(dict)


_state = _State()
_lock = threading.Lock()


def use(
    *, tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
) -> None:
    """Make the library's spans and metrics with these providers (``None``: the global ones).

    For tests (an SDK ``TracerProvider`` with an in-memory exporter) and for an embedder that keeps
    its providers out of the globals. Takes effect for the next span and the next measurement.
    """
    with _lock:
        _state.tracer_provider = tracer_provider
        _state.meter_provider = meter_provider
        _state.tracer = None
        _state.instruments = None
        _state.recheck_at.clear()


def current_tracer_provider() -> TracerProvider | None:
    """The tracer provider :func:`use` named (``None``: the global one)."""
    return _state.tracer_provider  # type: ignore[no-any-return]


def tracer() -> Tracer | None:
    """The library's tracer; ``None`` when the OpenTelemetry API is not installed, or while no
    tracer provider is configured (the global one is still the API's proxy or no-op): its spans
    would record nothing, and making them costs tens of microseconds a row. Looked at again at
    most every :data:`RECHECK` seconds, so a host that configures its SDK after the worker started
    is traced from then on."""
    found: Tracer | None = _state.tracer
    if found is not None or not AVAILABLE:
        return found
    provider = _state.tracer_provider
    if provider is None:
        provider = _configured(otel_trace.get_tracer_provider, _UNCONFIGURED_TRACING, "tracing")
        if provider is None:
            return None
    with _lock:
        found = _state.tracer = otel_trace.get_tracer(SCOPE, tracer_provider=provider)
    return found


def instruments() -> Instruments | None:
    """The library's instruments; ``None`` when the OpenTelemetry API is not installed, or while no
    meter provider is configured (as for :func:`tracer`)."""
    found = _state.instruments
    if found is not None or not AVAILABLE:
        return found
    provider = _state.meter_provider
    if provider is None:
        provider = _configured(otel_metrics.get_meter_provider, _UNCONFIGURED_METRICS, "metrics")
        if provider is None:
            return None
    with _lock:
        found = _state.instruments = _instruments(provider)
    return found


def _configured(get: Callable[[], Any], unconfigured: tuple[type, ...], which: str) -> Any:  # noqa: ANN401 - a provider
    """The global provider ``get`` returns, or ``None`` while it is one of ``unconfigured`` (then
    not asked again for :data:`RECHECK` seconds: the API's lookup reads the environment)."""
    now = time.monotonic()
    if now < _state.recheck_at.get(which, 0.0):
        return None
    provider = get()
    if isinstance(provider, unconfigured):
        _state.recheck_at[which] = now + RECHECK
        return None
    return provider
