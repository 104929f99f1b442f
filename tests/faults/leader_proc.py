"""A worker on a leader-gated lane as a subprocess, and the test-side tools of RELIABILITY F6.

    python -m tests.faults.leader_proc --dsn DSN --smtp-port PORT --ca-file CA.pem --lane LANE \\
        --name A [--batch-size N] [--leader-ttl S] [--budget STEP=SECONDS ...] [--poll-interval S]

The child runs the production pieces unchanged — :class:`~outbox_adapters.postgres.store.PostgresStore`,
:class:`~outbox_adapters.postgres.leader.PostgresLeaderLease` on the store's pool,
:class:`~outbox_adapters.lanes.email.EmailHandler` over :class:`~outbox_adapters.smtp.SmtpMailer`
(strict STARTTLS) and :class:`~outbox_adapters.runtime.Worker` — and reports, as JSON lines on
stdout (read by :class:`tests.faults.worker_proc.WorkerProcess`):

``ready``   started (``holder``, ``sender``);
``term``    each time the answer of an election changes: ``term`` (``None``: not leading), ``t0``
            (monotonic start of the attempt) and ``t`` (monotonic, when the answer came back);
``send``    each row handed to the handler: ``start``/``end`` (monotonic) and the outcome;
``batch``   each claimed batch's report (``leadership_lost``, ``released``, ...) at its end (``t``);
``stopped`` after a graceful stop (SIGTERM).

Monotonic times are ``CLOCK_MONOTONIC``, one clock for every process of the machine, so the test
compares them with its own. The holder is ``<name>-<pid>`` and the envelope sender
``<name>-<pid>@f6.example``: the SMTP server tells the workers' messages apart by it.
``OUTBOX_TEST_MUTANT=<name>`` applies a mutant of ``tests/mutations/matrix.py`` inside the child.

Test side: :func:`start_leader_worker` starts one; :class:`ProxyLoop` runs
:class:`~tests.faults.proxy.FaultProxy` objects on an event loop of their own (the F6 test is
synchronous: it blocks on worker events); :class:`StampingSinkHandler` stamps every message's MAIL
and end of DATA on the monotonic clock, delays each reply a little (long batches) and can hold the
reply to one worker's next message (:meth:`StampingSinkHandler.trap`) so the test freezes that
worker while it waits for it.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import concurrent.futures
import contextlib
import itertools
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
from aiosmtpd.smtp import SMTP, Envelope, Session
from tests.faults.failpoints import print_event
from tests.faults.proxy import FaultProxy
from tests.faults.worker_proc import (
    MUTANT_ENV,
    ROOT,
    WorkerProcess,
    _import_store,
    _wait_for_go,
    chaos_smtp_settings,
    chaos_timing,
)

from outbox_adapters.demo.sink import SinkHandler
from outbox_core.messages import ClaimedRow
from outbox_core.outcomes import Outcome
from outbox_core.ports import LeaderTerm, RowHandler

if TYPE_CHECKING:
    from outbox_adapters.postgres.leader import PostgresLeaderLease

__all__ = [
    "Fault",
    "LeaderWorkerOptions",
    "ProxyLoop",
    "Stamp",
    "StampingSinkHandler",
    "handover_figures",
    "main",
    "overlaps",
    "stale_acts",
    "start_leader_worker",
    "term_wins",
    "unforced_losses",
]

T = TypeVar("T")


# --- the test's side ---------------------------------------------------------------------------


@attrs.frozen
class LeaderWorkerOptions:
    dsn: str
    smtp_port: int
    ca_file: str
    lane: str
    name: str
    budgets: Mapping[str, float]
    batch_size: int
    leader_ttl: float
    poll_interval: float

    def argv(self) -> list[str]:
        args = [
            "--dsn", self.dsn, "--smtp-port", str(self.smtp_port), "--ca-file", self.ca_file,
            "--lane", self.lane, "--name", self.name, "--batch-size", str(self.batch_size),
            "--leader-ttl", str(self.leader_ttl), "--poll-interval", str(self.poll_interval),
        ]  # fmt: skip
        for step, seconds in self.budgets.items():
            args += ["--budget", f"{step}={seconds}"]
        return args


def start_leader_worker(
    options: LeaderWorkerOptions, *, env: Mapping[str, str] | None = None
) -> WorkerProcess:
    """Start one worker process; the handle is :class:`~tests.faults.worker_proc.WorkerProcess`."""
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env["PYTHONUNBUFFERED"] = "1"
    stderr = tempfile.TemporaryFile(prefix="outbox-f6-")  # noqa: SIM115 - closed by WorkerProcess
    popen = subprocess.Popen(  # noqa: S603 - our own module, with our own arguments
        [sys.executable, "-m", "tests.faults.leader_proc", *options.argv()],
        cwd=ROOT,
        env=child_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    return WorkerProcess(options.name, popen, stderr)


class ProxyLoop:
    """An event loop in a thread of its own, for fault proxies driven from synchronous code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="proxies", daemon=True)
        self._thread.start()
        self.proxies: list[FaultProxy] = []

    def run(self, coro: Coroutine[Any, Any, T], *, timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def proxy(self, host: str, port: int) -> FaultProxy:
        proxy = self.run(FaultProxy(host, port).start())
        self.proxies.append(proxy)
        return proxy

    def call(self, action: Callable[[], None]) -> None:
        """Run ``action`` (a proxy's mode switch) on the proxies' loop, and wait for it."""

        async def act() -> None:
            action()

        self.run(act())

    def close(self) -> None:
        for proxy in self.proxies:
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                self.run(proxy.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@attrs.frozen
class Stamp:
    """One message the server accepted: whose, and when its transaction ran (monotonic)."""

    sender: str
    mail_at: float
    data_at: float


class StampingSinkHandler(SinkHandler):
    """The sink's handler, stamping every message's MAIL and end of DATA (``time.monotonic()``).

    Every DATA reply is held ``delay`` seconds after the message was recorded (a server that
    takes a moment to queue it), which makes a batch of rows last long on the wall clock.
    :meth:`trap` holds the reply to the next message of one sender until :meth:`release`.
    """

    def __init__(self, *, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self._stamps_lock = threading.Lock()
        self.stamps: list[Stamp] = []
        self._trap_sender: str | None = None
        self.caught = threading.Event()
        self._released = threading.Event()

    async def handle_MAIL(  # noqa: N802 - aiosmtpd's hook name
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        mail_options: list[str],
    ) -> str:
        envelope.f6_mail_at = time.monotonic()  # type: ignore[attr-defined]
        return await super().handle_MAIL(server, session, envelope, address, mail_options)

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        data_at = time.monotonic()
        reply = await super().handle_DATA(server, session, envelope)
        sender = str(envelope.mail_from)
        with self._stamps_lock:
            self.stamps.append(Stamp(sender, getattr(envelope, "f6_mail_at", data_at), data_at))
            trapped = sender == self._trap_sender and not self.caught.is_set()
            if trapped:
                self.caught.set()
        if trapped:
            # A threading.Event, set from the test's thread: polled, the sink's loop runs on.
            while not self._released.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        elif self.delay:
            await asyncio.sleep(self.delay)
        return reply

    def trap(self, sender: str) -> None:
        """Hold the reply to ``sender``'s next message (``caught`` is set when it arrives)."""
        with self._stamps_lock:
            self._released.clear()
            self.caught.clear()
            self._trap_sender = sender

    def release(self) -> None:
        with self._stamps_lock:
            self._trap_sender = None
        self._released.set()

    def snapshot_stamps(self) -> list[Stamp]:
        with self._stamps_lock:
            return list(self.stamps)


@attrs.define
class Fault:
    """One fault injected into the leader, and what followed (F6)."""

    kind: str
    victim: str  # holder
    at: float  # monotonic, just before the fault
    healed_at: float | None = None
    successor: str | None = None
    election: float | None = None  # seconds to the successor's winning answer
    handover: float | None = None  # seconds to the successor's first act (MAIL, publish)


def overlaps(stamps: list[Stamp]) -> list[tuple[Stamp, Stamp]]:
    """Pairs of acts (messages, publishes) of two different senders whose spans overlap in time."""
    ordered = sorted(stamps, key=lambda s: s.mail_at)
    found = []
    for i, first in enumerate(ordered):
        for later in itertools.islice(ordered, i + 1, None):
            if later.mail_at >= first.data_at:
                break
            if later.sender != first.sender:
                found.append((first, later))
    return found


def handover_figures(faults: list[Fault]) -> tuple[list[float], str]:
    """The handovers measured, and the worst per kind of fault (``pause 3.17s, kill 2.84s``)."""
    handovers = [f.handover for f in faults if f.handover is not None]
    by_kind = ", ".join(
        f"{kind} {max(f.handover or 0 for f in faults if f.kind == kind):.2f}s"
        for kind in dict.fromkeys(f.kind for f in faults)
    )
    return handovers, by_kind


def term_wins(holders: Mapping[str, WorkerProcess]) -> list[tuple[float, int, str]]:
    """Every term won, ``(monotonic time of the answer, term, holder)``, oldest first, from the
    ``term`` events of the processes (holder -> process)."""
    return sorted(
        (event["t"], event["term"], holder)
        for holder, process in holders.items()
        for event in process.find("term")
        if event["term"] is not None
    )


def stale_acts(wins: list[tuple[float, int, str]], acts: list[tuple[str, float]]) -> list[str]:
    """Acts ``(holder, monotonic time)`` done after another holder had won a newer term than the
    actor's: a deposed leader still acting."""
    times = [t for t, _, _ in wins]
    found = []
    for holder, at in acts:
        before = wins[: bisect.bisect_left(times, at)]
        if not before:
            continue
        newest = max(before, key=lambda win: win[1])
        if newest[2] != holder:
            found.append(f"{holder} at {at:.3f} in term {newest[1]} of {newest[2]}")
    return found


def unforced_losses(holders: Mapping[str, WorkerProcess], faults: list[Fault]) -> list[str]:
    """Batches cut for want of a provable term (``leadership_lost``, from the ``batch`` events) by
    a worker nobody had faulted since it last won a term (holder -> process)."""
    found = []
    for holder, process in holders.items():
        wins = [e["t"] for e in process.find("term") if e["term"] is not None]
        for batch in process.find("batch"):
            if not batch["leadership_lost"]:
                continue
            excused = any(
                f.victim == holder
                and f.at <= batch["t"]
                and not any(f.at < (f.healed_at or f.at) < w < batch["t"] for w in wins)
                for f in faults
            )
            if not excused:
                found.append(f"{holder} at {batch['t']:.3f}: {batch}")
    return found


# --- the child ----------------------------------------------------------------------------------


class ReportingLease:
    """A :class:`~outbox_core.ports.LeaderLease` wrapper that reports each change of answer."""

    def __init__(self, inner: PostgresLeaderLease) -> None:
        self.inner = inner
        self._last: int | None = None

    async def try_acquire(
        self, lane: str, holder: str, *, ttl: timedelta, now: datetime | None = None
    ) -> LeaderTerm | None:
        started = time.monotonic()
        try:
            term = await self.inner.try_acquire(lane, holder, ttl=ttl, now=now)
        except BaseException as exc:
            self._report(None, started, error=type(exc).__name__)
            raise
        self._report(None if term is None else term.term, started)
        return term

    def _report(self, term: int | None, started: float, error: str | None = None) -> None:
        if term != self._last:
            self._last = term
            print_event(
                {
                    "event": "term",
                    "term": term,
                    "t0": started,
                    "t": time.monotonic(),
                    "error": error,
                }
            )

    async def release(self, term: LeaderTerm, *, now: datetime | None = None) -> None:
        await self.inner.release(term, now=now)
        self._last = None
        print_event({"event": "term", "term": None, "t0": time.monotonic(), "t": time.monotonic()})


class ReportingHandler:
    """A :class:`~outbox_core.ports.RowHandler` wrapper that reports each send's span."""

    def __init__(self, inner: RowHandler) -> None:
        self.inner = inner

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        start = time.monotonic()
        outcome = await self.inner(row, budget=budget)
        print_event(
            {"event": "send", "row": row.id, "start": start, "end": time.monotonic(),
             "kind": str(outcome.kind), "budget": budget.total_seconds()}
        )  # fmt: skip
        return outcome


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.leader_proc")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--smtp-port", type=int, required=True)
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--lane", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--leader-ttl", type=float, required=True)
    parser.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS")
    parser.add_argument("--poll-interval", type=float, default=0.25)
    parser.add_argument("--standby", action="store_true")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> int:
    store_class = _import_store()  # first: nothing below may drag the package __init__ in
    from outbox_adapters.clock import SystemClock  # noqa: PLC0415 - child-only imports
    from outbox_adapters.lanes.email import EmailHandler, email_lane  # noqa: PLC0415
    from outbox_adapters.postgres.leader import PostgresLeaderLease  # noqa: PLC0415
    from outbox_adapters.runtime import BatchReport, Worker  # noqa: PLC0415
    from outbox_adapters.smtp import SmtpMailer  # noqa: PLC0415
    from outbox_core.backoff import ExponentialBackoff  # noqa: PLC0415

    budgets = {k: float(v) for k, v in (item.split("=", 1) for item in args.budget)}
    timing = chaos_timing(budgets, batch_size=args.batch_size, lease_seconds=None)
    config = email_lane(
        lane=args.lane,
        timing=timing,
        backoff=ExponentialBackoff(
            max_attempts=50, base=timedelta(seconds=0.5), cap=timedelta(seconds=2)
        ),
        poll_interval=args.poll_interval,
        leader_ttl=timedelta(seconds=args.leader_ttl),
    )
    holder = f"{args.name}-{os.getpid()}"
    sender = f"{holder.lower()}@f6.example"
    settings = chaos_smtp_settings(args.smtp_port, args.ca_file, sender)
    clock = SystemClock()
    store = await store_class.open(args.dsn, min_size=1, max_size=4)
    mailer = SmtpMailer(settings, steps=timing.budgets)
    worker = Worker(
        store,
        ReportingHandler(EmailHandler(mailer, sender=sender, clock=clock, steps=timing.budgets)),
        config,
        clock=clock,
        leader=ReportingLease(PostgresLeaderLease(store.pool)),
        holder=holder,
    )
    run_once = worker.run_once

    async def reporting_run_once() -> BatchReport:
        report = await run_once()
        if report.claimed:
            print_event({"event": "batch", "t": time.monotonic(), **attrs.asdict(report)})
        return report

    worker.run_once = reporting_run_once  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def request_stop() -> None:
        stop.set()
        worker.request_stop()

    loop.add_signal_handler(signal.SIGTERM, request_stop)
    try:
        print_event({"event": "ready", "pid": os.getpid(), "holder": holder, "sender": sender})
        if args.standby and not await _wait_for_go(loop, stop):
            return 0
        stats = await worker.run()
    finally:
        await mailer.aclose()
        await store.close()
    print_event({"event": "stopped", "stats": attrs.asdict(stats)})
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(
        level="WARNING",
        stream=sys.stderr,
        format=f"%(asctime)s [{os.getpid()}] %(levelname)s %(name)s: %(message)s",
    )
    mutant = os.environ.get(MUTANT_ENV)
    if mutant:
        _import_store()  # the matrix imports the statements module: keep the fast path
        from tests.mutations import matrix  # noqa: PLC0415 - only when a mutant is asked for

        matrix.apply(mutant)
        logging.getLogger(__name__).warning("mutant %s applied", mutant)
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    raise SystemExit(main())
