"""One dedicated LISTEN connection per process (:class:`Listener`), and its first use: wake-ups for
idle workers (:class:`WakeupListener`, ADR 0011). The in-app feed's push listens through the same
machinery (:class:`~outbox_adapters.postgres.channels.push.ScopeListener`, ADR 0022).

Theory of operation
-------------------
:func:`~outbox_adapters.postgres.enqueue.enqueue` sends ``NOTIFY outbox_wakeup, '<lane>'`` in the
host's transaction, so PostgreSQL delivers it only once the outbox row has committed. One listener
per process holds a dedicated autocommit connection (not a pooled one: LISTEN belongs to a session,
and a pool would hand the session to someone else) running ``LISTEN outbox_wakeup``, and turns each
notification into a wake-up of the lane's subscribers (:meth:`WakeupListener.wakeup`, one
:class:`~outbox_adapters.wakeup.LaneWakeup` per worker). A worker given one claims within
milliseconds of the commit instead of at its next poll.

LISTEN has no replay: whatever is committed while the connection is down is never announced. So

- the connection is checked every ``health_interval`` seconds (``SELECT 1`` under a deadline),
  which also finds a half-open connection that would never raise by itself (psycopg then spends
  up to ~5 s more trying to cancel the check before it gives the connection up);
- a lost connection is re-opened after the core's jittered pause (`outbox_core.backoff.LISTEN_RETRY`:
  100 ms doubling to 5 s, ±50 %), so the listeners of many replicas don't reconnect in lockstep;
- after every (re)connect, once ``LISTEN`` is in place, every subscriber is signalled once
  (:meth:`Listener._connected`): a worker claims and finds anything committed during the gap; a
  feed stream tells its client to refetch. Anything committed later is announced.

:class:`Listener` is that loop, written once, with its subscribers filed by key in a
:class:`~outbox_adapters.wakeup.WakeupHub`; a subclass names its channel, says which key a
notification names (:meth:`Listener._notified`) and how subscribers subscribe.

Nothing here is needed for correctness: workers poll anyway, and a dead listener only makes them
as slow as their poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

import psycopg
from psycopg import sql

from outbox_adapters.postgres import statements
from outbox_adapters.postgres.errors import as_unavailable, is_outage
from outbox_adapters.wakeup import LaneWakeup, WakeupHub
from outbox_core.backoff import LISTEN_RETRY, RetryPause
from outbox_core.errors import ConfigurationError

__all__ = ["WAKEUP_CHANNEL", "Listener", "WakeupListener"]

WAKEUP_CHANNEL = statements.WAKEUP_CHANNEL

_log = logging.getLogger(__name__)


class Listener:
    """One LISTEN connection on :attr:`channel`, kept alive for as long as the listener runs.

    ``async with listener:`` (or :meth:`start` / :meth:`aclose`). Nothing is done in the
    constructor. :meth:`start` opens the first connection and raises if it can't (a wrong DSN
    should be loud at startup); from then on a lost connection is re-opened in the background.
    """

    #: The LISTEN/NOTIFY channel (a subclass names it).
    channel: ClassVar[str]
    #: How the listener names itself in logs and in ``pg_stat_activity.application_name``.
    label: ClassVar[str]

    def __init__(  # noqa: PLR0913 - keyword-only tuning knobs, each with a default
        self,
        dsn: str,
        *,
        connect_kwargs: Mapping[str, Any] | None = None,
        retry: RetryPause = LISTEN_RETRY,
        jitter: Callable[[], float] = random.random,
        health_interval: float = 30.0,
        health_timeout: float = 5.0,
        connect_timeout: float = 10.0,
    ) -> None:
        kind = type(self).__name__
        if not isinstance(retry, RetryPause):
            raise ConfigurationError(
                f"{kind} retry must be a RetryPause (outbox_core.backoff), got {retry!r}"
            )
        for name, value in (
            ("health_interval", health_interval),
            ("health_timeout", health_timeout),
            ("connect_timeout", connect_timeout),
        ):
            if value <= 0:
                raise ConfigurationError(f"{kind} {name} must be positive, got {value!r}")
        self._dsn = dsn
        self._connect_kwargs = {
            "application_name": f"outbox-{self.label}",
            **(connect_kwargs or {}),
        }
        self._retry = retry
        self._jitter = jitter
        self._health_interval = health_interval
        self._health_timeout = health_timeout
        self._connect_timeout = connect_timeout
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        #: Connections opened after the first (each one followed by :meth:`_connected`).
        self.reconnects = 0
        #: Notifications received on :attr:`channel`.
        self.notifications = 0

    # --- what a subclass says ---------------------------------------------------------------------

    @functools.cached_property
    def _hub(self) -> WakeupHub:
        """The subscribers, filed by key (a lane, a feed scope): what a notification fans out to."""
        return WakeupHub()

    def _notified(self, payload: str) -> None:
        """A notification arrived on :attr:`channel` (called on the event loop; must not block):
        signal the subscribers of the key it names."""
        raise NotImplementedError

    def _connected(self) -> None:
        """LISTEN is (again) in place: whatever was announced while it was not is lost, so every
        subscriber is signalled once."""
        self._hub.wake_all()

    # --- state ------------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether LISTEN is in place right now."""
        return self._conn is not None and not self._conn.closed

    @property
    def backend_pid(self) -> int | None:
        """The server process of the LISTEN connection (for ``pg_stat_activity``), if connected."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, LISTEN, signal every subscriber, and keep listening in the background.

        A database that can't be reached raises :class:`~outbox_core.errors.StoreUnavailable`
        (the driver's error chained); a bad DSN raises the driver's own error.
        """
        if self._task is not None:
            raise RuntimeError(f"this {type(self).__name__} has already been started")
        try:
            self._conn = await self._connect()
        except Exception as exc:
            if is_outage(exc):
                raise as_unavailable(exc, "LISTEN") from exc
            raise
        self._task = asyncio.create_task(self._run(), name=f"outbox-{self.label}-listener")

    async def aclose(self) -> None:
        """Stop listening and close the connection. Subscribers fall back to their poll."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._drop_connection()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    # --- the background task ----------------------------------------------------------------------

    def _pause(self, failures: int) -> float:
        """The core's jittered pause: listeners of many replicas don't reconnect in lockstep."""
        return self._retry.after(failures, jitter=self._jitter()).total_seconds()

    async def _run(self) -> None:
        failures = 0
        while True:
            if self._conn is None:
                try:
                    self._conn = await self._connect()
                except Exception as exc:  # noqa: BLE001 - whatever it was, retry: polling covers us
                    failures += 1
                    delay = self._pause(failures)
                    _log.warning(
                        "%s listener: reconnect failed (%s); retry in %.1fs",
                        self.label,
                        _why(exc),
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                self.reconnects += 1
            up_since = time.monotonic()
            # LISTEN is in place: whatever commits from now on is announced; what committed while
            # we were away is found by the subscribers this signal sends looking.
            self._connected()
            try:
                await self._listen(self._conn)
            except Exception as exc:  # noqa: BLE001 - a dead listener would silently cost latency
                _log.warning(
                    "%s listener: connection lost (%s); reconnecting", self.label, _why(exc)
                )
            await self._drop_connection()
            if time.monotonic() - up_since > self._retry.cap.total_seconds():
                failures = 0  # it was up a while: a fresh loss starts the pauses over
            failures += 1
            await asyncio.sleep(self._pause(failures))

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Pass notifications on as they arrive; check the connection whenever it is quiet."""
        while True:
            async with contextlib.aclosing(conn.notifies(timeout=self._health_interval)) as notes:
                async for note in notes:
                    if note.channel == self.channel:
                        self.notifications += 1
                        self._notified(note.payload)
            # Every health_interval: make sure the server still answers (a half-open connection
            # never raises by itself). Notifications that arrive meanwhile are kept by psycopg and
            # yielded by the next notifies().
            async with asyncio.timeout(self._health_timeout):
                await conn.execute("SELECT 1")

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        async with asyncio.timeout(self._connect_timeout):
            conn = await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, **self._connect_kwargs
            )
            try:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            except BaseException:
                await conn.close()
                raise
        return conn

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


class WakeupListener(Listener):
    """One LISTEN connection per process, fanned out to the workers' wake-up signals.

    ``async with WakeupListener(dsn) as listener:`` (or :meth:`start` / :meth:`aclose`), then
    ``Worker(..., wakeup=listener.wakeup("email"))``. Nothing is done in the constructor.
    """

    channel = WAKEUP_CHANNEL
    label = "wakeup"

    def wakeup(self, lane: str) -> LaneWakeup:
        """A new wake-up signal for ``lane``, for one worker (keep a reference: held weakly here)."""
        return self._hub.subscribe(lane)

    def _notified(self, payload: str) -> None:
        self._hub.wake(payload)


def _why(exc: BaseException) -> str:
    """An outage in the store's words (:func:`~outbox_adapters.postgres.errors.as_unavailable`:
    the class and SQLSTATE, or libpq's first line); anything else by its class (a bare
    ``TimeoutError`` has no text)."""
    if is_outage(exc):
        return str(as_unavailable(exc, "LISTEN"))
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
