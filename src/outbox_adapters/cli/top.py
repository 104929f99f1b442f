"""``outbox top``: every lane at a glance, live (rich), or once as text or JSON for scripts.

::

    outbox top [--interval 2] [--once] [--json]

One row per lane of every queue table (e-mail lanes, the webhook outbox and its deliveries, the
event relay, the consumer channels' e-mail lane): pending, the oldest pending row's age with a
sparkline of it over the refreshes, in flight, leases expired (to be re-claimed), failed, sent in
the last minute, enqueue → sent p50/p95 over the last 5 minutes, the latest error class and how
many rows carry it, the lane's leader and its term, and how many workers of the lane beat within their bound (any
host). Ctrl-C ends it.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Sequence

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from outbox_adapters.cli.endpoints import json_option
from outbox_adapters.cli.options import database_errors, database_url, option
from outbox_adapters.postgres.top import read_lanes
from outbox_core.top import LaneRow, sparkline

__all__ = ["render", "top_command"]

#: How many refreshes the sparkline shows.
HISTORY = 30


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def render(lanes: Sequence[LaneRow], ages: dict[str, deque[float]]) -> Table:
    """The table of ``lanes``; ``ages`` holds each lane's recent oldest-pending ages."""
    table = Table(title="outbox top", title_justify="left", expand=False)
    for header, justify in [
        ("lane", "left"),
        ("pending", "right"),
        ("oldest", "right"),
        ("age trend", "left"),
        ("in flight", "right"),
        ("expired", "right"),
        ("failed", "right"),
        ("sent/min", "right"),
        ("p50", "right"),
        ("p95", "right"),
        ("last error", "left"),
        ("leader (term)", "left"),
        ("workers", "right"),
    ]:
        table.add_column(header, justify=justify, no_wrap=header != "last error")  # type: ignore[arg-type]
    for lane in lanes:
        key = f"{lane.queue}/{lane.lane}"
        shown = lane.lane if lane.queue == "outbox_message" else key
        error = (
            f"{lane.last_error_class} (x{lane.last_error_count})" if lane.last_error_class else "-"
        )
        table.add_row(
            shown,
            str(lane.pending),
            _age(lane.oldest_pending_s),
            sparkline(list(ages.get(key, ()))),
            str(lane.in_flight),
            f"[red]{lane.leases_expired}[/red]" if lane.leases_expired else "0",
            f"[red]{lane.failed}[/red]" if lane.failed else "0",
            str(lane.sent_per_min),
            _age(lane.p50_s),
            _age(lane.p95_s),
            error,
            f"{lane.leader} ({lane.term})" if lane.leader else "-",
            str(lane.workers) if lane.workers else "[red]0[/red]",
        )
    return table


def _record(lanes: Sequence[LaneRow], ages: dict[str, deque[float]]) -> None:
    for lane in lanes:
        key = f"{lane.queue}/{lane.lane}"
        ages.setdefault(key, deque(maxlen=HISTORY)).append(lane.oldest_pending_s or 0.0)


@click.command("top")
@database_url()
@option(
    "--interval",
    env="OUTBOX_TOP_INTERVAL",
    type=click.FloatRange(min=0.2),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between refreshes.",
)
@option("--once", env="OUTBOX_TOP_ONCE", is_flag=True, help="Print one snapshot and exit.")
@json_option
def top_command(database_url: str, interval: float, once: bool, as_json: bool) -> None:  # noqa: FBT001
    """Every lane's backlog, flow, failures and leader, refreshed live (Ctrl-C ends it).

    The sent-per-minute and latency figures read the newest 100,000 rows of each table.
    """
    ages: dict[str, deque[float]] = {}
    if once or as_json:
        with database_errors():
            lanes = read_lanes(database_url)
        if as_json:
            click.echo(json.dumps({"lanes": [lane.as_json() for lane in lanes]}))
            return
        _record(lanes, ages)
        console = Console()
        if not console.is_terminal:  # a pipe or a file: wide enough for every column
            console = Console(width=max(console.width, 200))
        console.print(render(lanes, ages))
        return
    with Live(auto_refresh=False) as live:
        try:
            while True:
                with database_errors():
                    lanes = read_lanes(database_url)
                _record(lanes, ages)
                live.update(render(lanes, ages), refresh=True)
                time.sleep(interval)
        except KeyboardInterrupt:
            return
