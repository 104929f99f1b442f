"""The event relay and the e-mail consumer channel as subprocesses (RELIABILITY F9, and F6 for the
relay's leader lease), and the test-side helpers around them.

    python -m tests.faults.events_proc relay --dsn DSN --broker nats://H:P --topic T --lane L \\
        --name A [--leader-ttl S] [--publish S] [--mark S] [--batch N] [--poll S] [--ack-delay S]
    python -m tests.faults.events_proc consume --dsn DSN --broker nats://H:P --topic T --lane L \\
        --smtp-port P --ca-file CA.pem [--ack-wait S] [--kill-after-rows N]

Both run the production pieces unchanged, with their timing shrunk:

- ``relay``: :class:`~outbox_adapters.runtime.Worker` over ``PostgresStore(pool, table=outbox_event)``
  with :class:`~outbox_adapters.lanes.relay.RelayHandler` over the real
  :class:`~outbox_adapters.brokers.NatsBroker`, leader-gated by
  :class:`~outbox_adapters.postgres.leader.PostgresLeaderLease` (reported by
  :class:`tests.faults.leader_proc.ReportingLease`: ``term`` events). The test harness adds one
  header to every message, ``f6-holder`` (who published it), and holds each acknowledged publish
  ``--ack-delay`` seconds (a broker that takes a moment to answer: batches last on the wall clock).
  The relay's lane is the test's own (``--lane``), so tests sharing a database never meet.
- ``consume``: :class:`~outbox_adapters.lanes.channel_workers.EmailChannelWorkers` (the e-mail
  channel's consumer and its lane's worker: the real ``RowChannel``, ``RecipientRows``,
  ``EmailHandler``, ``SmtpMailer`` over strict STARTTLS) on its own lane, with the fail-points of
  :mod:`tests.faults.failpoints` (``OUTBOX_FAILPOINT``: the SMTP points and
  ``after_reply_before_mark``) plus one of its own, ``--kill-after-rows N``: SIGKILL right after
  the N-th event whose recipient rows this process wrote (committed, nothing sent). Every delivery
  is reported (``delivery``: event id, JetStream's delivery count).

Events on stdout are JSON lines (:func:`tests.faults.failpoints.print_event`), read by
:class:`tests.faults.worker_proc.WorkerProcess`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs
from tests.faults.failpoints import (
    FAILPOINT_ENV,
    FailingHandler,
    FailPoint,
    Trigger,
    install_smtp_failpoints,
    print_event,
)
from tests.faults.worker_proc import (
    CHAOS_BUDGETS,
    ROOT,
    WorkerProcess,
    chaos_smtp_settings,
    chaos_timing,
)

from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage, Publisher

__all__ = [
    "HOLDER_HEADER",
    "OWNER",
    "PUBLIC_URL",
    "HoldingPublisher",
    "main",
    "start_events_proc",
    "stream_messages",
]

#: The header the test harness adds to every relayed message: the relay process that published it.
HOLDER_HEADER = "f6-holder"
PUBLIC_URL = "https://app.example"
OWNER = "owner@platform.example"
SENDER = "noreply@f9.example"


# --- the test's side ---------------------------------------------------------------------------


def start_events_proc(
    role: str, argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None
) -> WorkerProcess:
    """Start ``python -m tests.faults.events_proc ROLE ARGV``; the handle is a WorkerProcess."""
    child_env = {k: v for k, v in os.environ.items() if k != FAILPOINT_ENV}
    child_env.update(env or {})
    child_env["PYTHONUNBUFFERED"] = "1"
    stderr = tempfile.TemporaryFile(prefix=f"outbox-{role}-")  # noqa: SIM115 - closed by WorkerProcess
    popen = subprocess.Popen(  # noqa: S603 - our own module, with our own arguments
        [sys.executable, "-m", "tests.faults.events_proc", role, *argv],
        cwd=ROOT,
        env=child_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    return WorkerProcess(name, popen, stderr)


async def stream_messages(url: str, subject: str) -> list[dict[str, Any]]:
    """Every message JetStream stores on ``subject``, in stream order: ``seq``, ``time`` (the
    server's wall clock, epoch seconds), ``headers``, ``data``. Read with direct gets (no consumer:
    reading consumes nothing)."""
    import nats  # noqa: PLC0415 - only the tests that read a stream
    import nats.js.errors  # noqa: PLC0415

    client = await nats.connect(servers=[url])
    try:
        js = client.jetstream()
        stream = await js.find_stream_name_by_subject(subject)
        found: list[dict[str, Any]] = []
        seq = 1
        while True:
            try:
                raw = await js.get_msg(stream, seq=seq, subject=subject, next=True)
            except nats.js.errors.NotFoundError:
                break
            if raw.seq is None:
                break
            seq = raw.seq + 1
            found.append(
                {
                    "seq": raw.seq,
                    "time": raw.time.timestamp() if raw.time else 0.0,
                    "headers": dict(raw.headers or {}),
                    "data": raw.data or b"",
                }
            )
        return found
    finally:
        await client.close()


# --- the child: relay -----------------------------------------------------------------------------


class HoldingPublisher:
    """A :class:`~outbox_core.ports.Publisher` wrapper (test harness only): stamps ``f6-holder``
    on every message and holds each answer ``delay`` seconds after the broker gave it."""

    def __init__(self, inner: Publisher, holder: str, delay: float) -> None:
        self.inner = inner
        self.holder = holder
        self.delay = delay

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        stamped = attrs.evolve(message, headers={**message.headers, HOLDER_HEADER: self.holder})
        start = time.monotonic()
        outcome = await self.inner.publish(stamped, budget=budget)
        print_event(
            {"event": "publish", "id": message.message_id, "key": message.key, "start": start,
             "end": time.monotonic(), "kind": str(outcome.kind)}
        )  # fmt: skip
        if self.delay:
            await asyncio.sleep(self.delay)
        return outcome


def _spec(topic: str) -> Any:
    from outbox_adapters.app.event_lanes import topic_streams  # noqa: PLC0415 - child-only

    return topic_streams([topic], timedelta(days=1))[0]


async def _relay(args: argparse.Namespace) -> int:
    from tests.faults.leader_proc import ReportingLease  # noqa: PLC0415

    from outbox_adapters.brokers import NatsBroker  # noqa: PLC0415 - child-only imports
    from outbox_adapters.lanes.relay import RelayHandler, relay_lane  # noqa: PLC0415
    from outbox_adapters.postgres import PostgresLeaderLease, PostgresStore  # noqa: PLC0415
    from outbox_adapters.postgres.events import outbox_event  # noqa: PLC0415
    from outbox_adapters.runtime import Worker  # noqa: PLC0415
    from outbox_core.timing import RelayTiming  # noqa: PLC0415

    timing = RelayTiming(
        publish=timedelta(seconds=args.publish),
        mark=timedelta(seconds=args.mark),
        batch_size=args.batch,
        lease_grace=timedelta(seconds=args.lease_grace),
    )
    settings: dict[str, Any] = {"lane": args.lane, "timing": timing, "poll_interval": args.poll}
    if args.leader_ttl:
        settings["leader_ttl"] = timedelta(seconds=args.leader_ttl)
    config = relay_lane(**settings)
    holder = f"{args.name}-{os.getpid()}"
    broker = NatsBroker([args.broker], streams=[_spec(args.topic)])
    store = await PostgresStore.open(args.dsn, table=outbox_event, min_size=1, max_size=4)
    lease = ReportingLease(PostgresLeaderLease(store.pool)) if args.leader_ttl else None
    worker = Worker(
        store,
        RelayHandler(HoldingPublisher(broker.publisher(), holder, args.ack_delay)),
        config,
        leader=lease,
        holder=holder,
    )
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.request_stop)
    try:
        await broker.jetstream()  # declared before the first claim
        print_event({"event": "ready", "pid": os.getpid(), "holder": holder})
        stats = await worker.run()
    finally:
        await store.close()
        await broker.aclose()
    print_event({"event": "stopped", "stats": attrs.asdict(stats)})
    return 0


# --- the child: the e-mail consumer channel --------------------------------------------------------


def _kill_after_rows(nth: int) -> None:
    """SIGKILL this process right after the ``nth`` event whose recipient rows it wrote."""
    from outbox_adapters.postgres.channels import RecipientRows  # noqa: PLC0415 - child-only

    original = RecipientRows.ensure
    seen = [0]

    async def ensure(self: RecipientRows, messages: Sequence[Any], *, new: bool = False) -> Any:
        rows = await original(self, messages, new=new)
        if any(row.attempts == 0 and row.status.value == "pending" for row in rows.values()):
            seen[0] += 1
            if seen[0] == nth:
                print_event(
                    {"event": "failpoint", "point": "after_rows_before_send", "t": time.time(),
                     "keys": sorted(rows)}
                )  # fmt: skip
                os.kill(os.getpid(), signal.SIGKILL)
        return rows

    RecipientRows.ensure = ensure  # type: ignore[method-assign]


async def _consume(args: argparse.Namespace, trigger: Trigger) -> int:
    from outbox_adapters.brokers import NatsBroker  # noqa: PLC0415 - child-only imports
    from outbox_adapters.clock import SystemClock  # noqa: PLC0415
    from outbox_adapters.lanes.channel_workers import (  # noqa: PLC0415
        ChannelTiming,
        EmailChannelWorkers,
    )
    from outbox_adapters.lanes.email import EmailHandler  # noqa: PLC0415
    from outbox_adapters.lanes.email_channel import (  # noqa: PLC0415
        EMAIL_CHANNEL_GROUP,
        email_channel_lane,
        platform_recipes,
    )
    from outbox_adapters.postgres.store import PostgresStore  # noqa: PLC0415
    from outbox_adapters.smtp import SmtpMailer  # noqa: PLC0415
    from outbox_core.backoff import ExponentialBackoff  # noqa: PLC0415

    if args.kill_after_rows:
        _kill_after_rows(args.kill_after_rows)
    install_smtp_failpoints(trigger)
    timing = chaos_timing(CHAOS_BUDGETS, batch_size=1, lease_seconds=None)
    config = email_channel_lane(
        lane=args.lane,
        timing=timing,
        backoff=ExponentialBackoff(
            max_attempts=20, base=timedelta(seconds=0.3), cap=timedelta(seconds=1)
        ),
        poll_interval=0.1,
    )
    channel_timing = ChannelTiming(
        event_deadline=timedelta(seconds=args.ack_wait / 2),
        retry_delay=timedelta(seconds=0.3),
        overrun_delay=timedelta(seconds=0.3),
        recheck=timedelta(seconds=0.2),
        recheck_cap=timedelta(seconds=1),
    )
    settings = chaos_smtp_settings(args.smtp_port, args.ca_file, SENDER)
    clock = SystemClock()
    broker = NatsBroker(
        [args.broker], streams=[_spec(args.topic)], ack_wait=timedelta(seconds=args.ack_wait)
    )
    store = await PostgresStore.open(args.dsn, min_size=1, max_size=5)
    mailer = SmtpMailer(settings, steps=timing.budgets)
    handler = FailingHandler(
        EmailHandler(mailer, sender=SENDER, clock=clock, steps=timing.budgets), trigger
    )
    workers = EmailChannelWorkers(
        store.pool,
        broker.consumer(EMAIL_CHANNEL_GROUP, [args.topic]),
        broker.publisher(),
        mailer,
        sender=SENDER,
        recipes=platform_recipes(PUBLIC_URL, OWNER),
        lane_config=config,
        timing=channel_timing,
        clock=clock,
        handler=handler,  # type: ignore[arg-type]
    )
    handle = workers.consumer.handle

    async def reporting_handle(message: Any, **decoded: Any) -> None:
        print_event({"event": "delivery", "id": message.message_id, "n": message.deliveries})
        await handle(message, **decoded)

    workers.consumer.handle = reporting_handle  # type: ignore[method-assign]
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, workers.request_stop)
    try:
        await broker.jetstream()
        print_event({"event": "ready", "pid": os.getpid()})
        stats = await workers.run()
    finally:
        await mailer.aclose()
        await store.close()
        await broker.aclose()
    print_event({"event": "stopped", "stats": attrs.asdict(stats)})
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.events_proc")
    roles = parser.add_subparsers(dest="role", required=True)
    for role in ("relay", "consume"):
        sub = roles.add_parser(role)
        sub.add_argument("--dsn", required=True)
        sub.add_argument("--broker", required=True)
        sub.add_argument("--topic", required=True)
        sub.add_argument("--lane", required=True)
    relay = roles.choices["relay"]
    relay.add_argument("--name", default="relay")
    relay.add_argument("--leader-ttl", type=float, default=0.0, help="0: no leader lease")
    relay.add_argument("--publish", type=float, default=0.6)
    relay.add_argument("--mark", type=float, default=0.4)
    relay.add_argument("--batch", type=int, default=8)
    relay.add_argument("--lease-grace", type=float, default=1.0)
    relay.add_argument("--poll", type=float, default=0.1)
    relay.add_argument("--ack-delay", type=float, default=0.0)
    consume = roles.choices["consume"]
    consume.add_argument("--smtp-port", type=int, required=True)
    consume.add_argument("--ca-file", required=True)
    consume.add_argument("--ack-wait", type=float, default=4.0)
    consume.add_argument("--kill-after-rows", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(
        level="WARNING",
        stream=sys.stderr,
        format=f"%(asctime)s [{os.getpid()}] %(levelname)s %(name)s: %(message)s",
    )
    if args.role == "relay":
        return asyncio.run(_relay(args))
    spec = os.environ.get(FAILPOINT_ENV)
    return asyncio.run(_consume(args, Trigger(FailPoint.parse(spec) if spec else None)))


if __name__ == "__main__":
    raise SystemExit(main())
