"""Where the webhook workers' time goes: the ``library`` drain of :mod:`bench.webhooks`, timed by part.

``python -m bench.webhook_breakdown [--dsn URL] [--events 1000] [--runs 3] [--first-attempts 32]
[--drain-in-flight 1]``

Each run drains ``--events`` events to one endpoint on a local receiver in its own process, as the
comparison does, with the parts' coroutines wrapped by a timer for the duration of the run (and
restored afterwards): the fan-out transaction (``WebhookRepository.fan_out_many``: a claimed
batch's fenced marks, their events, their born deliveries, in one transaction), the round's read
of its deliveries' targets (``delivery_targets``), the per-delivery target query
(``delivery_target``: retries, and first attempts whose round's read was stale), the POST
(``HttpxWebhookSender.send``, including the wait for a slot of the origin's cap), the delivery's fenced mark
(``PostgresStore.mark_if_pending``) and the drainer's claims. Printed per run: deliveries/s, this
process's CPU time per delivery, and each part's calls and mean wall time. Parts run concurrently
(the first attempts overlap the next fan-outs), so their wall times overlap; the drainer's fan-outs
run one after another, so their total is the floor of the drain's wall time. ``--drain-in-flight``
sets the drainer's ``rows_in_flight``: the rows handed over at once, fanned out in one
transaction (the default lane hands over its whole batch of 20; 1 is one transaction per row).

Also says whether ``sniffio`` is importable: without it, httpcore 1.0 tries (and fails) to import it
every time it makes a lock, several times per request, a search of ``sys.path`` each time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import secrets
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from typing import Any, Final

from psycopg_pool import AsyncConnectionPool

from bench import loop, server
from bench.library import DRAIN_POLL
from bench.receiver_process import ReceiverProcess
from bench.webhooks import EVENT_TYPE, GUARD, POOL_SIZE, load_events, verify_deliveries
from outbox_adapters.http import HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.webhooks import WebhookRepository
from outbox_adapters.runtime.born import DEFAULT_FIRST_ATTEMPTS
from outbox_core.signing import WebhookSecret
from outbox_core.webhook_timing import DEFAULT_FAN_OUT_TIMING

#: (class, coroutine method, label) timed during a run.
PARTS: Final = (
    (WebhookRepository, "fan_out_many", "fan-out transaction"),
    (WebhookRepository, "delivery_targets", "targets read by the round"),
    (WebhookRepository, "delivery_target", "target query"),
    (HttpxWebhookSender, "send", "POST"),
    (PostgresStore, "mark_if_pending", "delivery mark"),
    (PostgresStore, "claim_due", "claims"),
)


class _Timers:
    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        originals = [(cls, name, getattr(cls, name)) for cls, name, _label in PARTS]
        try:
            for cls, name, label in PARTS:
                setattr(cls, name, self._wrap(getattr(cls, name), label))
            yield
        finally:
            for cls, name, original in originals:
                setattr(cls, name, original)

    def _wrap(self, method: Any, label: str) -> Any:  # noqa: ANN401 - any coroutine method
        @functools.wraps(method)
        async def timed(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
            started = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - started
                self.calls[label] += 1

        return timed


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _run(
    pool: AsyncConnectionPool[Any], dsn: str, events: int, first: int, drain_in_flight: int
) -> tuple[float, float, _Timers]:
    await load_events(dsn, events)
    timers = _Timers()
    async with HttpxWebhookSender(GUARD) as sender:
        workers = WebhookWorkers(
            pool,
            sender,
            drain_config=drain_lane(poll_interval=DRAIN_POLL, rows_in_flight=drain_in_flight),
            delivery_config=delivery_lane(poll_interval=DRAIN_POLL),
            first_attempts=first,
        )
        with timers.installed():
            cpu = time.process_time()
            started = time.perf_counter()
            await workers.run(drain=True)
            wall = time.perf_counter() - started
            cpu = time.process_time() - cpu
    await verify_deliveries(pool, events, "breakdown")
    return wall, cpu, timers


async def _main(dsn: str, args: argparse.Namespace) -> None:
    secret = WebhookSecret.generate_from(secrets.token_bytes(32))
    with ReceiverProcess() as receiver:
        async with AsyncConnectionPool(
            dsn, min_size=POOL_SIZE, max_size=POOL_SIZE, kwargs={"autocommit": True}, open=False
        ) as pool:
            await pool.wait(timeout=30.0)
            await WebhookRepository(pool).add_endpoint(
                receiver.url, [EVENT_TYPE], secret=secret.to_text(), tenant="acme"
            )
            for run in range(args.runs + 1):
                wall, cpu, timers = await _run(
                    pool, dsn, args.events, args.first_attempts, args.drain_in_flight
                )
                label = "warm-up" if run == 0 else f"run {run}"
                _say(
                    f"{label}: {args.events / wall:,.0f} deliveries/s, wall {wall:.2f} s,"
                    f" process CPU {cpu / args.events * 1000:.2f} ms per delivery"
                )
                for _cls, _name, part in PARTS:
                    calls = timers.calls[part]
                    if calls:
                        mean = timers.seconds[part] / calls * 1000
                        _say(
                            f"    {part:<20} {calls:>6} calls, {mean:6.2f} ms each,"
                            f" {timers.seconds[part]:6.2f} s in all"
                        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook_breakdown")
    parser.add_argument("--dsn", help=f"PostgreSQL server (default: ${server.BENCH_DSN_ENV}, ...)")
    parser.add_argument("--events", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--first-attempts", type=int, default=DEFAULT_FIRST_ATTEMPTS)
    parser.add_argument("--drain-in-flight", type=int, default=DEFAULT_FAN_OUT_TIMING.batch_size)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    sniffio = importlib.util.find_spec("sniffio") is not None
    _say(
        f"first_attempts={args.first_attempts}, drainer rows_in_flight={args.drain_in_flight},"
        f" {args.events} events; sniffio {'installed' if sniffio else 'NOT installed'}"
    )
    with (
        server.server(args.dsn) as found,
        server.fresh_database(found.dsn, "whbreakdown") as dsn,
    ):
        loop.run(asyncio.wait_for(_main(dsn, args), timeout=600.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
