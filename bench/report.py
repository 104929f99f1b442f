"""The results as JSON (``bench/results/latest.json``) and as markdown tables (``latest.md``).

In the JSON every figure is ``{"median", "min", "max", "runs", "unit"}``; the keys are the dotted
paths of the issue (``dispatch.1x10.ratio``, ``history.1M.claim_p50_ms``, ...), so later issues add
rows without moving any. A comparison that failed or was skipped holds ``{"error": ...}`` or
``{"skipped": ...}`` instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import retention, webhook_ordering
from bench.cpu import shares_table
from bench.stats import Figure

__all__ = ["markdown", "plain", "write"]


def plain(value: Any) -> Any:  # noqa: ANN401 - any JSON-able tree
    """The results tree with every :class:`Figure` turned into its JSON form."""
    if isinstance(value, Figure):
        return value.as_json()
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def _get(tree: Mapping[str, Any], path: str) -> Any:  # noqa: ANN401
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _cell(tree: Mapping[str, Any], path: str, suffix: str = "") -> str:
    value = _get(tree, path)
    if isinstance(value, Figure):
        return value.text() + suffix
    if value is None:
        return "—"
    return str(value)


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return [*lines, ""]


def _unavailable(section: Mapping[str, Any]) -> str | None:
    if "error" in section:
        return f"failed: {section['error']}"
    if "skipped" in section:
        return f"skipped: {section['skipped']}"
    return None


def _dispatch(r: Mapping[str, Any]) -> list[str]:
    body = [
        [
            f"{s} ({_cell(r, f'dispatch.{s}.workers')} worker(s) \N{MULTIPLICATION SIGN} batch {_cell(r, f'dispatch.{s}.batch')})",
            _cell(r, f"dispatch.{s}.raw_rows_per_s"),
            _cell(r, f"dispatch.{s}.library_rows_per_s"),
            "**" + _cell(r, f"dispatch.{s}.ratio") + "**",
            _cell(r, f"dispatch.{s}.library_grouped_rows_per_s"),
            _cell(r, f"dispatch.{s}.grouped_ratio"),
            _cell(r, f"dispatch.{s}.raw_cpu_us_per_row"),
            _cell(r, f"dispatch.{s}.library_cpu_us_per_row"),
            _cell(r, f"dispatch.{s}.cpu_ratio"),
        ]
        for s in ("1x10", "4x100")
    ]
    header = [
        "setting",
        "raw psycopg, rows/s",
        "library strict, rows/s",
        "library / raw",
        "library grouped (10 in flight, one mark statement per 10), rows/s",
        "grouped / raw",
        "CPU per row, raw, us",
        "CPU per row, library strict, us",
        "CPU library / raw",
    ]
    return [
        "## Dispatch overhead: the worker vs the same protocol on bare psycopg (no-op send)",
        "",
        (
            f"{_cell(r, 'dispatch.1x10.rows')} rows per drain. Goal: library / raw ≥ 0.9. "
            f"Workers: {_cell(r, 'dispatch.concurrency')}. CPU per row: "
            f"{_cell(r, 'dispatch.cpu')}: a second view of the overhead the code owns, as"
            " noisy as the rate on a machine whose CPU is shared."
        ),
        "",
        *_table(header, body),
    ]


def _peers(r: Mapping[str, Any]) -> list[str]:
    windows = _get(r, "peers.duplicate_window") or {}
    modes = _get(r, "peers.library.modes") or {}
    body = [
        [
            f"pgqueuer {_cell(r, 'peers.pgqueuer.version')}",
            f"{_cell(r, 'peers.pgqueuer.settings')}, driver {_cell(r, 'peers.pgqueuer.driver')}",
            _cell(r, "peers.pgqueuer.rows_per_s"),
            str(windows.get("pgqueuer", "")),
        ]
    ]
    if _get(r, "peers.pgqueuer_psycopg") is not None:
        body.append(
            [
                f"pgqueuer {_cell(r, 'peers.pgqueuer.version')}",
                f"{_cell(r, 'peers.pgqueuer.settings')}, driver psycopg (the library's)",
                _cell(r, "peers.pgqueuer_psycopg.rows_per_s"),
                str(windows.get("pgqueuer", "")),
            ]
        )
    for mode in modes:
        best = " (best)" if mode == _get(r, "peers.library.mode") else ""
        kind = {"strict": "library strict", "grouped": "library grouped N"}
        window = windows.get(kind.get(mode.split("_", 1)[0], "library in-flight N"))
        body.append(
            [
                f"library{best}",
                mode,
                _cell(r, f"peers.library.modes.{mode}.rows_per_s"),
                str(window or ""),
            ]
        )
    return [
        "## Against pgqueuer: drain rate of no-op jobs, same server, same run",
        "",
        (
            f"{_cell(r, 'peers.jobs')} jobs per drain. library (best mode) / pgqueuer:"
            f" **{_cell(r, 'peers.ratio')}**; vs pgqueuer on psycopg:"
            f" {_cell(r, 'peers.ratio_same_driver')}."
        ),
        "",
        *_table(["system", "mode", "jobs/s", "duplicate window"], body),
    ]


def _smtp(r: Mapping[str, Any]) -> list[str]:
    variant = _get(r, "smtp.variant") or {}
    body = [
        [
            "naive",
            str(variant.get("naive", "")),
            _cell(r, "smtp.naive_msgs_per_s"),
            "1\N{MULTIPLICATION SIGN}",
        ],
        [
            "library",
            str(variant.get("library", "")),
            _cell(r, "smtp.library_msgs_per_s"),
            "**" + _cell(r, "smtp.ratio") + "**",
        ],
        [
            "library, a mark per row",
            str(variant.get("library_per_row", "")),
            _cell(r, "smtp.library_per_row_msgs_per_s"),
            _cell(r, "smtp.per_row_ratio"),
        ],
        [
            "library strict",
            str(variant.get("library_strict", "")),
            _cell(r, "smtp.library_strict_msgs_per_s"),
            _cell(r, "smtp.strict_ratio"),
        ],
        [
            "mailer only",
            str(variant.get("mailer_only", "")),
            _cell(r, "smtp.mailer_only_msgs_per_s"),
            _cell(r, "smtp.mailer_only_ratio"),
        ],
    ]
    return [
        "## End to end over SMTP (STARTTLS sink in its own process)",
        "",
        f"{_cell(r, 'smtp.messages')} messages per run; {variant.get('sink', '')}.",
        "",
        *_table(["client", "how", "msg/s", "vs naive"], body),
    ]


def _versus(r: Mapping[str, Any], path: str | None, *, bold: bool) -> str:
    if path is None:
        return "1\N{MULTIPLICATION SIGN}"
    cell = _cell(r, f"webhooks.{path}")
    return f"**{cell}**" if bold else cell


def _webhooks(r: Mapping[str, Any]) -> list[str]:
    variant = _get(r, "webhooks.variant") or {}
    windows = _get(r, "webhooks.duplicate_window") or {}
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
            _cell(r, f"webhooks.{figure}"),
            _versus(r, versus, bold=key == "library"),
            str(windows.get(key, "")),
        ]
        for label, key, figure, versus in rows
    ]
    return [
        "## Webhooks end to end (HTTP receiver in its own process)",
        "",
        (
            f"{_cell(r, 'webhooks.events')} events per run, one endpoint; {variant.get('receiver', '')}."
            f" Goal: library / naive ≥ 10. The batched fan-out against one transaction per event:"
            f" {_cell(r, 'webhooks.batched_vs_per_row')}. 1,000 tenants' endpoints against one:"
            f" {_cell(r, 'webhooks.tenants_1000_vs_one')}."
        ),
        "",
        *_table(["client", "how", "deliveries/s", "vs naive", "duplicate window"], body),
    ]


def _relay(r: Mapping[str, Any]) -> list[str]:
    variant = _get(r, "relay.variant") or {}
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
            _cell(r, f"relay.{figure}"),
            "1\N{MULTIPLICATION SIGN}"
            if versus is None
            else (
                _cell(r, f"relay.{versus}")
                if key != "library"
                else "**" + _cell(r, f"relay.{versus}") + "**"
            ),
        ]
        for label, key, figure, versus in rows
    ]
    return [
        "## Relay and consumers (NATS JetStream in its own process)",
        "",
        (
            f"{_cell(r, 'relay.events')} events per relay run, {variant.get('keys', '')};"
            f" {_cell(r, 'relay.broker')}. Goal: library / bare ≥ 0.8."
            f" Library / bare in flight: {_cell(r, 'relay.library_vs_bare_in_flight')}."
        ),
        "",
        *_table(["publisher", "how", "events/s", "vs bare"], body),
        (
            f"Consumer to e-mail: {_cell(r, 'relay.consumer_email_events_per_s')} events/s"
            f" ({_cell(r, 'relay.consumer_emails_per_s')} e-mails/s),"
            f" {_cell(r, 'relay.consumer_events')} events per run; {_cell(r, 'relay.consumer_variant')}."
            f" The e-mail lane alone: {_cell(r, 'relay.email_lane_alone_emails_per_s')} e-mails/s;"
            f" channel / lane alone: {_cell(r, 'relay.consumer_vs_email_lane')} (goal ≥ 0.8)."
        ),
        "",
        "CPU while each clock ran (from /proc; 10 ms ticks):",
        "",
        *shares_table("relay variant", _get(r, "relay.cpu_per_event"), "event"),
        *shares_table("consumer to e-mail", _get(r, "relay.consumer_cpu_per_email"), "e-mail"),
    ]


def _history(r: Mapping[str, Any]) -> list[str]:
    history = _get(r, "history") or {}
    body = [
        [
            f"{label} sent rows",
            _cell(r, f"history.{label}.claim_p50_ms"),
            _cell(r, f"history.{label}.claim_p99_ms"),
            _cell(r, f"history.{label}.first_claim_ms"),
        ]
        for label, entry in history.items()
        if isinstance(entry, Mapping) and "rows" in entry and label != "after_churn"
    ]
    churn = _get(r, "history.after_churn")
    if isinstance(churn, Mapping):
        body.append(
            [
                f"right after {churn.get('rows', 0):,} rows of churn, no VACUUM",
                _cell(r, "history.after_churn.claim_p50_ms"),
                _cell(r, "history.after_churn.claim_p99_ms"),
                _cell(r, "history.after_churn.first_claim_ms"),
            ]
        )
        body.append(
            [
                "the same, after VACUUM",
                _cell(r, "history.after_churn.after_vacuum_claim_p50_ms"),
                _cell(r, "history.after_churn.after_vacuum_claim_p99_ms"),
                "—",
            ]
        )
    return [
        "## Claim latency (10 due rows) as the sent history grows",
        "",
        (
            f"{_cell(r, 'history.claims_per_series')} claims per series. After churn:"
            f" {_get(r, 'history.after_churn.note') or '—'}."
        ),
        "",
        *_table(["table holds", "claim p50, ms", "claim p99, ms", "first claim, ms"], body),
    ]


def _enqueue(r: Mapping[str, Any]) -> list[str]:
    body = [
        ["bare INSERT", _cell(r, "enqueue.bare_insert_rows_per_s"), "1\N{MULTIPLICATION SIGN}"],
        [
            "enqueue_async",
            _cell(r, "enqueue.library_rows_per_s"),
            "**" + _cell(r, "enqueue.ratio") + "**",
        ],
    ]
    if _get(r, "enqueue.library_no_notify_rows_per_s") is not None:
        body.append(
            [
                "enqueue_async(notify=False)",
                _cell(r, "enqueue.library_no_notify_rows_per_s"),
                _cell(r, "enqueue.no_notify_ratio"),
            ]
        )
    return [
        "## Enqueue inside the host's transaction vs a bare INSERT",
        "",
        f"{_cell(r, 'enqueue.rows')} messages, {_cell(r, 'enqueue.variant.transaction')}.",
        "",
        *_table(["write", "rows/s", "vs bare"], body),
    ]


def _latency(r: Mapping[str, Any]) -> list[str]:
    body = [[_cell(r, "latency.variant"), _cell(r, "latency.p50_ms"), _cell(r, "latency.p99_ms")]]
    if _get(r, "latency.polling") is not None:
        body.append(
            [
                "polling every 0.05 s (no wake-up)",
                _cell(r, "latency.polling.p50_ms"),
                _cell(r, "latency.polling.p99_ms"),
            ]
        )
    return [
        "## Enqueue → send latency at low load",
        "",
        f"{_cell(r, 'latency.messages')} messages one at a time, per run.",
        "",
        *_table(["how the worker learns of the row", "p50, ms", "p99, ms"], body),
    ]


def _memory(r: Mapping[str, Any]) -> list[str]:
    body = [
        [
            f"{_cell(r, 'memory.rows')}",
            _cell(r, "memory.start_rss_mb"),
            _cell(r, "memory.warm_rss_mb"),
            _cell(r, "memory.peak_rss_mb"),
            _cell(r, "memory.end_rss_mb"),
            _cell(r, "memory.rss_growth_mb"),
        ]
    ]
    return [
        "## Memory while draining",
        "",
        f"{_cell(r, 'memory.mode')}; {_cell(r, 'memory.note')}.",
        "",
        *_table(
            ["rows", "RSS at start, MB", "at 10 %, MB", "peak, MB", "end, MB", "growth, MB"], body
        ),
    ]


def _feed(r: Mapping[str, Any]) -> list[str]:
    body = [
        [f"{n:,}", "1", _cell(r, f"feed.streams_{n}.p50_ms"), _cell(r, f"feed.streams_{n}.p99_ms")]
        for n in (1, 100, 1000)
    ]
    body.append(
        [
            "1,000 (collector tuned)",
            "1",
            _cell(r, "feed.streams_1000_collector_tuned.p50_ms"),
            _cell(r, "feed.streams_1000_collector_tuned.p99_ms"),
        ]
    )
    body.append(
        [
            "5,000",
            "2",
            _cell(r, "feed.streams_5000_2_processes.p50_ms"),
            _cell(r, "feed.streams_5000_2_processes.p99_ms"),
        ]
    )
    return [
        "## Feed push latency (insert → SSE refresh)",
        "",
        (
            f"{_cell(r, 'feed.inserts')} inserts per series; {_cell(r, 'feed.variant')}."
            " Goal: p99 < 50 ms at 1,000 streams, < 150 ms at 5,000 over two processes."
            f" Memory per open stream: {_cell(r, 'feed.memory_per_stream_kib', ' KiB')}. The server"
            f" processes' full garbage collections: {_cell(r, 'feed.server_full_collections')},"
            f" the longest {_cell(r, 'feed.server_longest_full_collection_ms', ' ms')}."
        ),
        "",
        *_table(["open streams", "server processes", "p50, ms", "p99, ms"], body),
    ]


_SECTIONS = {
    "dispatch": _dispatch,
    "peers": _peers,
    "smtp": _smtp,
    "webhooks": _webhooks,
    "webhook_ordering": lambda r: webhook_ordering.section(r, _cell),
    "relay": _relay,
    "history": _history,
    "retention": lambda r: retention.section(r, _cell),
    "enqueue": _enqueue,
    "latency": _latency,
    "memory": _memory,
    "feed": _feed,
}


def markdown(results: Mapping[str, Any]) -> str:
    meta = results.get("meta", {})
    machine = meta.get("machine", {})
    server = meta.get("server", {})
    lines = [
        f"# Benchmark results: {meta.get('run', '?')} run, {machine.get('date', '?')}",
        "",
        (
            f"- machine: {machine.get('cores')} cores, {machine.get('memory_gib')} GiB,"
            f" {machine.get('cpu_model')}; load average at start {machine.get('load_average_at_start')}"
        ),
        f"- Python {machine.get('python')}, loop {meta.get('loop')}",
        (
            f"- PostgreSQL {server.get('server_version')} ({meta.get('server_source')},"
            f" {server.get('transport')}), synchronous_commit={server.get('synchronous_commit')},"
            f" fsync={server.get('fsync')}, shared_buffers={server.get('shared_buffers')}"
        ),
        (
            f"- tree: {meta.get('tree', {}).get('git_commit')}"
            f"{' + local changes' if meta.get('tree', {}).get('dirty') else ''};"
            f" variants: {meta.get('variants')}"
        ),
        (
            f"- every figure: median of {meta.get('runs')} runs (min\N{EN DASH}max of the runs in brackets);"
            " ratios are run-by-run pairs. Compare ratios, not absolute figures across runs."
        ),
        (
            f"- 1-minute load average before/after each comparison (2 cores: above 2 means the"
            f" machine was shared): {meta.get('load_average')}"
        ),
        "",
    ]
    for name, render in _SECTIONS.items():
        section = results.get(name)
        if section is None:
            continue  # not asked for in this run (--only)
        problem = _unavailable(section)
        if problem is not None:
            lines += [f"## {name}", "", problem, ""]
            continue
        lines += render(results)
    return "\n".join(lines)


def write(results: Mapping[str, Any], directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "latest.json"
    md_path = directory / "latest.md"
    json_path.write_text(json.dumps(plain(results), indent=2, default=str) + "\n")
    md_path.write_text(markdown(results))
    return json_path, md_path
