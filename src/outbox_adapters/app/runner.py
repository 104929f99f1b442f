"""The one lane runner: for any lane description, the pool, the wake-up, the leader lease, the
heartbeat and the broker, built the same way for the host's process (:meth:`Outbox.running`) and
for ``outbox worker --lane NAME`` (and ``outbox relay`` / ``outbox consume``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from typing import Any

from outbox_adapters.app.context import AppSettings, Lane, LaneContext, Runnable
from outbox_adapters.clock import SystemClock
from outbox_adapters.postgres import PostgresHeartbeat, PostgresLeaderLease, WakeupListener
from outbox_adapters.postgres.identity import database_scope
from outbox_adapters.postgres.pools import connection_pool
from outbox_core.errors import ConfigurationError

__all__ = ["check_lane", "default_holder", "run_lane"]


def default_holder() -> str:
    """This process, as a leader lease names it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def check_lane(app: AppSettings, lane: Lane) -> str:
    """Everything ``lane`` needs from ``app``, checked before any connection: returns the
    database URL; :class:`ConfigurationError` naming what is missing or wrong."""
    if app.database_url is None:
        raise ConfigurationError("the application names no database_url (--database-url)")
    lane.check(app)
    return app.database_url


async def run_lane(  # noqa: PLR0913 - keyword-only knobs, each with a default
    app: AppSettings,
    lane: Lane,
    *,
    stop: asyncio.Event | None = None,
    drain: bool = False,
    holder: str | None = None,
    started: Callable[[Runnable], None] | None = None,
) -> Any:  # noqa: ANN401 - the lane's own stats
    """Work ``lane`` with ``app``'s settings until ``stop`` is set (or, with ``drain``, until
    none is due): what is in flight finishes and is recorded before it returns its stats."""
    url = check_lane(app, lane)
    streams = lane.streams(app)
    async with contextlib.AsyncExitStack() as stack:
        broker = None
        if streams is not None:
            from outbox_adapters.brokers import connect_broker  # noqa: PLC0415 - broker extras

            assert app.broker is not None  # noqa: S101 - lane.check refuses a lane without one
            broker = await connect_broker(app.broker, streams=streams)
            stack.push_async_callback(broker.aclose)
        pool = await stack.enter_async_context(connection_pool(url, max_size=lane.pool_size()))
        wakeup = None
        if app.listen and lane.wakeup_lane is not None:
            listener = WakeupListener(url)
            await listener.start()
            stack.push_async_callback(listener.aclose)
            # The listener holds its subscribers weakly: the lane's workers keep this one alive.
            wakeup = listener.wakeup(lane.wakeup_lane)
        context = LaneContext(
            app=app,
            pool=pool,
            clock=SystemClock(),
            holder=holder or default_holder(),
            leader=PostgresLeaderLease(pool) if app.leader and "leader" in lane.options else None,
            heartbeat=PostgresHeartbeat(pool),
            wakeup=wakeup,
            broker=broker,
            drain=drain,
            database_scope=await database_scope(pool),
        )
        runnable = await stack.enter_async_context(lane.workers(context))
        if started is not None:
            started(runnable)
        if stop is None:
            return await runnable.run(drain=drain)
        stopping = asyncio.create_task(stop.wait())
        working = asyncio.create_task(runnable.run(drain=drain))
        try:
            await asyncio.wait({stopping, working}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            runnable.request_stop()
            stopping.cancel()
        return await working
