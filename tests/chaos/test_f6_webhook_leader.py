"""F6 for the webhook lane's retry worker (docs/reliability.md, ADR 0008, ADR 0018): never two
retry workers POSTing at once, 0 deliveries lost, a new leader within the TTL + one election
interval.

Three retry-worker subprocesses (:mod:`tests.faults.webhook_proc`: the webhook lane's own retry
worker, ``WebhookWorkers(...).retries``, with the real DeliveryHandler, HttpxWebhookSender and
PostgresLeaderLease; timing shrunk: HTTP attempt 0.6 s + mark 0.4 s, retry batch 10, leader TTL
2 s, poll 0.25 s) run the deliveries lane over a database of the test's own (a scratch database on
the session's server: the lane and the webhook tables are the production ones, and nothing else
is in them), each through a :class:`~tests.faults.proxy.FaultProxy` of its own, and POST to one
real local receiver (:class:`~tests.support.receivers.HttpReceiver`) that holds each reply
``HOLD`` seconds, so a batch of 10 lasts ~2.5 s, longer than the room a term leaves for starting
rows (TTL - per attempt = 1 s): the term must be renewed while it runs. The harness stamps every
request with its sender (header ``f6-holder``, added by the test's sender wrapper, not the library).
The lane is kept full: before each fault the test enqueues webhook events and fans them out with
the repository (a birth lease of 0, under a token nobody holds), so their deliveries are due for
the retry lane at once. The leader is, in turn, paused (SIGSTOP past its TTL, resumed once a
successor POSTs), partitioned from PostgreSQL (its proxy stalls; the receiver stays reachable),
SIGKILLed and restarted.

Counted from the workers' own reports (every send they start, on the machine's monotonic clock,
which every process shares), the receiver's record and the database:

- ``overlaps``: POSTs STARTED by a worker after another had won a newer term (a deposed leader
  still acting; the terms come from the workers' own ``term`` reports): must be 0. A send cut at
  the term's end is reported too, and counted, whatever became of it;
- ``unforced_losses``: batches a worker nobody had faulted cut short for want of a provable term
  (``leadership_lost``): must be 0. This is what turns red without the renewal beside the batch
  (the matrix's ``webhook-retries-leader-no-renewal-in-batch``): each batch then outlives the term
  it started under;
- ``lost``: deliveries not dispatched, or whose ``webhook-id`` never reached the receiver: must be 0;
- ``duplicates``: requests beyond the first per delivery (a leader partitioned after its POST and
  before its mark: at-least-once, the receiver drops them by ``webhook-id``), reported, not bound;
- ``handover``: from the fault to the first POST another worker started: within TTL + POLL + SLACK.

Short by default (each fault once); ``OUTBOX_CHAOS=full``: three rounds.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator

import attrs
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tests.faults.leader_proc import (
    Fault,
    ProxyLoop,
    handover_figures,
    stale_acts,
    term_wins,
    unforced_losses,
)
from tests.faults.proxy import FaultProxy
from tests.faults.webhook_proc import HOLDER_HEADER, feed, start_webhook_proc
from tests.faults.worker_proc import MUTANT_ENV, WorkerProcess
from tests.support.postgres import scratch_database
from tests.support.receivers import HttpReceiver

from outbox_adapters.postgres import schema
from outbox_adapters.postgres.webhooks import DELIVERY_LANE

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

HTTP_ATTEMPT, MARK = 0.6, 0.4
TTL = 2 * (HTTP_ATTEMPT + MARK)
POLL = 0.25
BATCH = 10
#: Each reply held this long: ~0.25 s a delivery, ~2.5 s a batch.
HOLD = 0.2
#: Beyond TTL + one election interval: the successor's claim and first POST on a loaded machine.
SLACK = 1.5
SLOTS = ("A", "B", "C")
START_TIMEOUT = 60.0


@attrs.define
class Scene:
    dsn: str
    receiver: HttpReceiver
    env: dict[str, str]
    proxies: ProxyLoop = attrs.Factory(ProxyLoop)
    slots: dict[str, FaultProxy] = attrs.Factory(dict)
    holders: dict[str, WorkerProcess] = attrs.Factory(dict)
    slot_of: dict[str, str] = attrs.Factory(dict)
    every: list[WorkerProcess] = attrs.Factory(list)
    deliveries: dict[int, str] = attrs.Factory(dict)  # delivery id -> webhook-id

    def open(self) -> None:
        params = conninfo_to_dict(self.dsn)
        host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)
        self.slots = {slot: self.proxies.proxy(host, port) for slot in SLOTS}

    def start(self, slot: str) -> WorkerProcess:
        dsn = make_conninfo(self.dsn, host="127.0.0.1", port=self.slots[slot].port)
        argv = [
            "--dsn", dsn, "--name", slot, "--leader-ttl", str(TTL),
            "--http-attempt", str(HTTP_ATTEMPT), "--mark", str(MARK), "--batch", str(BATCH),
            "--poll", str(POLL),
        ]  # fmt: skip
        process = start_webhook_proc(argv, name=slot, env=self.env)
        self.every.append(process)
        ready = process.wait_event("ready", timeout=START_TIMEOUT)
        self.holders[ready["holder"]] = process
        self.slot_of[ready["holder"]] = slot
        return process

    def close(self) -> None:
        for process in self.every:
            process.close()
        self.proxies.close()

    def feed(self, *, at_least: int) -> None:
        """Top the deliveries lane up to ``at_least`` pending deliveries (+ 20)."""
        pending = self.count("status = 'pending'")
        missing = at_least + 20 - pending
        if missing > 0:
            url = None if self.deliveries else self.receiver.url()
            self.deliveries.update(asyncio.run(feed(self.dsn, url, missing)))

    def count(self, where: str) -> int:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            found = conn.execute(
                f"SELECT count(*) FROM outbox_webhook_delivery WHERE {where}"  # noqa: S608 - ours
            ).fetchone()
        return int(found[0]) if found else 0

    def lease_holder(self) -> str | None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            found = conn.execute(
                "SELECT holder FROM outbox_leader WHERE lane = %s AND expires_at > now()",
                (DELIVERY_LANE,),
            ).fetchone()
        return str(found[0]) if found else None

    def sends(self, holder: str, *, since: float) -> list[float]:
        return [e["start"] for e in self.holders[holder].find("send") if e["start"] > since]

    def wait_for_sending_leader(self, *, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        since = time.monotonic()
        while time.monotonic() < deadline:
            holder = self.lease_holder()
            alive = holder in self.holders and self.holders[holder].alive
            if alive and self.sends(str(holder), since=since):
                return str(holder)
            time.sleep(0.05)
        raise AssertionError(
            f"no worker POSTing within {timeout}s; holder {self.lease_holder()}\n"
            + "\n".join(
                f"{h} alive={p.alive} sends={len(p.find('send'))}"
                f" terms={p.find('term')[-3:]}\n{p.stderr_tail(6)}"
                for h, p in self.holders.items()
            )
        )

    def wait_for_successor(self, fault: Fault, *, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for holder in self.holders:
                if holder != fault.victim and len(self.sends(holder, since=fault.at)) >= 3:
                    fault.successor = holder
                    return holder
            time.sleep(0.05)
        raise AssertionError(
            f"{fault.kind} of {fault.victim}: no successor POSTing within {timeout}s\n"
            + "\n".join(f"{h}: {p.stderr_tail(8)}" for h, p in self.holders.items())
        )

    def drain(self, *, timeout: float) -> None:
        """Wait for what is left (a killed worker's batch waits out its claim lease)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.count("status <> 'dispatched'"):
            time.sleep(0.2)


def pause(scene: Scene, leader: str) -> Fault:
    process = scene.holders[leader]
    at = time.monotonic()
    process.pause()
    process.wait_stopped(timeout=10)
    fault = Fault("pause", leader, at)
    scene.wait_for_successor(fault, timeout=TTL + POLL + 20)
    time.sleep(max(0.0, at + TTL + 0.5 - time.monotonic()))
    process.resume()  # woken while the successor POSTs
    fault.healed_at = time.monotonic()
    return fault


def partition(scene: Scene, leader: str) -> Fault:
    proxy = scene.slots[scene.slot_of[leader]]
    at = time.monotonic()
    scene.proxies.call(proxy.stall)
    fault = Fault("partition", leader, at)
    try:
        scene.wait_for_successor(fault, timeout=TTL + POLL + 20)
    finally:
        scene.proxies.call(proxy.pass_through)
        fault.healed_at = time.monotonic()
    return fault


def kill(scene: Scene, leader: str) -> Fault:
    at = time.monotonic()
    scene.holders[leader].kill()
    fault = Fault("kill", leader, at)
    scene.wait_for_successor(fault, timeout=TTL + POLL + 20)
    scene.start(scene.slot_of[leader])
    return fault


FAULTS: tuple[Callable[[Scene, str], Fault], ...] = (pause, partition, kill)


@pytest.fixture
def scene(request: pytest.FixtureRequest, f6_dsn: str) -> Iterator[Scene]:
    mutant = request.config.getoption("--mutant", default=None) or os.environ.get(MUTANT_ENV)
    with (
        scratch_database(f6_dsn, "f6_webhook") as dsn,
        HttpReceiver(hold=HOLD) as receiver,
    ):
        schema.apply(dsn)
        built = Scene(dsn, receiver, {MUTANT_ENV: mutant} if mutant else {})
        built.open()
        try:
            yield built
        finally:
            built.close()


def test_f6_webhook_retries_leader_loss_one_poster_at_a_time_nothing_lost(
    scene: Scene, chaos_full: bool, report: Callable[[str], None]
) -> None:
    started = time.monotonic()
    scene.feed(at_least=3 * BATCH)
    for slot in SLOTS:
        scene.start(slot)
    faults: list[Fault] = []
    for _round in range(3 if chaos_full else 1):
        for inject in FAULTS:
            scene.feed(at_least=3 * BATCH)
            leader = scene.wait_for_sending_leader(timeout=TTL + 20)
            faults.append(inject(scene, leader))
    scene.drain(timeout=60)
    for process in scene.every:
        if process.alive:
            process.terminate(timeout=30)

    # An act is a POST STARTED (the worker's own monotonic stamp, one clock for every process on
    # this machine), as F6 of the e-mail lane counts a MAIL and the relay's a publish.
    acts = [
        (holder, event["start"])
        for holder, process in scene.holders.items()
        for event in process.find("send")
    ]
    overlapping = stale_acts(term_wins(scene.holders), acts)
    unforced = unforced_losses(scene.holders, faults)
    requests = scene.receiver.snapshot()
    received = Counter(r.headers.get("webhook-id") for r in requests)
    unstamped = [r for r in requests if r.headers.get(HOLDER_HEADER) not in scene.holders]
    undispatched = scene.count("status <> 'dispatched'")
    lost = [d for d, msg in scene.deliveries.items() if not received[msg]]
    duplicates = sum(received[msg] - 1 for msg in scene.deliveries.values() if received[msg])
    for fault in faults:
        firsts = [t for h, t in acts if h == fault.successor and t > fault.at]
        fault.handover = min(firsts) - fault.at if firsts else None
    handovers, by_kind = handover_figures(faults)
    bound = TTL + POLL + SLACK
    report(
        f"F6 webhook retries handovers={len(handovers)} overlaps={len(overlapping)}"
        f" unforced_losses={len(unforced)} lost={len(lost)} duplicates={duplicates}"
        f" max_handover={max(handovers):.2f}s (bound ttl {TTL:.1f}s + election {POLL:.2f}s"
        f" + {SLACK:.1f}s = {bound:.2f}s; worst by fault: {by_kind})"
        f" deliveries={len(scene.deliveries)} posts={len(requests)} undispatched={undispatched}"
        f" took={time.monotonic() - started:.0f}s"
    )
    assert not overlapping, overlapping[:5]
    assert not unforced, unforced[:5]
    assert not lost, lost[:5]
    assert undispatched == 0
    assert not unstamped, unstamped[:3]
    assert len(handovers) == len(faults)
    late = [f for f in faults if (f.handover or 0) > bound]
    assert not late, late
