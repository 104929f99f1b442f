"""One simulated run: workers of a lane on the shared fakes, a producer, the planned faults.

:func:`tests.simulation.run.simulate` builds a :class:`World` from a
:class:`~tests.simulation.plan.Plan`, runs it on a fresh
:class:`~tests.simulation.vloop.VirtualLoop` and returns its :class:`Result`: the figures,
the trace hash and every invariant it broke (``violations``; :mod:`tests.simulation.invariants`
checks the end state, :mod:`tests.simulation.ports` the writes as they happen).

The world (drawn from the seed): 2 to 4 worker slots of one lane, each running the REAL
``runtime.Worker`` with the REAL ``EmailHandler``; strict, N rows in flight, or grouped marks;
leader-gated or not; 8 to 24 e-mails enqueued over the first minute (some twice, under one
idempotency key), each carrying a secret link the sent row must lose. The peer answers after a
latency with a heavy tail, now and then 4xx or 5xx. A crashed or cancelled slot is restarted as a
new worker (a new holder, nothing remembered) a little later.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any, Final

import attrs
from tests.simulation.plan import Fault, Kind, Plan
from tests.simulation.ports import FaultyLeader, FaultyMailer, FaultyStore, SimLeader, SimStore
from tests.simulation.vloop import VirtualClock, VirtualLoop

from outbox_adapters.lanes.email import EmailHandler, email_lane, email_message
from outbox_adapters.memory import RecordingMailer
from outbox_adapters.runtime import LaneConfig, Worker
from outbox_core.backoff import ExponentialBackoff
from outbox_core.delivery import TERMINAL, Status
from outbox_core.messages import ClaimedRow, RowId
from outbox_core.ports import ClaimRequest
from outbox_core.timing import EmailTiming

__all__ = ["Result", "World"]

#: Short budgets (per row 12 s, lease 5 x 12 + 10 = 70 s): virtual time is free, loop turns are not.
STEPS: Final = {"suppression": 1, "branding": 1, "dial": 2, "smtp_exchange": 5, "bounce_report": 1,
                "mark": 2, "lease_grace": 10}  # fmt: skip
BACKOFF: Final = ExponentialBackoff(
    max_attempts=4, base=timedelta(seconds=2), cap=timedelta(seconds=30)
)
#: A run stops when every row is terminal, or at this virtual second.
HORIZON: Final = 1800.0
#: How slow a SLOW fault makes a call, at amount 1, per kind of call.
_SLOW: Final = {"send": 20.0, "lead": 30.0, "step_down": 30.0}
_SLOW_STORE: Final = 4.0


@attrs.define
class Effects:
    """What the faults fired at one step do to that very call."""

    slow: float = 0.0
    lost_ack: bool = False


@attrs.define
class Result:
    plan: Plan
    steps: int = 0
    crashes: int = 0
    cancels: int = 0
    pauses: int = 0
    outages: int = 0
    deliveries: int = 0
    duplicates: int = 0
    rows: int = 0
    unfinished: int = 0
    simulated_seconds: float = 0.0
    shape: str = ""
    violations: list[str] = attrs.Factory(list)
    trace_hash: str = ""


class Node:
    """One worker process: its clock, its claim tokens, whether it lives, when it thaws."""

    def __init__(self, world: World, slot: int, generation: int) -> None:
        self.slot = slot
        self.name = f"w{slot}.{generation}"
        self.alive = True
        self.frozen_until = -math.inf
        self.clock = VirtualClock(world.loop.time)
        self.tokens: set[str] = set()
        #: When this node's latest claim ran (a stale writer's pause is measured from it).
        self.claimed_at = -math.inf
        self.disturbed = False
        self.worker: Worker | None = None
        #: What else stops with the worker (a consumer channel's consumer).
        self.stoppers: list[Callable[[], None]] = []
        self.task: asyncio.Task[object] | None = None

    def request_stop(self) -> None:
        if self.worker is not None:
            self.worker.request_stop()
        for stop in self.stoppers:
            stop()

    @property
    def running(self) -> bool:
        return self.alive and self.task is not None and not self.task.done()

    async def gate(self) -> bool:
        """Let a port call through: never for a dead process, at the thaw for a frozen one.

        A frozen process (SIGSTOP) was about to write its request: on SIGCONT the write goes out
        before the timers that expired meanwhile are noticed. So a cancellation that arrives
        during the freeze is held back; ``True`` tells the caller to make the call, then raise it.
        """
        if not self.alive:
            raise asyncio.CancelledError
        loop = asyncio.get_running_loop()
        held = False
        while loop.time() < self.frozen_until:
            try:
                await asyncio.sleep(self.frozen_until - loop.time())
            except asyncio.CancelledError:
                held = True
            if not self.alive:
                raise asyncio.CancelledError
        return held


class World:
    """The shared fakes, the worker slots, the plan's faults, and what was seen."""

    #: Every row of ``store`` carries an idempotency key of its own (checked at the end).
    keyed_rows = True

    def __init__(self, plan: Plan, loop: VirtualLoop) -> None:
        self.plan = plan
        self.loop = loop
        self.rng = random.Random(plan.seed)  # noqa: S311 - a seeded simulation
        self.result = Result(plan)
        self._hash = hashlib.blake2b(digest_size=16)
        self.db_clock = VirtualClock(loop.time)
        self.store = SimStore(self)
        self.leader = SimLeader(clock=self.db_clock)
        self.peer = RecordingMailer()
        self._faults: dict[int, list[Fault]] = {}
        for fault in plan.faults:
            self._faults.setdefault(fault.step, []).append(fault)
        self._send_faults: list[Kind] = []
        self.outage_until = -math.inf
        self.deliveries: Counter[int] = Counter()
        self.excuses: dict[int, list[str]] = {}
        self.slots: list[Node] = []
        self.retired: list[Node] = []
        self.closing = False
        self._draw_shape()

    # --- the world's shape, from the seed ------------------------------------------------------------

    def _draw_shape(self) -> None:
        rng = self.rng
        self.slot_count = rng.randint(2, 4)
        batch = rng.choice((1, 3, 5))
        in_flight = rng.randint(1, batch)
        grouped = in_flight > 1 and rng.random() < 0.5
        self.gated = rng.random() < 0.5
        # The batch timeout halfway between the batch's work and its lease, as the chaos tests
        # have it: at exactly batch x per-row, a one-row batch's row could never start (the
        # claim's round trip has used some of it), and the worker would claim and release it in
        # a loop (see docs/testing.md, "Simulation", findings).
        work = batch * (sum(STEPS.values()) - STEPS["lease_grace"])
        self.timing = EmailTiming.with_overrides(
            STEPS, batch_size=batch, batch_timeout=work + STEPS["lease_grace"] / 2
        )
        self.config: LaneConfig = email_lane(
            timing=self.timing, backoff=BACKOFF, poll_interval=10.0,
            rows_in_flight=in_flight, group_marks=grouped,
        )  # fmt: skip
        self.lease = self.timing.claim_lease().total_seconds()
        self.messages = rng.randint(8, 24)
        mode = "grouped" if grouped else ("strict" if in_flight == 1 else "in-flight")
        self.result.shape = (
            f"slots={self.slot_count} batch={batch} rows_in_flight={in_flight} {mode}"
            f" gated={'yes' if self.gated else 'no'} messages={self.messages}"
        )

    # --- what the ports ask --------------------------------------------------------------------------

    def step(self, node: Node, op: str) -> Effects:
        self.result.steps += 1
        step = self.result.steps
        self.trace(op, node.name)
        effects = Effects()
        for fault in self._faults.get(step, ()):
            self._fire(fault, node, op, effects)
        return effects

    def latency(self, op: str) -> float:
        if op != "send":
            return self.rng.uniform(0.0005, 0.005)
        if self.rng.random() < 0.8:
            return self.rng.uniform(0.02, 0.5)
        return self.rng.uniform(1.0, 8.0)

    def outage(self) -> bool:
        return self.loop.time() < self.outage_until

    def send_answer(self) -> Kind | None:
        if self._send_faults:
            return self._send_faults.pop(0)
        draw = self.rng.random()
        return Kind.SEND_4XX if draw < 0.04 else Kind.SEND_5XX if draw < 0.06 else None

    def coin(self) -> bool:
        return self.rng.random() < 0.5

    def excuse(self, rows: Sequence[RowId], why: str) -> None:
        for row in rows:
            self.excuses.setdefault(int(row), []).append(why)

    def claimed(self, node: Node, request: ClaimRequest, rows: Sequence[ClaimedRow]) -> None:
        node.tokens.add(request.token.value)
        node.claimed_at = self.loop.time()
        self.trace("claimed", node.name, *(row.id for row in rows))

    def delivered(self, node: Node, row: int, *, ambiguous: bool) -> None:
        self.deliveries[row] += 1
        self.trace("delivered", node.name, row)
        if ambiguous:
            self.excuse([row], "the peer got it, the worker could not know")
        if self.gated and not self.leader.holds(self.config.lane, node.name):
            self.violation(f"{node.name} delivered row {row} while not leading {self.config.lane}")

    def violation(self, what: str) -> None:
        self.result.violations.append(f"t={self.loop.time():.3f}s step {self.result.steps}: {what}")

    def trace(self, *parts: object) -> None:
        self._hash.update(f"{self.loop.time():.6f}|{parts}".encode())

    # --- faults ----------------------------------------------------------------------------------------

    def _fire(self, fault: Fault, caller: Node, op: str, effects: Effects) -> None:  # noqa: C901 - one arm per kind
        self.trace("fault", fault.describe())
        kind, amount = fault.kind, fault.amount
        # Half the node numbers hit the worker making this call (at this very await point), the
        # other half a slot, whatever it is doing.
        target = caller if fault.node < 4 else self.slots[fault.node % len(self.slots)]
        now = self.loop.time()
        if kind is Kind.CRASH and target.running:
            self.result.crashes += 1
            target.alive = False
            self._excuse_claims(target, "crash")
            assert target.task is not None
            target.task.cancel()
            self._restart(target, 1 + 60 * amount)
        elif kind is Kind.CANCEL and target.running:
            self.result.cancels += 1
            assert target.task is not None
            target.task.cancel()
            self._restart(target, 1 + 60 * amount)
        elif kind is Kind.PAUSE and target.running:
            self.result.pauses += 1
            # A short freeze, or the stale writer's: thawing 1 to 16 s after its last claim's lease
            # ran out, when a sibling may hold its rows.
            length = (
                0.5 + 20 * amount
                if amount < 0.5
                else max(0.0, target.claimed_at + self.lease - now) + 1 + 30 * (amount - 0.5)
            )
            target.frozen_until = max(target.frozen_until, now + length)
            target.disturbed = True
            self._excuse_claims(target, f"paused {length:.1f}s")
        elif kind is Kind.OUTAGE:
            self.result.outages += 1
            self.outage_until = max(self.outage_until, now + 1 + 40 * amount)
            for node in self.slots:
                node.disturbed = True
        elif kind is Kind.LOST_ACK:
            effects.lost_ack = True
            caller.disturbed = True
        elif kind is Kind.SLOW:
            effects.slow = amount * _SLOW.get(op, _SLOW_STORE)
            caller.disturbed = True
        elif kind in (Kind.SEND_4XX, Kind.SEND_5XX, Kind.SEND_HANG, Kind.SEND_MAYBE):
            self._send_faults.append(kind)
        elif kind is Kind.CLOCK_JUMP:
            target.clock.offset += (amount - 0.5) * 2 * 86_400
        elif kind is Kind.REORDER:
            self.loop.reorder_until = max(self.loop.reorder_until, now + 5 + 120 * amount)

    def _excuse_claims(self, node: Node, why: str) -> None:
        """Rows this node holds now: a crash or a freeze may cost each one duplicate."""
        for row in self.store.all_rows():
            token = row.claim_token
            if row.status is Status.PENDING and token is not None and token.value in node.tokens:
                self.excuse([row.id], f"{why} of {node.name}")

    def _restart(self, node: Node, after: float) -> None:
        self.loop.call_later(after, self.start, node.slot)

    # --- the run ---------------------------------------------------------------------------------------

    def start(self, slot: int) -> None:
        """Start a new worker process in ``slot`` (the first, or after a crash or cancellation)."""
        node = self.new_node(slot)
        if node is None:
            return
        node.worker = self.email_worker(node, gated=self.gated)
        self.run_node(node, node.worker.run())

    # --- what every world's processes are made of ------------------------------------------------

    def new_node(self, slot: int) -> Node | None:
        """A new process for ``slot``, the one it replaces retired; ``None`` once closing."""
        if self.closing:
            return None
        generation = 0
        if slot < len(self.slots):
            old = self.slots[slot]
            self.retired.append(old)
            generation = int(old.name.split(".")[1]) + 1
        return Node(self, slot, generation)

    def email_worker(self, node: Node, *, gated: bool) -> Worker:
        """The e-mail lane's real worker and handler for ``node``, every port faulty."""
        handler = EmailHandler(
            FaultyMailer(self, node, self.peer), sender="noreply@example.org",
            clock=node.clock, steps=self.timing.budgets,
        )  # fmt: skip
        leader = FaultyLeader(self, node, self.leader) if gated else None
        return self.worker(node, FaultyStore(self, node, self.store), handler, self.config,
                           wakeup=self.store.wakeup(self.config.lane), leader=leader)  # fmt: skip

    def worker(
        self, node: Node, store: Any, handler: Any, config: LaneConfig, *,
        wakeup: Any, leader: Any = None,
    ) -> Worker:  # fmt: skip
        """A real ``Worker`` of ``node``: its clock, name, and the world's entropy and jitter."""
        return Worker(
            store, handler, config, clock=node.clock, leader=leader, holder=node.name,
            entropy=self.rng.randbytes, jitter=self.rng.random, wakeup=wakeup,
        )  # fmt: skip

    def run_node(self, node: Node, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` as ``node``'s process, in its slot."""
        node.task = self.loop.create_task(work)
        slot = node.slot
        if slot < len(self.slots):
            self.slots[slot] = node
        else:
            self.slots.append(node)

    async def _produce(self) -> None:
        arrivals = sorted(self.rng.uniform(0, 60) for _ in range(self.messages))
        for n, at in enumerate(arrivals):
            await asyncio.sleep(at - self.loop.time())
            message = email_message(
                to=f"user{n}@example.org", subject=f"m{n}", text="Reset: $password_reset_url",
                fields={"password_reset_url": f"https://example.org/reset/{n}"},
                idempotency_key=f"message-{n}",
            )  # fmt: skip
            self.store.enqueue(message)
            if self.rng.random() < 0.1:  # the producer's retry: the key makes it a no-op
                self.store.enqueue(message)

    def _finished(self, producer: asyncio.Task[None]) -> bool:
        if not producer.done() or self.outage():
            return False
        return all(row.status in TERMINAL for row in self.store.all_rows())

    async def main(self) -> None:
        for slot in range(self.slot_count):
            self.start(slot)
        producer = self.loop.create_task(self._produce())
        # Polled every 5 virtual seconds: the end is a property of the whole world, not an event.
        while not self._finished(producer) and self.loop.time() < HORIZON:  # noqa: ASYNC110
            await asyncio.sleep(5)
        self.closing = True
        for node in self.slots:
            if node.running:
                node.request_stop()
        running = [n.task for n in (*self.slots, *self.retired) if n.task and not n.task.done()]
        if running:
            await asyncio.wait(running, timeout=self.lease + 60)
