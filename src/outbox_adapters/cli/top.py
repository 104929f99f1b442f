"""``outbox top``: every lane at a glance, live (rich), or once as text or JSON for scripts.

::

    outbox top [--interval 2] [--once] [--json] [--broker URL [--topic T] [--group G ...]]

One row per lane of every queue table (e-mail lanes, the webhook outbox and its deliveries, the
event relay, the consumer channels' e-mail lane): pending, the oldest pending row's age with a
sparkline of it over the refreshes, in flight, leases expired (to be re-claimed), failed, sent in
the last minute, enqueue → sent p50/p95 over the last 5 minutes, the latest error class and how
many rows carry it, the lane's leader and its term, and how many workers of the lane beat within their bound (any
host). With ``--broker``, a second table has one row per consumer channel (a consumer group on
the topic): events waiting in the broker, handed out and not acknowledged, and parked. Ctrl-C ends
it.

A broker that cannot be reached hides only the channels: the live screen keeps the lanes and says
why under the channels' table; ``--once`` (and ``--json``, with ``"channels": []`` and
``"broker_error"``) prints the lanes, then exits 1 with one error line naming ``--broker``. The
database unreachable is exit 1 with nothing shown (the lanes are read from it).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Sequence

import attrs
import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from outbox_adapters.brokers import BrokerUnavailable, connect_broker
from outbox_adapters.cli.lane_options import DEFAULT_TOPIC, broker_option
from outbox_adapters.cli.options import Failure, database_errors, database_url, json_option, option
from outbox_adapters.lanes.email_channel import EMAIL_CHANNEL_GROUP
from outbox_adapters.lanes.inapp import INAPP_CHANNEL_GROUP
from outbox_adapters.postgres.top import read_lanes, read_parked
from outbox_core.top import ChannelRow, LaneRow, sparkline

__all__ = ["read_channels", "render", "render_channels", "top_command"]

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


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


def render_channels(channels: Sequence[ChannelRow], problem: str | None = None) -> Table:
    """The consumer channels' table (``problem``: why the broker could not be read)."""
    table = Table(title="consumer channels", title_justify="left", caption=problem)
    for header in ("group", "topic", "waiting", "unacked", "parked"):
        table.add_column(header, justify="left" if header in {"group", "topic"} else "right")
    for row in channels:
        waiting = "[yellow]not joined[/yellow]" if row.waiting is None else str(row.waiting)
        table.add_row(
            row.group,
            row.subject,
            waiting,
            _count(row.unacknowledged),
            f"[red]{row.parked}[/red]" if row.parked else "0",
        )
    return table


async def _lags(broker_url: str, topic: str, groups: Sequence[str]) -> list[ChannelRow]:
    broker = await connect_broker(broker_url)
    try:
        lags = [await broker.lag(group, topic) for group in groups]
    finally:
        await broker.aclose()
    return [ChannelRow(lag.group, lag.subject, lag.waiting, lag.unacknowledged) for lag in lags]


def read_channels(
    database_url: str, broker_url: str, topic: str, groups: Sequence[str]
) -> list[ChannelRow]:
    """Each group's lag on ``topic`` from the broker, with its parked count from the database."""
    rows = asyncio.run(_lags(broker_url, topic, groups))
    with database_errors():
        parked = read_parked(database_url)
    return [attrs.evolve(row, parked=parked.get(row.group, 0)) for row in rows]


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
@broker_option(required=False)
@option(
    "--topic",
    env="OUTBOX_TOPIC",
    default=DEFAULT_TOPIC,
    show_default=True,
    help="With --broker: the topic the consumer channels read.",
)
@option(
    "--group",
    "groups",
    env="OUTBOX_TOP_GROUPS",
    multiple=True,
    default=(EMAIL_CHANNEL_GROUP, INAPP_CHANNEL_GROUP),
    show_default=True,
    help="With --broker: a consumer group (channel) to show; repeat for more.",
)
def top_command(  # noqa: PLR0913, PLR0917 - one parameter per option
    database_url: str,
    interval: float,
    once: bool,  # noqa: FBT001
    as_json: bool,  # noqa: FBT001
    broker: str | None,
    topic: str,
    groups: tuple[str, ...],
) -> None:
    """Every lane's backlog, flow, failures and leader, refreshed live (Ctrl-C ends it); with
    --broker, every consumer channel's lag too.

    The sent-per-minute and latency figures read the newest 100,000 rows of each table.
    """
    ages: dict[str, deque[float]] = {}
    if once or as_json:
        with database_errors():
            lanes = read_lanes(database_url)
        unreachable: str | None = None
        channels: list[ChannelRow] = []
        try:
            channels = read_channels(database_url, broker, topic, groups) if broker else []
        except BrokerUnavailable as exc:  # the database's part is still shown
            unreachable = str(exc)
        problem = None if unreachable is None else f"broker unreachable: {unreachable}"
        _once(lanes, ages, channels, broker=broker, problem=problem, as_json=as_json)
        if unreachable is not None:
            raise Failure(f"cannot read the consumer channels (--broker): {unreachable}")
        return
    with Live(auto_refresh=False) as live:
        try:
            while True:
                with database_errors():
                    lanes = read_lanes(database_url)
                _record(lanes, ages)
                screen = _screen(
                    lanes, ages, database_url, broker=broker, topic=topic, groups=groups
                )
                live.update(screen, refresh=True)
                time.sleep(interval)
        except KeyboardInterrupt:
            return


def _once(  # noqa: PLR0913 - what one snapshot shows
    lanes: Sequence[LaneRow],
    ages: dict[str, deque[float]],
    channels: Sequence[ChannelRow],
    *,
    broker: str | None,
    problem: str | None,
    as_json: bool,
) -> None:
    """One snapshot on stdout: the lanes, and with ``broker`` the channels (none, and the
    ``problem``, when the broker could not be read)."""
    if as_json:
        found: dict[str, object] = {"lanes": [lane.as_json() for lane in lanes]}
        if broker:
            found["channels"] = [channel.as_json() for channel in channels]
            found["broker_error"] = problem
        click.echo(json.dumps(found))
        return
    _record(lanes, ages)
    console = Console()
    if not console.is_terminal:  # a pipe or a file: wide enough for every column
        console = Console(width=max(console.width, 200))
    console.print(render(lanes, ages))
    if broker:
        console.print(render_channels(channels, problem))


def _screen(  # noqa: PLR0913 - what one refresh shows
    lanes: Sequence[LaneRow],
    ages: dict[str, deque[float]],
    database_url: str,
    *,
    broker: str | None,
    topic: str,
    groups: Sequence[str],
) -> Group | Table:
    lanes_table = render(lanes, ages)
    if not broker:
        return lanes_table
    try:
        channels = render_channels(read_channels(database_url, broker, topic, groups))
    except BrokerUnavailable as exc:  # the lanes stay on screen while the broker is away
        channels = render_channels([], problem=f"broker unreachable: {exc}")
    return Group(lanes_table, channels)
