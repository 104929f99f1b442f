"""The OpenTelemetry SDK's in-memory exporter and metric reader, given to the library for a test.

``with recording() as otel:`` makes the library's spans and measurements go to an SDK tracer and
meter provider (``outbox_adapters.telemetry.use``) for the block, then back to the global providers
(which no test configures: the suite runs without an SDK set globally).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext

from outbox_adapters import telemetry

__all__ = ["Recorded", "context_of", "recording"]


def context_of(span: ReadableSpan) -> SpanContext:
    """A finished span's context (the SDK's spans always have one)."""
    context = span.get_span_context()
    assert context is not None
    return context


@attrs.define
class Recorded:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found: Sequence[ReadableSpan] = self.exporter.get_finished_spans()
        return [span for span in found if name is None or span.name == name]

    def span(self, name: str) -> ReadableSpan:
        [span] = self.spans(name)
        return span

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` (every attribute set) collected now."""
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for found in scope.metrics
            if found.name == metric
            for point in found.data.data_points
        ]

    def total(self, metric: str, **attributes: str) -> float:
        """The sum of a counter's points whose attributes include ``attributes``."""
        return float(
            sum(
                point.value
                for point in self.points(metric)
                if all(point.attributes.get(k) == v for k, v in attributes.items())
            )
        )


@contextlib.contextmanager
def recording() -> Iterator[Recorded]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.use(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Recorded(exporter, reader, tracer_provider)
    finally:
        telemetry.use()
        tracer_provider.shutdown()
        meter_provider.shutdown()
