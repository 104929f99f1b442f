"""F3 — PostgreSQL outages mid-drain (RELIABILITY.md): restarts (fast, immediate), killed backends.

A real worker (in this process, on its own pool) drains a lane of a throwaway PostgreSQL server
(:class:`tests.faults.pg.ThrowawayPostgres`, this module's alone) into a real SMTP server, while
the test, each time a few more rows have gone out, takes the database away: ``pg_ctl restart -m
fast``, ``-m immediate`` (crash recovery), and ``pg_terminate_backend`` of every connection.
Counted from what the SMTP server received and what the database holds:

- lost = rows never delivered or not ``dispatched`` at the end: 0;
- duplicates = extra copies at the server: at most 1 per worker per outage (a row delivered while
  the database was away whose mark could not land within its budget is sent again after its lease);
- the worker does not exit (mechanism: ``Worker.run`` survives a failing claim, retrying with a
  capped backoff; without it the first outage ends the worker and the rows are lost to it);
- work resumes within seconds of the server's return (mechanism: the detached mark retries a lost
  connection inside its budget, and the pool replaces dead connections): printed as ``resume_s``,
  the slowest outage's time from the server's return to every worker's next successful claim.

Placement: each outage is armed on one worker's next claim or mark, and strikes only when that
call comes. A claim always comes (an idle worker polls); a mark needs a row. So while an outage is
armed the test keeps rows due on the lane (a few batches' worth, enqueued whenever fewer are left,
never while the server is being taken down): the armed worker's next claim finds a row, and its
mark follows, however far the drain has got and whichever worker took the other rows. Every
planned outage strikes; none waits for a mark that cannot come.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import attrs
import pytest
from tests.faults.pg import ThrowawayPostgres

from outbox_adapters.clock import SystemClock
from outbox_adapters.lanes.email import EmailHandler, email_lane
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.backoff import RetryPause, SlotSchedule
from outbox_core.messages import ClaimedRow, Mark
from outbox_core.ports import ClaimRequest, MarkResult
from outbox_core.timing import EmailStepBudgets, EmailTiming
from outbox_core.tls import SmtpSecurityPolicy

#: The pause after a failed claim, shrunk with the test's other timings (the default, 1 s doubling
#: to 30 s, would have a worker still asleep long after the database came back).
CLAIM_RETRY_SHRUNK = RetryPause(base=timedelta(milliseconds=100), cap=timedelta(seconds=2))

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SENDER = "noreply@shop.example"
#: Per-row 8.3 s (the mark keeps its 5 s budget: it must outlast a restart), batch 3,
#: batch timeout 24.9 s, claim lease 25.9 s.
TIMING = EmailTiming(
    EmailStepBudgets(
        suppression=timedelta(seconds=0.1),
        branding=timedelta(seconds=0.1),
        dial=timedelta(seconds=1),
        smtp_exchange=timedelta(seconds=2),
        bounce_report=timedelta(seconds=0.1),
        mark=timedelta(seconds=5),
    ),
    batch_size=3,
    lease_grace=timedelta(seconds=1),
)
#: How long the server stays down in a restart (on top of the stop and start themselves).
DOWN_FOR = 1.0
#: The armed call comes within a poll interval plus one row's work (rows are kept due); this is
#: only the bound on a worker that stopped working, which the test then reports.
STRIKE_WITHIN = 60.0


Hook = Callable[[], Awaitable[None]]


class Watched:
    """The real store, noting when claims succeed (for resumption) and letting the test strike
    at a precise step: a hook armed on ``claim`` or ``mark`` runs (once) right before that call,
    so the call meets the outage: a claim on dead connections, a row delivered but not yet marked.
    """

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self.claims: list[tuple[float, int]] = []
        self.failed_claims = 0
        self._hooks: dict[str, Hook] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def arm(self, point: str, hook: Hook) -> None:
        self._hooks[point] = hook

    def disarm(self, point: str) -> None:
        self._hooks.pop(point, None)

    async def _strike(self, point: str) -> None:
        hook = self._hooks.pop(point, None)
        if hook is not None:
            await hook()

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        await self._strike("claim")
        try:
            rows = await self._store.claim_due(request)
        except (Exception, asyncio.CancelledError):
            # Cancelled: the worker's claim budget cut it off (a claim caught by the outage).
            self.failed_claims += 1
            raise
        self.claims.append((time.monotonic(), len(rows)))
        return rows

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        await self._strike("mark")
        return await self._store.mark_if_pending(mark)


@attrs.define
class Outage:
    kind: str
    point: str
    back_at: float = 0.0
    failed_claims: int = 0
    resume_s: float | None = None


async def _until(
    condition: Callable[[], bool],
    *,
    within: float,
    what: str,
    abort: Callable[[], str | None] = lambda: None,
    state: Callable[[], str] = lambda: "",
) -> None:
    deadline = time.monotonic() + within
    while not condition():
        reason = abort()
        if reason:
            raise AssertionError(f"{what}: {reason}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s. {state()}")
        await asyncio.sleep(0.02)


async def _strike(
    pg: ThrowawayPostgres,
    outage: Outage,
    watched: Watched,
    *,
    top_up: Callable[[], None],
    abort: Callable[[], str | None],
) -> None:
    """Arm the outage on the worker's next claim or mark, keep rows due until it strikes (with
    ``top_up``, a blocking call run in a thread); return once the server is back."""
    loop = asyncio.get_running_loop()
    fired: asyncio.Future[asyncio.Task[None]] = loop.create_future()
    writing = asyncio.Lock()  # rows are never being enqueued while the server is taken down

    async def take_down() -> None:
        async with writing:
            if outage.kind == "terminate":
                await asyncio.to_thread(pg.terminate_backends)
            else:
                await asyncio.to_thread(pg.stop, outage.kind)  # type: ignore[arg-type]

    async def hook() -> None:
        # Runs inside the worker's call, which then meets the outage: don't let it go on first.
        # The outage runs in a task of its own: should the call's own budget cut it off meanwhile
        # (a slow pg_ctl on a loaded machine), the outage still completes, and is waited for below.
        down = asyncio.ensure_future(take_down())
        fired.set_result(down)
        await asyncio.shield(down)

    watched.arm(outage.point, hook)
    deadline = loop.time() + STRIKE_WITHIN
    while not fired.done():
        reason = abort()
        if reason or loop.time() > deadline:
            watched.disarm(outage.point)  # no outage in the middle of the workers' shutdown
            raise AssertionError(
                f"{outage.kind} at {outage.point} never struck: the armed worker made no"
                f" {outage.point} call within {STRIKE_WITHIN}s with rows due"
                + (f" ({reason})" if reason else "")
            )
        async with writing:
            if not fired.done():
                await asyncio.to_thread(top_up)
        await asyncio.wait({fired}, timeout=0.1)
    await fired.result()
    if outage.kind == "terminate":
        outage.back_at = time.monotonic()  # the server never left; its sessions did
        return
    await asyncio.sleep(DOWN_FOR)
    outage.back_at = await asyncio.to_thread(pg.start_again)


def _rows_kept_due(db: Any, lane: str, ids: list[int], *, keep: int) -> Callable[[], None]:
    """A blocking ``top_up()``: enqueue ``keep`` more rows (noted in ``ids``) when fewer than
    ``keep`` are due on ``lane``, whatever the drain has done meanwhile."""

    def top_up() -> None:
        if db.due(lane) < keep:
            ids.extend(db.enqueue(lane, keep))

    return top_up


def _plan(full: bool) -> list[tuple[str, str]]:
    """(kind, point) of each outage. Short: each kind once, each point met; full: all pairs."""
    if not full:
        return [("fast", "mark"), ("immediate", "mark"), ("terminate", "claim")]
    kinds, points = ("fast", "immediate", "terminate"), ("mark", "claim")
    return [(kind, point) for _ in range(2) for kind in kinds for point in points]


async def test_f3_postgres_outages_mid_drain(  # noqa: PLR0915, PLR0917 - one story; fixtures by name
    pg: ThrowawayPostgres,
    chaos_sink: Any,
    chaos_db: Any,
    new_lane: Callable[[str], str],
    chaos_full: bool,
    report: Callable[[str], None],
) -> None:
    plan = _plan(chaos_full)
    n_workers = 2 if chaos_full else 1
    n_rows = 30 * n_workers * (len(plan) + 1)
    lane = new_lane("f3")
    # The conftest's table helper, pointed at this module's own server (via its unix socket).
    db = type(chaos_db)(pg.admin_dsn)
    chaos_sink.dsn = pg.admin_dsn  # the mails' rows are on this module's server
    ids = db.enqueue(lane, n_rows)
    chaos_sink.set_delay(0.01)  # pace the drain so every outage lands mid-drain

    settings = SmtpSettings(
        host="127.0.0.1",
        port=chaos_sink.port,
        policy=SmtpSecurityPolicy(sender=SENDER),
        ca_file=chaos_sink.ca_file,
    )
    config = email_lane(
        lane=lane,
        timing=TIMING,
        poll_interval=0.05,
        claim_retry=CLAIM_RETRY_SHRUNK,
        backoff=SlotSchedule((timedelta(seconds=1),) * 10),
    )
    stores = [await PostgresStore.open(pg.dsn, max_size=4) for _ in range(n_workers)]
    watched = [Watched(store) for store in stores]
    mailers = [SmtpMailer(settings, steps=TIMING.budgets) for _ in range(n_workers)]
    workers = [
        Worker(w, EmailHandler(m, sender=SENDER, clock=SystemClock()), config)
        for w, m in zip(watched, mailers, strict=True)
    ]
    tasks = [asyncio.create_task(worker.run()) for worker in workers]
    outages: list[Outage] = []
    exited_early: list[str] = []

    def exited() -> str | None:
        gone = [i for i, task in enumerate(tasks) if task.done()]
        return f"worker(s) {gone} exited" if gone else None

    # While an outage is armed: every worker's next claim and the one after find rows.
    top_up = _rows_kept_due(db, lane, ids, keep=2 * TIMING.batch_size * n_workers)

    try:
        step = n_rows // (len(plan) + 1)
        for number, (kind, point) in enumerate(plan, start=1):

            def out(target: int = number * step) -> bool:
                return bool(sum(chaos_sink.copies(lane).values()) >= target)

            await _until(
                out,
                within=60,
                what=f"{number * step} rows out before outage {number}",
                abort=exited,
            )
            outage = Outage(kind, point)
            outages.append(outage)
            claims_before = [len(w.claims) for w in watched]
            failed_before = sum(w.failed_claims for w in watched)
            # The outage strikes the first worker at the named step; the others wherever they are.
            await _strike(pg, outage, watched[number % n_workers], top_up=top_up, abort=exited)

            def resumed(before: list[int] = claims_before, back: float = outage.back_at) -> bool:
                return all(
                    any(at >= back for at, _ in w.claims[b:])
                    for w, b in zip(watched, before, strict=True)
                )

            def state(before: list[int] = claims_before) -> str:
                return "; ".join(
                    f"worker {i}: claims since {w.claims[b:][-5:]}, failed {w.failed_claims},"
                    f" pool {stores[i].pool.get_stats()}, stats {workers[i].stats}"
                    for i, (w, b) in enumerate(zip(watched, before, strict=True))
                )

            await _until(
                resumed,
                within=30,
                what=f"claims resumed after {kind} at {point} (back at {outage.back_at:.1f})",
                abort=exited,
                state=state,
            )
            outage.resume_s = max(
                min(at for at, _ in w.claims[b:] if at >= outage.back_at) - outage.back_at
                for w, b in zip(watched, claims_before, strict=True)
            )
            outage.failed_claims = sum(w.failed_claims for w in watched) - failed_before
            exited_early += [f"worker {i}" for i, t in enumerate(tasks) if t.done()]
        rows = await asyncio.to_thread(
            db.wait_resolved, lane, timeout=TIMING.claim_lease().total_seconds() + 30
        )
        exited_early += [f"worker {i}" for i, t in enumerate(tasks) if t.done()]
    finally:
        for worker in workers:
            worker.request_stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)
        for mailer in mailers:
            await mailer.aclose()
        for store in stores:
            await store.close()

    copies = chaos_sink.copies(lane)
    lost = sum(1 for i in ids if copies[i] == 0 or rows[i]["status"] != "dispatched")
    duplicates = sum(count - 1 for count in copies.values() if count > 1)
    bound = n_workers * len(outages)
    resume = [o.resume_s for o in outages if o.resume_s is not None]
    report(
        f"F3 outages={len(outages)} lost={lost} duplicates={duplicates} (bound {bound})"
        f" worker_exited={'yes' if exited_early else 'no'} resume_s={max(resume):.2f}"
        f" workers={n_workers} rows={len(ids)}"
        f" per_outage=[{', '.join(f'{o.kind}@{o.point}:{o.resume_s:.2f}s' for o in outages)}]"
        f" failed_claims={sum(o.failed_claims for o in outages)}"
        f" stale_marks={sum(w.stats.stale_marks for w in workers)}"
        f" lost_marks={sum(w.stats.mark_errors for w in workers)}"
    )
    assert not exited_early, f"a worker exited during the outages: {exited_early}"
    assert lost == 0
    assert duplicates <= bound
    assert all(r < 15 for r in resume), "work did not resume within seconds of the return"
    # The claim-side outages must really have failed a claim, or "the worker does not exit" was
    # never put to the test.
    assert all(o.failed_claims for o in outages if o.point == "claim"), outages
