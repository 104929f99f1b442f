"""The report's sections of the messaging comparisons: webhooks, the relay and its consumer
channel, the feed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.cpu import shares_table
from bench.markdown import cell, get, table

__all__ = ["feed", "relay", "webhooks"]


def _versus(r: Mapping[str, Any], path: str | None, *, bold: bool) -> str:
    """The ratio cell at ``path`` ("1 times" for the baseline's own row), bold for the library's."""
    if path is None:
        return "1\N{MULTIPLICATION SIGN}"
    text = cell(r, path)
    return f"**{text}**" if bold else text


def webhooks(r: Mapping[str, Any]) -> list[str]:
    variant = get(r, "webhooks.variant") or {}
    windows = get(r, "webhooks.duplicate_window") or {}
    rows = [
        ("naive", "naive", "naive_per_s", None),
        ("naive, async", "naive_async", "naive_async_per_s", "naive_async_ratio"),
        ("**library**", "library", "library_per_s", "ratio"),
        (
            "library, one first attempt in flight",
            "library_one_in_flight",
            "library_one_in_flight_per_s",
            "one_in_flight_ratio",
        ),
        (
            "library, one fan-out transaction per event (before)",
            "library_per_row_fan_out",
            "library_per_row_fan_out_per_s",
            "per_row_fan_out_ratio",
        ),
        (
            "library, 100 ordering keys (ADR 0018)",
            "library_ordered_100_keys",
            "library_ordered_100_keys_per_s",
            "ordered_ratio",
        ),
        (
            "library, 1,000 tenants' endpoints (ADR 0017)",
            "library_1000_tenants",
            "library_1000_tenants_per_s",
            "tenants_1000_ratio",
        ),
        ("one reused client", "reused_client", "reused_client_per_s", "reused_client_ratio"),
        ("sender only", "sender_only", "sender_only_per_s", "sender_only_ratio"),
    ]
    body = [
        [
            label,
            str(variant.get(key, "")),
            cell(r, f"webhooks.{figure}"),
            _versus(r, versus and f"webhooks.{versus}", bold=key == "library"),
            str(windows.get(key, "")),
        ]
        for label, key, figure, versus in rows
    ]
    return [
        "## Webhooks end to end (HTTP receiver in its own process)",
        "",
        (
            f"{cell(r, 'webhooks.events')} events per run, one endpoint; {variant.get('receiver', '')}."
            f" Goal: library / naive ≥ 10. The batched fan-out against one transaction per event:"
            f" {cell(r, 'webhooks.batched_vs_per_row')}. 1,000 tenants' endpoints against one:"
            f" {cell(r, 'webhooks.tenants_1000_vs_one')}."
        ),
        "",
        *table(["client", "how", "deliveries/s", "vs naive", "duplicate window"], body),
    ]


def relay(r: Mapping[str, Any]) -> list[str]:
    variant = get(r, "relay.variant") or {}
    rows = [
        ("bare publisher loop", "bare", "bare_per_s", None),
        ("**library**", "library", "library_per_s", "ratio"),
        ("library, strict", "library_strict", "library_strict_per_s", "strict_ratio"),
        ("bare, in flight", "bare_in_flight", "bare_in_flight_per_s", "bare_in_flight_ratio"),
        ("publisher only", "publisher_only", "publisher_only_per_s", "publisher_only_ratio"),
        ("store only (no publish)", "store_only", "store_only_per_s", "store_only_ratio"),
    ]
    body = [
        [
            label,
            str(variant.get(key, "")),
            cell(r, f"relay.{figure}"),
            _versus(r, versus and f"relay.{versus}", bold=key == "library"),
        ]
        for label, key, figure, versus in rows
    ]
    return [
        "## Relay and consumers (NATS JetStream in its own process)",
        "",
        (
            f"{cell(r, 'relay.events')} events per relay run, {variant.get('keys', '')};"
            f" {cell(r, 'relay.broker')}. Goal: library / bare ≥ 0.8."
            f" Library / bare in flight: {cell(r, 'relay.library_vs_bare_in_flight')}."
        ),
        "",
        *table(["publisher", "how", "events/s", "vs bare"], body),
        (
            f"Consumer to e-mail: {cell(r, 'relay.consumer_email_events_per_s')} events/s"
            f" ({cell(r, 'relay.consumer_emails_per_s')} e-mails/s),"
            f" {cell(r, 'relay.consumer_events')} events per run; {cell(r, 'relay.consumer_variant')}."
            f" The e-mail lane alone: {cell(r, 'relay.email_lane_alone_emails_per_s')} e-mails/s;"
            f" channel / lane alone: {cell(r, 'relay.consumer_vs_email_lane')} (goal ≥ 0.8)."
        ),
        "",
        "CPU while each clock ran (from /proc; 10 ms ticks):",
        "",
        *shares_table("relay variant", get(r, "relay.cpu_per_event"), "event"),
        *shares_table("consumer to e-mail", get(r, "relay.consumer_cpu_per_email"), "e-mail"),
    ]


def feed(r: Mapping[str, Any]) -> list[str]:
    body = [
        [f"{n:,}", "1", cell(r, f"feed.streams_{n}.p50_ms"), cell(r, f"feed.streams_{n}.p99_ms")]
        for n in (1, 100, 1000)
    ]
    body.append(
        [
            "1,000 (collector tuned)",
            "1",
            cell(r, "feed.streams_1000_collector_tuned.p50_ms"),
            cell(r, "feed.streams_1000_collector_tuned.p99_ms"),
        ]
    )
    body.append(
        [
            "5,000",
            "2",
            cell(r, "feed.streams_5000_2_processes.p50_ms"),
            cell(r, "feed.streams_5000_2_processes.p99_ms"),
        ]
    )
    return [
        "## Feed push latency (insert → SSE refresh)",
        "",
        (
            f"{cell(r, 'feed.inserts')} inserts per series; {cell(r, 'feed.variant')}."
            " Goal: p99 < 50 ms at 1,000 streams, < 150 ms at 5,000 over two processes."
            f" Memory per open stream: {cell(r, 'feed.memory_per_stream_kib', ' KiB')}. The server"
            f" processes' full garbage collections: {cell(r, 'feed.server_full_collections')},"
            f" the longest {cell(r, 'feed.server_longest_full_collection_ms', ' ms')}."
        ),
        "",
        *table(["open streams", "server processes", "p50, ms", "p99, ms"], body),
    ]
