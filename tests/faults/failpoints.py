"""Named fail-points: a worker process that kills (or stops) itself at a chosen step of a delivery.

    OUTBOX_FAILPOINT=<point>[:<nth>][:stop]      e.g. ``after_reply_before_mark``, ``mid_mark:2``,
                                                 ``after_data_before_reply:1:stop``

``<point>`` is a :class:`outbox_core.lease.KillPoint` (RELIABILITY F1); the process sends itself
``SIGKILL`` the ``<nth>`` time (default 1) the point is reached, or ``SIGSTOP`` with ``:stop`` (it
goes on where it stopped once someone sends ``SIGCONT``: the paused stale writer of F5).

Theory of operation
-------------------
Production code is not touched. The points sit in three wrappers, installed only inside the worker
subprocess (:mod:`tests.faults.worker_proc`):

=========================== ======================================================================
point                       where it fires
=========================== ======================================================================
``after_claim``             :class:`FailingStore` — ``claim_due`` returned rows (committed claim)
``mid_smtp_before_data``    aiosmtplib's ``execute_data_command`` entered: MAIL and RCPT were
                            answered, the DATA command not yet written
``after_data_before_reply`` aiosmtplib wrote the message bytes (``…\\r\\n.\\r\\n``) to the socket
                            and has not read the reply: the server has the message, we don't know
``after_reply_before_mark`` :class:`FailingHandler` — the mailer returned *sent* (the 250 came
                            back); ``decide`` and the mark have not run
``mid_mark``                :class:`FailingStore` — the mark's UPDATE is *on the server*, its
                            result not read (see below)
``after_mark``              :class:`FailingStore` — ``mark_if_pending`` returned
=========================== ======================================================================

``mid_mark`` is exact, not approximated: a side connection locks the row (``SELECT … FOR
UPDATE``), the real mark is started, and the process kills itself once ``pg_blocking_pids`` shows
the mark's backend waiting on that lock — so the server holds the statement and the client never
reads its result. When the process dies the side transaction rolls back, the UPDATE proceeds and,
being autocommit, commits: PostgreSQL does not notice a vanished client while it waits on a lock.
Hence this point costs 0 duplicates here; DUPLICATE_WINDOWS allows 0..1 because a mark whose bytes
never reached the server (or that ran inside an explicit transaction) would cost 1. The side
connection is opened at start-up (:meth:`FailingStore.prepare`), not inside the mark: the mark's
budget (1 s in the chaos tests) must not be spent dialling it, or on a loaded machine the mark is
cut off before the point fires and the row's copy becomes a duplicate no kill explains.

Every step also prints a JSON event line on stdout (``claimed``, ``sent``, ``mark``,
``failpoint``, ``resumed``) that the test reads: a fail-point line carries ``time.time()`` taken
just before the signal, so a test can measure recovery from the kill.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import attrs

from outbox_core.lease import KillPoint
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, RowId
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import ClaimRequest, MarkResult, OutboxStore, RowHandler

__all__ = [
    "FAILPOINT_ENV",
    "Action",
    "FailPoint",
    "FailingHandler",
    "FailingStore",
    "Trigger",
    "install_smtp_failpoints",
    "print_event",
]

#: The environment variable that names the fail-point of a worker process.
FAILPOINT_ENV = "OUTBOX_FAILPOINT"

#: How long ``mid_mark`` waits to see the mark's UPDATE blocked on the server before killing anyway.
_MID_MARK_PATIENCE = 3.0

#: The row being delivered, so the SMTP-level points can say which row they hit.
_CURRENT_ROW: contextvars.ContextVar[RowId | None] = contextvars.ContextVar(
    "outbox_failpoint_row", default=None
)
#: Inside aiosmtplib's DATA command: how many writes it has made (1 = "DATA", 2 = the message).
_DATA_WRITES: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "outbox_failpoint_data_writes", default=None
)

Emit = Callable[[dict[str, Any]], None]


def print_event(event: dict[str, Any]) -> None:
    """One JSON line on stdout, flushed at once: it must be out before a SIGKILL that follows."""
    sys.stdout.write(json.dumps(event, default=str) + "\n")
    sys.stdout.flush()


class Action(enum.StrEnum):
    """What the process does to itself at the point."""

    #: ``SIGKILL``: no cleanup, no finally blocks, sockets closed by the kernel.
    KILL = "kill"
    #: ``SIGSTOP``: frozen until ``SIGCONT``, timers and leases running on without it.
    STOP = "stop"


@attrs.frozen
class FailPoint:
    """A point, which time it fires, and what it does."""

    point: KillPoint = attrs.field(converter=KillPoint)
    nth: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    action: Action = attrs.field(default=Action.KILL, converter=Action)

    @classmethod
    def parse(cls, spec: str) -> FailPoint:
        """``after_claim``, ``mid_mark:2``, ``after_data_before_reply:1:stop``, ``after_mark:stop``."""
        point, *rest = spec.strip().split(":")
        nth, action = 1, Action.KILL
        for part in rest:
            if part.isdigit():
                nth = int(part)
            else:
                action = Action(part)
        try:
            return cls(KillPoint(point), nth, action)
        except ValueError:
            known = ", ".join(p.value for p in KillPoint)
            raise ValueError(
                f"{FAILPOINT_ENV}={spec!r} names no fail-point; the points are {known}"
            ) from None

    def __str__(self) -> str:
        return f"{self.point}:{self.nth}:{self.action}"


class Trigger:
    """Counts how often each point is reached and fires the configured one the nth time."""

    def __init__(self, failpoint: FailPoint | None, emit: Emit = print_event) -> None:
        self.failpoint = failpoint
        self.emit = emit
        self.hits: Counter[KillPoint] = Counter()

    def armed(self, point: KillPoint) -> bool:
        """True when the next time ``point`` is reached is the one that fires."""
        fp = self.failpoint
        return fp is not None and fp.point is point and self.hits[point] + 1 == fp.nth

    def reached(self, point: KillPoint, **info: Any) -> None:
        fire = self.armed(point)
        self.hits[point] += 1
        if fire:
            self.fire(point, **info)

    def fire(self, point: KillPoint, **info: Any) -> None:
        """Kill or stop this process now. Returns only after a stop, once SIGCONT arrived."""
        assert self.failpoint is not None
        action = self.failpoint.action
        self.emit({"event": "failpoint", "point": str(point), "action": str(action),
                   "t": time.time(), **info})  # fmt: skip
        if action is Action.KILL:
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached: SIGKILL is not deliverable later than this
        os.kill(os.getpid(), signal.SIGSTOP)
        # Here only after SIGCONT. The event loop has not run meanwhile: every timer that fell
        # due while we were frozen fires at the loop's next turn, as it would on a paused VM.
        self.emit({"event": "resumed", "point": str(point), "t": time.time(), **info})


class FailingHandler:
    """A :class:`~outbox_core.ports.RowHandler` wrapper: ``after_reply_before_mark``, row context."""

    def __init__(self, inner: RowHandler, trigger: Trigger) -> None:
        self.inner = inner
        self.trigger = trigger

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        token = _CURRENT_ROW.set(row.id)
        try:
            outcome = await self.inner(row, budget=budget)
        finally:
            _CURRENT_ROW.reset(token)
        self.trigger.emit(
            {"event": "sent", "row": row.id, "kind": str(outcome.kind), "reason": outcome.reason}
        )
        if outcome.kind is OutcomeKind.SENT:
            # The 250 came back; decide() and the detached mark have not started. Stopping here
            # (not inside the mark) keeps the mark's own budget from running while we are frozen.
            self.trigger.reached(KillPoint.AFTER_REPLY_BEFORE_MARK, row=row.id)
        return outcome


class FailingStore:
    """An :class:`~outbox_core.ports.OutboxStore` wrapper: the claim and mark points, and events.

    ``dsn`` is needed only for ``mid_mark`` (its side connection).
    """

    def __init__(self, inner: OutboxStore, trigger: Trigger, *, dsn: str | None = None) -> None:
        self.inner = inner
        self.trigger = trigger
        self.dsn = dsn
        self._side: Any = None  # mid_mark's side connection, opened by prepare()

    async def prepare(self) -> None:
        """Open ``mid_mark``'s side connection now, before any mark's budget is running."""
        fp = self.trigger.failpoint
        if fp is not None and fp.point is KillPoint.MID_MARK and self._side is None:
            self._side = await self._connect_side()

    async def _connect_side(self) -> Any:
        import psycopg  # noqa: PLC0415 - only this point needs a side connection

        if self.dsn is None:
            raise RuntimeError("the mid_mark fail-point needs the store's DSN")
        return await psycopg.AsyncConnection.connect(self.dsn)  # a transaction opens implicitly

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        rows = await self.inner.claim_due(request)
        if rows:
            ids = [row.id for row in rows]
            self.trigger.emit(
                {
                    "event": "claimed",
                    "rows": ids,
                    "attempts": [row.attempts for row in rows],
                    "lease_expires_at": max(row.lease_expires_at for row in rows).timestamp(),
                    "t": time.time(),
                }
            )
            self.trigger.reached(KillPoint.AFTER_CLAIM, rows=ids)
        return rows

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        if self.trigger.armed(KillPoint.MID_MARK):
            result = await self._mark_mid_flight(mark)
        else:
            self.trigger.reached(KillPoint.MID_MARK, row=mark.row_id)
            result = await self.inner.mark_if_pending(mark)
        self._emit_mark(mark, result)
        self.trigger.reached(KillPoint.AFTER_MARK, row=mark.row_id)
        return result

    def _emit_mark(self, mark: Mark, result: MarkResult) -> None:
        self.trigger.emit(
            {
                "event": "mark",
                "row": mark.row_id,
                "status": str(mark.status),
                "reason": mark.reason,
                "result": result.value,
                "t": time.time(),
            }
        )

    async def mark_many(self, marks: Sequence[Mark]) -> Sequence[MarkResult]:
        """The grouped mark: one write, then a ``mark`` event per row (the points fire once)."""
        self.trigger.reached(KillPoint.MID_MARK, row=marks[0].row_id if marks else None)
        results = await self.inner.mark_many(marks)
        for mark, result in zip(marks, results, strict=True):
            self._emit_mark(mark, result)
        if marks:
            self.trigger.reached(KillPoint.AFTER_MARK, row=marks[-1].row_id)
        return results

    async def release(self, row_id: RowId, token: ClaimToken) -> MarkResult:
        return await self.inner.release(row_id, token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def _mark_mid_flight(self, mark: Mark) -> MarkResult:
        """Start the real mark, wait until the server holds its UPDATE, then fire (see module doc).

        Returns (with the mark's result) only after a ``stop``: a kill never comes back.
        """
        side, self._side = self._side or await self._connect_side(), None
        await side.execute("SELECT 1 FROM outbox_message WHERE id = %s FOR UPDATE", (mark.row_id,))
        mark_task = asyncio.ensure_future(self.inner.mark_if_pending(mark))
        waiting = False
        loop = asyncio.get_running_loop()
        give_up = loop.time() + _MID_MARK_PATIENCE
        while not waiting and loop.time() < give_up and not mark_task.done():
            cursor = await side.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks"
                " WHERE NOT granted AND pg_backend_pid() = ANY (pg_blocking_pids(pid)))"
            )
            found = await cursor.fetchone()
            waiting = bool(found and found[0])
            if not waiting:
                await asyncio.sleep(0.005)
        self.trigger.reached(KillPoint.MID_MARK, row=mark.row_id, update_on_server=waiting)
        await side.close()  # ends the side transaction: the lock goes, the UPDATE proceeds
        return await mark_task


def install_smtp_failpoints(trigger: Trigger) -> None:
    """Patch aiosmtplib's protocol in THIS process for the two points inside the SMTP exchange."""
    from aiosmtplib.protocol import SMTPProtocol  # noqa: PLC0415 - only the worker process

    original_data = SMTPProtocol.execute_data_command
    original_write = SMTPProtocol.write

    async def execute_data_command(
        self: SMTPProtocol,
        message: bytes,
        timeout: float | None = None,  # noqa: ASYNC109 - aiosmtplib's own signature
    ) -> Any:
        # MAIL and RCPT were answered; "DATA" is not written yet.
        trigger.reached(KillPoint.MID_SMTP_BEFORE_DATA, row=_CURRENT_ROW.get())
        token = _DATA_WRITES.set([0])
        try:
            return await original_data(self, message, timeout=timeout)
        finally:
            _DATA_WRITES.reset(token)

    def write(self: SMTPProtocol, data: bytes) -> None:
        original_write(self, data)
        writes = _DATA_WRITES.get()
        if writes is None:
            return
        writes[0] += 1
        if writes[0] == 2:
            # The message and its final "." went to the kernel (a loopback peer has them already:
            # transport.write sends at once when nothing is buffered); the reply is not read.
            trigger.reached(KillPoint.AFTER_DATA_BEFORE_REPLY, row=_CURRENT_ROW.get())

    SMTPProtocol.execute_data_command = execute_data_command  # type: ignore[method-assign]
    SMTPProtocol.write = write  # type: ignore[method-assign]
