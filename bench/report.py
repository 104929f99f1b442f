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

from bench import blocked_keys, report_messaging, retention, webhook_ordering
from bench.markdown import cell, get, plain, table, unavailable

__all__ = ["markdown", "plain", "write"]


def _dispatch(r: Mapping[str, Any]) -> list[str]:
    body = [
        [
            f"{s} ({cell(r, f'dispatch.{s}.workers')} worker(s) \N{MULTIPLICATION SIGN} batch {cell(r, f'dispatch.{s}.batch')})",
            cell(r, f"dispatch.{s}.raw_rows_per_s"),
            cell(r, f"dispatch.{s}.library_rows_per_s"),
            "**" + cell(r, f"dispatch.{s}.ratio") + "**",
            cell(r, f"dispatch.{s}.library_grouped_rows_per_s"),
            cell(r, f"dispatch.{s}.grouped_ratio"),
            cell(r, f"dispatch.{s}.raw_cpu_us_per_row"),
            cell(r, f"dispatch.{s}.library_cpu_us_per_row"),
            cell(r, f"dispatch.{s}.cpu_ratio"),
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
            f"{cell(r, 'dispatch.1x10.rows')} rows per drain. Goal: library / raw ≥ 0.9. "
            f"Workers: {cell(r, 'dispatch.concurrency')}. CPU per row: "
            f"{cell(r, 'dispatch.cpu')}: a second view of the overhead the code owns, as"
            " noisy as the rate on a machine whose CPU is shared."
        ),
        "",
        *table(header, body),
    ]


def _peers(r: Mapping[str, Any]) -> list[str]:
    windows = get(r, "peers.duplicate_window") or {}
    modes = get(r, "peers.library.modes") or {}
    body = [
        [
            f"pgqueuer {cell(r, 'peers.pgqueuer.version')}",
            f"{cell(r, 'peers.pgqueuer.settings')}, driver {cell(r, 'peers.pgqueuer.driver')}",
            cell(r, "peers.pgqueuer.rows_per_s"),
            str(windows.get("pgqueuer", "")),
        ]
    ]
    if get(r, "peers.pgqueuer_psycopg") is not None:
        body.append(
            [
                f"pgqueuer {cell(r, 'peers.pgqueuer.version')}",
                f"{cell(r, 'peers.pgqueuer.settings')}, driver psycopg (the library's)",
                cell(r, "peers.pgqueuer_psycopg.rows_per_s"),
                str(windows.get("pgqueuer", "")),
            ]
        )
    for mode in modes:
        best = " (best)" if mode == get(r, "peers.library.mode") else ""
        kind = {"strict": "library strict", "grouped": "library grouped N"}
        window = windows.get(kind.get(mode.split("_", 1)[0], "library in-flight N"))
        body.append(
            [
                f"library{best}",
                mode,
                cell(r, f"peers.library.modes.{mode}.rows_per_s"),
                str(window or ""),
            ]
        )
    return [
        "## Against pgqueuer: drain rate of no-op jobs, same server, same run",
        "",
        (
            f"{cell(r, 'peers.jobs')} jobs per drain. library (best mode) / pgqueuer:"
            f" **{cell(r, 'peers.ratio')}**; vs pgqueuer on psycopg:"
            f" {cell(r, 'peers.ratio_same_driver')}."
        ),
        "",
        *table(["system", "mode", "jobs/s", "duplicate window"], body),
    ]


def _smtp(r: Mapping[str, Any]) -> list[str]:
    variant = get(r, "smtp.variant") or {}
    body = [
        [
            "naive",
            str(variant.get("naive", "")),
            cell(r, "smtp.naive_msgs_per_s"),
            "1\N{MULTIPLICATION SIGN}",
        ],
        [
            "library",
            str(variant.get("library", "")),
            cell(r, "smtp.library_msgs_per_s"),
            "**" + cell(r, "smtp.ratio") + "**",
        ],
        [
            "library, a mark per row",
            str(variant.get("library_per_row", "")),
            cell(r, "smtp.library_per_row_msgs_per_s"),
            cell(r, "smtp.per_row_ratio"),
        ],
        [
            "library strict",
            str(variant.get("library_strict", "")),
            cell(r, "smtp.library_strict_msgs_per_s"),
            cell(r, "smtp.strict_ratio"),
        ],
        [
            "mailer only",
            str(variant.get("mailer_only", "")),
            cell(r, "smtp.mailer_only_msgs_per_s"),
            cell(r, "smtp.mailer_only_ratio"),
        ],
    ]
    return [
        "## End to end over SMTP (STARTTLS sink in its own process)",
        "",
        f"{cell(r, 'smtp.messages')} messages per run; {variant.get('sink', '')}.",
        "",
        *table(["client", "how", "msg/s", "vs naive"], body),
    ]


def _history(r: Mapping[str, Any]) -> list[str]:
    history = get(r, "history") or {}
    body = [
        [
            f"{label} sent rows",
            cell(r, f"history.{label}.claim_p50_ms"),
            cell(r, f"history.{label}.claim_p99_ms"),
            cell(r, f"history.{label}.first_claim_ms"),
        ]
        for label, entry in history.items()
        if isinstance(entry, Mapping) and "rows" in entry and label != "after_churn"
    ]
    churn = get(r, "history.after_churn")
    if isinstance(churn, Mapping):
        body.append(
            [
                f"right after {churn.get('rows', 0):,} rows of churn, no VACUUM",
                cell(r, "history.after_churn.claim_p50_ms"),
                cell(r, "history.after_churn.claim_p99_ms"),
                cell(r, "history.after_churn.first_claim_ms"),
            ]
        )
        body.append(
            [
                "the same, after VACUUM",
                cell(r, "history.after_churn.after_vacuum_claim_p50_ms"),
                cell(r, "history.after_churn.after_vacuum_claim_p99_ms"),
                "—",
            ]
        )
    return [
        "## Claim latency (10 due rows) as the sent history grows",
        "",
        (
            f"{cell(r, 'history.claims_per_series')} claims per series. After churn:"
            f" {get(r, 'history.after_churn.note') or '—'}."
        ),
        "",
        *table(["table holds", "claim p50, ms", "claim p99, ms", "first claim, ms"], body),
    ]


def _enqueue(r: Mapping[str, Any]) -> list[str]:
    body = [
        ["bare INSERT", cell(r, "enqueue.bare_insert_rows_per_s"), "1\N{MULTIPLICATION SIGN}"],
        [
            "enqueue_async",
            cell(r, "enqueue.library_rows_per_s"),
            "**" + cell(r, "enqueue.ratio") + "**",
        ],
    ]
    if get(r, "enqueue.library_no_notify_rows_per_s") is not None:
        body.append(
            [
                "enqueue_async(notify=False)",
                cell(r, "enqueue.library_no_notify_rows_per_s"),
                cell(r, "enqueue.no_notify_ratio"),
            ]
        )
    return [
        "## Enqueue inside the host's transaction vs a bare INSERT",
        "",
        f"{cell(r, 'enqueue.rows')} messages, {cell(r, 'enqueue.variant.transaction')}.",
        "",
        *table(["write", "rows/s", "vs bare"], body),
    ]


def _latency(r: Mapping[str, Any]) -> list[str]:
    body = [[cell(r, "latency.variant"), cell(r, "latency.p50_ms"), cell(r, "latency.p99_ms")]]
    if get(r, "latency.polling") is not None:
        body.append(
            [
                "polling every 0.05 s (no wake-up)",
                cell(r, "latency.polling.p50_ms"),
                cell(r, "latency.polling.p99_ms"),
            ]
        )
    return [
        "## Enqueue → send latency at low load",
        "",
        f"{cell(r, 'latency.messages')} messages one at a time, per run.",
        "",
        *table(["how the worker learns of the row", "p50, ms", "p99, ms"], body),
    ]


def _memory(r: Mapping[str, Any]) -> list[str]:
    body = [
        [
            f"{cell(r, 'memory.rows')}",
            cell(r, "memory.start_rss_mb"),
            cell(r, "memory.warm_rss_mb"),
            cell(r, "memory.peak_rss_mb"),
            cell(r, "memory.end_rss_mb"),
            cell(r, "memory.rss_growth_mb"),
        ]
    ]
    return [
        "## Memory while draining",
        "",
        f"{cell(r, 'memory.mode')}; {cell(r, 'memory.note')}.",
        "",
        *table(
            ["rows", "RSS at start, MB", "at 10 %, MB", "peak, MB", "end, MB", "growth, MB"], body
        ),
    ]


_SECTIONS = {
    "dispatch": _dispatch,
    "peers": _peers,
    "smtp": _smtp,
    "webhooks": report_messaging.webhooks,
    "webhook_ordering": lambda r: webhook_ordering.section(r, cell),
    "relay": report_messaging.relay,
    "history": _history,
    "blocked_keys": lambda r: blocked_keys.section(r, cell),
    "retention": lambda r: retention.section(r, cell),
    "enqueue": _enqueue,
    "latency": _latency,
    "memory": _memory,
    "feed": report_messaging.feed,
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
        problem = unavailable(section)
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
