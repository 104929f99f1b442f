"""The trace context a row carries, as text, and as the W3C headers a broker message carries.

A row stores its enqueue's context in one nullable text column (``trace_context``): the W3C
``traceparent`` header's value, then, when there is one, a space and the ``tracestate`` value
(``"00-<trace id>-<span id>-01 vendor=value"``). A traceparent never holds a space, so the split is
unambiguous. The relay puts the same two values in the broker message's headers, so a consumer
channel links its delivery to the original enqueue (W3C Trace Context, the header names of
https://www.w3.org/TR/trace-context/). These are plain string functions: they need no OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from outbox_core.messages import usable_trace_context

__all__ = ["TRACEPARENT", "TRACESTATE", "from_headers", "to_headers"]

#: The W3C Trace Context header names (lower case, as OpenTelemetry's propagator writes them).
TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"


def to_headers(trace_context: str | None) -> dict[str, str]:
    """The W3C headers of a stored trace context (``{}`` for none)."""
    if trace_context is None:
        return {}
    parent, _, state = trace_context.partition(" ")
    headers = {TRACEPARENT: parent}
    if state:
        headers[TRACESTATE] = state
    return headers


def from_headers(headers: Mapping[str, str]) -> str | None:
    """The stored form of the W3C headers in ``headers`` (any case); ``None`` when there is no
    usable traceparent."""
    found = {name.lower(): value for name, value in headers.items()}
    parent = found.get(TRACEPARENT, "").strip()
    if not parent or " " in parent:
        return None
    state = found.get(TRACESTATE, "").strip()
    return usable_trace_context(f"{parent} {state}" if state else parent)
