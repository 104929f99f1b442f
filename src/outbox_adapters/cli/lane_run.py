"""Run one lane from the command line: check it, say what it will do, verify the schema, run it
through the one runner (:func:`outbox_adapters.app.run_lane`) until SIGTERM/SIGINT (or drained),
and print what it did. ``outbox worker``, ``outbox relay`` and ``outbox consume`` all end here.

With ``--drain`` the command exits 1 (after the lines of what it did) when rows were due but the
drain could not finish them: each was put back for a later attempt (a broker, an SMTP relay or a
receiver that could not be reached) or its mark was not recorded. A cron job can tell a drain that
published everything due from one that published nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import click

from outbox_adapters.app import Lane, Outbox, RelayLane, Runnable, WebhookLane, check_lane, run_lane
from outbox_adapters.app.runner import default_holder
from outbox_adapters.cli.options import (
    KEYS_OPTION,
    Failure,
    SettingError,
    database_errors,
    describe_keys,
    describe_secrets,
    run,
    stop_on_signals,
)
from outbox_adapters.extras import MissingExtra
from outbox_adapters.postgres import WAKEUP_CHANNEL, schema
from outbox_adapters.runtime.report import BatchReport
from outbox_core.errors import ConfigurationError
from outbox_core.redaction import redact_text

__all__ = ["start_lane", "summary", "unfinished"]


def _figures(stats: Any) -> str:  # noqa: ANN401 - attrs stats
    figures = attrs.asdict(stats, recurse=False)
    return ", ".join(f"{k} {v}" for k, v in figures.items() if v) or "nothing done"


def summary(stats: Any) -> list[str]:  # noqa: ANN401 - the lane's stats
    """What a lane did, as the lines printed when it stops: one line for one worker's figures;
    for a lane of several parts, one line per part and one per count of the lane's own."""
    if not attrs.has(type(stats)):
        return [f"worker stopped: {stats!r}"]
    values = {field.name: getattr(stats, field.name) for field in attrs.fields(type(stats))}
    parts = {name: value for name, value in values.items() if attrs.has(type(value))}
    if not parts:
        return ["worker stopped: " + _figures(stats)]
    lines = [f"{name}: {_figures(value)}" for name, value in parts.items()]
    lines += [f"{name.replace('_', ' ')}: {v}" for name, v in values.items() if name not in parts]
    return lines


def unfinished(stats: Any, *, retried: bool = True) -> int:  # noqa: ANN401 - the lane's stats
    """How many rows the lane claimed and left undone: their mark not recorded and, with
    ``retried``, put back for a later attempt (the batch counts of every part of the lane)."""
    if not attrs.has(type(stats)):
        return 0
    if isinstance(stats, BatchReport):
        return (stats.retried if retried else 0) + stats.mark_errors
    return sum(
        unfinished(getattr(stats, field.name), retried=retried)
        for field in attrs.fields(type(stats))
    )


def _starting_option(app: Outbox, lane: Lane) -> str:
    """What a refusal found as the lane starts is about: the webhook lane checks the keys its
    stored secrets need; a lane with a broker connects to it."""
    if isinstance(lane, WebhookLane):
        return KEYS_OPTION
    if lane.streams(app) is not None:
        return "--broker (OUTBOX_BROKER)"
    return "the lane " + repr(lane.name)


def _wakeup_line(app: Outbox, lane: Lane) -> str:
    every = f"polling every {app.poll_interval:g}s"
    if lane.wakeup_lane is None:
        return "wake-up: none needed (the broker delivers)"
    if app.listen:
        return f"wake-up: LISTEN {WAKEUP_CHANNEL} ({every} stays the fallback)"
    return f"wake-up: {every}"


def start_lane(app: Outbox, lane: Lane, *, drain: bool) -> None:
    """Run ``lane`` of ``app`` in this process (see the module)."""
    try:
        check_lane(app, lane)
        lines = lane.describe(app)
    except MissingExtra:
        raise
    except ConfigurationError as exc:
        raise SettingError(str(exc)) from None
    for line in lines:  # they name the settings: through the one redaction as well
        click.echo(redact_text(line))
    keys = describe_secrets if isinstance(lane, WebhookLane) else describe_keys
    click.echo(keys(app.encryptor))
    assert app.database_url is not None  # noqa: S101 - check_lane refused an app without one
    with database_errors():
        problems = schema.verify(app.database_url)
    if problems:
        raise Failure(f"the outbox schema is incomplete ({problems[0]}): run `outbox schema apply`")
    click.echo(_wakeup_line(app, lane))
    try:
        stats = run(_work(app, lane, drain=drain))
    except ConfigurationError as exc:  # found as the lane starts: nothing was sent
        raise SettingError(f"{_starting_option(app, lane)}: {exc}") from None
    for line in summary(stats):
        click.echo(line)
    # A relay never gives an event up: one put back by a drain is one not published (the broker
    # refused or was unreachable). An e-mail or webhook row put back has its retry scheduled by
    # its backoff, as it would in a running worker; only an unrecorded mark is a failed drain.
    left = unfinished(stats, retried=isinstance(lane, RelayLane))
    if drain and left:
        raise Failure(
            f"--drain: {left} due row(s) could not be finished (put back for a later attempt;"
            " the warnings above say why)"
        )


async def _work(app: Outbox, lane: Lane, *, drain: bool) -> Any:  # noqa: ANN401 - the stats
    holder = default_holder()
    gated = app.leader and "leader" in lane.options
    leader = "on" if gated else ("off" if "leader" in lane.options else "not used")

    def started(_runnable: Runnable) -> None:
        click.echo(
            f"lane {lane.name}: holder {holder}, leader lease {leader},"
            f" {'drain' if drain else 'until SIGTERM/SIGINT'}"
        )

    stop = asyncio.Event()
    with stop_on_signals(stop.set):
        try:
            return await run_lane(app, lane, stop=stop, drain=drain, holder=holder, started=started)
        except TimeoutError:  # the LISTEN connection; psycopg's own failures reach database_errors
            raise Failure("cannot use the database (--database-url): LISTEN timed out") from None
