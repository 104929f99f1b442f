"""The e-mail lane's runner: pool, wake-up, mailer, handler, leader lease, heartbeat and worker,
built the same way for the host's process (:meth:`Outbox.running`) and for ``outbox worker``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

import attrs

from outbox_adapters.app.lanes import EmailLane
from outbox_adapters.clock import SystemClock
from outbox_adapters.extras import missing_extra
from outbox_adapters.lanes.email import EmailHandler
from outbox_adapters.postgres import (
    PostgresHeartbeat,
    PostgresLeaderLease,
    PostgresStore,
    WakeupListener,
)
from outbox_adapters.postgres.pools import connection_pool
from outbox_adapters.runtime import LaneConfig, Worker, WorkerStats
from outbox_adapters.wakeup import Wakeup
from outbox_core.errors import ConfigurationError
from outbox_core.ports import Encryptor, Mailer

if TYPE_CHECKING:
    from outbox_adapters.smtp import SmtpSettings  # noqa: TC004 - attrs never resolves it; no smtp extra needed

__all__ = ["EmailLaneRun", "run_email_lane"]


def default_holder() -> str:
    """This process, as a leader lease names it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@attrs.frozen
class EmailLaneRun:
    """Everything one e-mail lane's worker needs, checked: where from, what to send with."""

    database_url: str
    lane: EmailLane
    config: LaneConfig
    sender: str
    smtp: SmtpSettings | None = None
    encryptor: Encryptor | None = None
    leader: bool = True
    listen: bool = True
    drain: bool = False
    holder: str = attrs.field(factory=default_holder)

    def __attrs_post_init__(self) -> None:
        if self.smtp is None and self.lane.mailer is None:
            raise ConfigurationError(
                f"the e-mail lane {self.lane.name!r} needs SMTP settings (--smtp-url) or a mailer"
            )


def _smtp_mailer(
    smtp: SmtpSettings | None, run: EmailLaneRun
) -> AbstractAsyncContextManager[Mailer]:
    try:
        from outbox_adapters.smtp import SmtpMailer  # noqa: PLC0415 - the smtp extra
    except ImportError as exc:
        raise missing_extra(exc, f"the e-mail lane {run.lane.name!r}") from exc
    assert smtp is not None  # noqa: S101 - EmailLaneRun refuses a lane with neither
    return SmtpMailer(smtp, steps=run.lane.timing.budgets)


@contextlib.asynccontextmanager
async def _wakeup(run: EmailLaneRun) -> AsyncIterator[Wakeup | None]:
    if not run.listen:
        yield None
        return
    listener = WakeupListener(run.database_url)
    await listener.start()
    try:
        yield listener.wakeup(run.lane.name)
    finally:
        await listener.aclose()


async def run_email_lane(
    run: EmailLaneRun,
    *,
    stop: asyncio.Event | None = None,
    started: Callable[[Worker], None] | None = None,
) -> WorkerStats:
    """Work ``run``'s lane until ``stop`` is set (or, with ``run.drain``, until none is due):
    the rows in flight finish and are recorded before it returns."""
    config = run.config
    factory = run.lane.mailer
    # One claim, the leader lease and one mark per row in flight at a time (marks are detached,
    # so up to rows_in_flight of them run at once), plus one spare.
    async with (
        connection_pool(run.database_url, max_size=3 + config.rows_in_flight) as pool,
        _wakeup(run) as wakeup,
        (
            factory(run.smtp, run.lane.timing.budgets) if factory else _smtp_mailer(run.smtp, run)
        ) as mailer,
    ):
        clock = SystemClock()
        lane = run.lane
        handler = EmailHandler(
            mailer,
            sender=run.sender,
            sender_name=lane.sender_name,
            clock=clock,
            steps=lane.timing.budgets,
            suppressed=lane.suppressed,
            branding=lane.branding,
            bounce_report=lane.bounce_report,
            encryptor=run.encryptor,
        )
        worker = Worker(
            PostgresStore(pool),
            handler,
            config,
            clock=clock,
            leader=PostgresLeaderLease(pool) if run.leader else None,
            holder=run.holder,
            wakeup=wakeup,
            heartbeat=PostgresHeartbeat(pool),
        )
        if started is not None:
            started(worker)
        if stop is None:
            return await worker.run(drain=run.drain)
        stopping = asyncio.create_task(stop.wait())
        working = asyncio.create_task(worker.run(drain=run.drain))
        try:
            await asyncio.wait({stopping, working}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            worker.request_stop()
            stopping.cancel()
        return await working
