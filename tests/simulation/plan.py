"""A fault plan: the seed of a run and the faults it injects, each at one port call.

A run is a pure function of its :class:`Plan`. The seed draws the world (how many workers, which
lane mode, how many messages and when they arrive, the peers' latencies and ordinary answers); the
faults are explicit, each fired at the N-th port call of the run (a claim, a mark, a send, a leader
call: the simulator's steps). :func:`plan_from_seed` draws both from one seed, so a seed replays a
run; Hypothesis draws the fault list itself (:func:`faults_strategy`) and shrinks it to the fewest,
earliest, smallest faults that still break an invariant.
"""

from __future__ import annotations

import enum
import json
import random
from typing import Final

import attrs
from hypothesis import strategies as st

__all__ = ["Fault", "Kind", "Plan", "faults_strategy", "plan_from_seed"]


class Kind(enum.StrEnum):
    #: The worker process dies: its tasks are cancelled, its memory lost; restarted later.
    CRASH = "crash"
    #: The host application cancels the worker's task (the process lives on); restarted later.
    CANCEL = "cancel"
    #: The worker is frozen (SIGSTOP): none of its port calls gets through until it thaws.
    PAUSE = "pause"
    #: The database is unreachable for a while: store and leader calls raise StoreUnavailable.
    OUTAGE = "outage"
    #: This store write commits, but its answer is lost (the caller sees StoreUnavailable).
    LOST_ACK = "lost_ack"
    #: This port call is slow.
    SLOW = "slow"
    #: The next send is refused for now (SMTP 4xx): nothing delivered.
    SEND_4XX = "send_4xx"
    #: The next send is refused for good (SMTP 5xx): nothing delivered.
    SEND_5XX = "send_5xx"
    #: The next send hangs before the peer has the message, until the worker gives up on it.
    SEND_HANG = "send_hang"
    #: The next send reaches the peer, but the answer is lost (the connection drops after DATA).
    SEND_MAYBE = "send_maybe"
    #: The worker's wall clock is stepped (NTP, an operator); its monotonic clock is not.
    CLOCK_JUMP = "clock_jump"
    #: Wake-ups run in a shuffled order for a while.
    REORDER = "reorder"


KINDS: Final = tuple(Kind)
#: A run's faults fire within its first this many port calls (drawn uniformly).
STEP_SPAN: Final = 120
MAX_FAULTS: Final = 10


@attrs.frozen
class Fault:
    #: Fired at this port call of the run (1 = the first).
    step: int
    kind: Kind = attrs.field(converter=Kind)
    #: Which worker it hits, for the kinds that hit one: 0-3 the one making the call, 4-7 the
    #: worker in slot ``node % slots``.
    node: int = 0
    #: How hard, in [0, 1): each kind scales it (a pause's length, a jump's size, ...).
    amount: float = 0.0

    def describe(self) -> str:
        return f"{self.kind}@{self.step}(node {self.node}, {self.amount:.2f})"


@attrs.frozen
class Plan:
    seed: int
    faults: tuple[Fault, ...] = ()

    def to_json(self) -> str:
        rows = [[f.step, str(f.kind), f.node, round(f.amount, 6)] for f in self.faults]
        return json.dumps({"seed": self.seed, "faults": rows}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        data = json.loads(text)
        faults = tuple(Fault(int(s), Kind(k), int(n), float(a)) for s, k, n, a in data["faults"])
        return cls(int(data["seed"]), faults)


def plan_from_seed(seed: int) -> Plan:
    """The plan a seed stands for: up to :data:`MAX_FAULTS` faults in the first port calls."""
    rng = random.Random(f"faults-{seed}")  # noqa: S311 - a seeded simulation
    count = rng.randint(0, MAX_FAULTS)
    faults = sorted(
        (
            Fault(rng.randint(1, STEP_SPAN), rng.choice(KINDS), rng.randrange(8), rng.random())
            for _ in range(count)
        ),
        key=lambda f: f.step,
    )
    return Plan(seed, tuple(faults))


def faults_strategy() -> st.SearchStrategy[Plan]:
    """Plans for Hypothesis: it shrinks the fault list (fewer, earlier, milder) and the seed."""
    fault = st.builds(
        Fault,
        step=st.integers(1, STEP_SPAN),
        kind=st.sampled_from(KINDS),
        node=st.integers(0, 7),
        amount=st.floats(0.0, 0.999, allow_nan=False),
    )
    return st.builds(
        Plan,
        seed=st.integers(0, 2**32 - 1),
        faults=st.lists(fault, max_size=MAX_FAULTS).map(
            lambda fs: tuple(sorted(fs, key=lambda f: f.step))
        ),
    )
