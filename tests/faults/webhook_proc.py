"""The webhook lane's retry worker, leader-gated, as a subprocess (the leader-loss test of the
webhook deliveries, tests/chaos/test_f6_webhook_leader.py), and the test-side feed of its lane.

    python -m tests.faults.webhook_proc --dsn DSN --name A --leader-ttl S [--http-attempt S] \\
        [--mark S] [--batch N] [--lease-grace S] [--poll S]

The child runs the production pieces unchanged, with their timing shrunk: the retry worker exactly
as the webhook lane builds it (``WebhookWorkers(...).retries``: the one
:class:`~outbox_adapters.runtime.Worker` over ``PostgresStore(pool, table=outbox_webhook_delivery)``
with :class:`~outbox_adapters.lanes.webhooks.DeliveryHandler` over the real
:class:`~outbox_adapters.http.HttpxWebhookSender`), on the default deliveries lane
(``webhook_deliveries``), leader-gated by
:class:`~outbox_adapters.postgres.leader.PostgresLeaderLease` on its pool (reported by
:class:`tests.faults.leader_proc.ReportingLease`). The drainer is not run: the test fans the
deliveries out itself (:func:`feed`), so every POST is the retry worker's. The destination guard
allows http to loopback (``tests.support.webhooks.GUARD``).

The test harness wraps the sender (:class:`StampingSender`, test only): every request carries one
more header, ``f6-holder`` (the process that sent it), and every send is reported. Events, JSON
lines on stdout (:func:`tests.faults.failpoints.print_event`, read by
:class:`tests.faults.worker_proc.WorkerProcess`):

``ready``   started (``holder``);
``term``    each change of the election's answer (``term``, ``t0``, ``t``: monotonic);
``send``    each POST the handler started: ``msg`` (its ``webhook-id``), ``start``/``end``
            (monotonic, one ``CLOCK_MONOTONIC`` for every process of the machine) and the outcome
            (``cancelled`` when the send was cut: it is reported all the same);
``batch``   each claimed batch's report at its end (``t``, ``leadership_lost``, ...);
``stopped`` after a graceful stop (SIGTERM).

``OUTBOX_TEST_MUTANT=<name>`` applies a mutant of ``tests/mutations/matrix.py`` inside the child.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs
from tests.faults.failpoints import print_event
from tests.faults.worker_proc import MUTANT_ENV, ROOT, WorkerProcess

from outbox_core.outcomes import Outcome
from outbox_core.ports import WebhookSender

__all__ = [
    "EVENT_TYPE",
    "HOLDER_HEADER",
    "StampingSender",
    "feed",
    "main",
    "start_webhook_proc",
]

#: The header the test harness adds to every request: the retry worker process that sent it.
HOLDER_HEADER = "f6-holder"
#: The one event type of the test's events, and of its one endpoint.
EVENT_TYPE = "f6.tick"


# --- the test's side ---------------------------------------------------------------------------


def start_webhook_proc(
    argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None
) -> WorkerProcess:
    """Start ``python -m tests.faults.webhook_proc ARGV``; the handle is a WorkerProcess."""
    child_env = {k: v for k, v in os.environ.items() if k != MUTANT_ENV}
    child_env.update(env or {})
    child_env["PYTHONUNBUFFERED"] = "1"
    stderr = tempfile.TemporaryFile(prefix="outbox-webhook-")  # noqa: SIM115 - closed by WorkerProcess
    popen = subprocess.Popen(  # noqa: S603 - our own module, with our own arguments
        [sys.executable, "-m", "tests.faults.webhook_proc", *argv],
        cwd=ROOT,
        env=child_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    return WorkerProcess(name, popen, stderr)


async def feed(dsn: str, url: str | None, count: int) -> dict[int, str]:
    """``count`` events of :data:`EVENT_TYPE` through the real pipeline's front half: enqueued on
    the webhook outbox (``enqueue_webhook_async``), claimed and fanned out by the repository
    (``fan_out_many``) with a birth lease of 0 under a token nobody holds: a drainer that died
    before its first attempts. Their deliveries (one each, to the one endpoint, registered at
    ``url`` on the first call) are due at once for the retry lane. Returns delivery id -> the
    event's ``webhook-id``."""
    from psycopg_pool import AsyncConnectionPool  # noqa: PLC0415 - test-side only

    from outbox_adapters.postgres import PostgresStore  # noqa: PLC0415
    from outbox_adapters.postgres.webhooks import (  # noqa: PLC0415
        WEBHOOK_LANE,
        WebhookRepository,
        enqueue_webhook_async,
        outbox_webhook,
    )
    from outbox_core.messages import ClaimToken  # noqa: PLC0415
    from outbox_core.ports import ClaimRequest  # noqa: PLC0415
    from outbox_core.signing import WebhookSecret  # noqa: PLC0415

    def token() -> ClaimToken:
        return ClaimToken.from_entropy(secrets.token_bytes(16))

    made: dict[int, str] = {}
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
    )
    async with pool:
        repo = WebhookRepository(pool)
        if url is not None:
            secret = WebhookSecret.generate_from(secrets.token_bytes(32)).to_text()
            await repo.add_endpoint(url, [EVENT_TYPE], secret=secret, tenant="acme")
        async with pool.connection() as conn, conn.transaction():
            for n in range(count):
                await enqueue_webhook_async(conn, EVENT_TYPE, {"n": n}, notify=False, tenant="acme")
        outbox = PostgresStore(pool, table=outbox_webhook)
        while True:
            request = ClaimRequest(
                lane=WEBHOOK_LANE, limit=50, lease=timedelta(seconds=60), token=token()
            )
            rows = await outbox.claim_due(request)
            if not rows:
                break
            fanned = await repo.fan_out_many(rows, birth_lease=timedelta(0), birth_token=token())
            for fan_out in fanned:
                made.update((int(d.id), fan_out.msg_id or "") for d in fan_out.deliveries)
        await outbox.close()
    return made


# --- the child ----------------------------------------------------------------------------------


class StampingSender:
    """A :class:`~outbox_core.ports.WebhookSender` wrapper (test harness only): adds the
    ``f6-holder`` header to every request and reports every send, cut or not."""

    def __init__(self, inner: WebhookSender, holder: str) -> None:
        self.inner = inner
        self.holder = holder

    async def send(
        self, url: str, *, headers: Mapping[str, str], body: bytes, budget: timedelta
    ) -> Outcome:
        start = time.monotonic()
        kind = "cancelled"
        try:
            outcome = await self.inner.send(
                url, headers={**headers, HOLDER_HEADER: self.holder}, body=body, budget=budget
            )
            kind = str(outcome.kind)
            return outcome
        finally:
            print_event(
                {"event": "send", "msg": headers.get("webhook-id"), "start": start,
                 "end": time.monotonic(), "kind": kind}
            )  # fmt: skip


async def _serve(args: argparse.Namespace) -> int:
    from tests.faults.leader_proc import ReportingLease  # noqa: PLC0415 - child-only imports
    from tests.support.webhooks import GUARD  # noqa: PLC0415

    from outbox_adapters.http import HttpxWebhookSender  # noqa: PLC0415
    from outbox_adapters.lanes.webhook_workers import WebhookWorkers  # noqa: PLC0415
    from outbox_adapters.lanes.webhooks import delivery_lane  # noqa: PLC0415
    from outbox_adapters.postgres import PostgresLeaderLease, PostgresStore  # noqa: PLC0415
    from outbox_adapters.postgres.webhooks import outbox_webhook_delivery  # noqa: PLC0415
    from outbox_adapters.runtime import BatchReport  # noqa: PLC0415
    from outbox_core.backoff import ExponentialBackoff  # noqa: PLC0415
    from outbox_core.webhook_timing import WebhookTiming  # noqa: PLC0415

    timing = WebhookTiming(
        http_attempt=timedelta(seconds=args.http_attempt),
        mark=timedelta(seconds=args.mark),
        retry_claim_batch=args.batch,
        lease_grace=timedelta(seconds=args.lease_grace),
        birth_lease=timedelta(seconds=args.http_attempt + args.mark),
    )
    config = delivery_lane(
        timing=timing,
        # A send cut at the term's end is a transient failure: retried soon, never given up.
        backoff=ExponentialBackoff(
            max_attempts=50, base=timedelta(seconds=0.3), cap=timedelta(seconds=1)
        ),
        poll_interval=args.poll,
        leader_ttl=timedelta(seconds=args.leader_ttl),
    )
    holder = f"{args.name}-{os.getpid()}"
    store = await PostgresStore.open(
        args.dsn, table=outbox_webhook_delivery, min_size=1, max_size=6
    )
    async with HttpxWebhookSender(GUARD) as sender:
        workers = WebhookWorkers(
            store.pool,
            StampingSender(sender, holder),
            delivery_config=config,
            leader=ReportingLease(PostgresLeaderLease(store.pool)),
            holder=holder,
        )
        worker = workers.retries
        run_once = worker.run_once

        async def reporting_run_once() -> BatchReport:
            report = await run_once()
            if report.claimed:
                print_event({"event": "batch", "t": time.monotonic(), **attrs.asdict(report)})
            return report

        worker.run_once = reporting_run_once  # type: ignore[method-assign]
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.request_stop)
        try:
            print_event({"event": "ready", "pid": os.getpid(), "holder": holder})
            stats = await worker.run()
        finally:
            await store.close()
    print_event({"event": "stopped", "stats": attrs.asdict(stats)})
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.webhook_proc")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--leader-ttl", type=float, required=True)
    parser.add_argument("--http-attempt", type=float, default=0.6)
    parser.add_argument("--mark", type=float, default=0.4)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--lease-grace", type=float, default=1.0)
    parser.add_argument("--poll", type=float, default=0.25)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(
        level="WARNING",
        stream=sys.stderr,
        format=f"%(asctime)s [{os.getpid()}] %(levelname)s %(name)s: %(message)s",
    )
    mutant = os.environ.get(MUTANT_ENV)
    if mutant:
        from tests.mutations import matrix  # noqa: PLC0415 - only when a mutant is asked for

        matrix.apply(mutant)
        logging.getLogger(__name__).warning("mutant %s applied", mutant)
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    raise SystemExit(main())
