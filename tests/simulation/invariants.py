"""The invariants checked when a run ends (the writes are checked as they happen: ports.SimStore).

=============================  ===================================================================
invariant                      how it is checked
=============================  ===================================================================
no row lost                    every message has exactly one row; each row is terminal, or pending
                               with a due time
duplicate bound                a row reached the peer at most 1 + (the crashes, freezes, outages,
                               lost answers and ambiguous sends that touched one of its claims)
                               times; ``dispatched`` only if it reached the peer at least once
no stale mark applied          SimStore: the fence never admits a write under a token the row does
                               not carry
terminal states absorb         SimStore: a mark never moves a dispatched, skipped or failed row
attempts never decrease        SimStore: a mark never changes them, a release refunds exactly one
no secret in a sent row        SimStore at each mark, and here over every dispatched/skipped row
one leader acting              at every delivery on a gated lane, the sender holds the live lease
leadership kept                a worker no fault touched never gives a batch back for leadership
=============================  ===================================================================
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from tests.simulation.world import BACKOFF

from outbox_core.delivery import SCRUBBED_ON_MARK, Status
from outbox_core.scrub import DEFAULT_SECRET_KEYS

if TYPE_CHECKING:
    from tests.simulation.world import World

    from outbox_adapters.memory.rows import Row

__all__ = ["check_end"]


def check_end(world: World) -> None:
    rows = world.store.all_rows()
    world.result.rows = len(rows)
    # One row per idempotency key; the webhook deliveries have none (one per (event, endpoint),
    # which the webhook world checks from its repository).
    keys = {row.idempotency_key for row in rows} if world.keyed_rows else set(range(len(rows)))
    if len(rows) != world.messages or len(keys) != len(rows):
        world.violation(f"{world.messages} messages enqueued: {len(rows)} rows, {len(keys)} keys")
    for row in rows:
        _check_row(world, row)
    if world.gated:
        for node in (*world.slots, *world.retired):
            lost = 0 if node.worker is None else node.worker.stats.leadership_lost
            if lost and not node.disturbed:
                world.violation(f"{node.name} gave {lost} batch(es) back for leadership, unharmed")


def _check_row(world: World, row: Row) -> None:
    result = world.result
    if row.status is Status.PENDING:
        result.unfinished += 1
        # Not lost: it comes back by the end of a lease or of the longest retry wait.
        back_by = world.db_clock.now() + timedelta(seconds=world.lease) + 2 * BACKOFF.cap
        if row.next_attempt_at > back_by:
            world.violation(f"row {row.id} is pending, due only at {row.next_attempt_at}: lost")
    sent = world.deliveries[row.id]
    excuses = world.excuses.get(row.id, [])
    result.deliveries += sent
    result.duplicates += max(0, sent - 1)
    if sent > 1 + len(excuses):
        why = "; ".join(excuses) or "nothing"
        world.violation(
            f"row {row.id} reached the peer {sent} times, allowed {1 + len(excuses)} ({why})"
        )
    if row.status is Status.DISPATCHED and sent == 0:
        world.violation(f"row {row.id} is dispatched but never reached the peer")
    if row.status in SCRUBBED_ON_MARK:
        held = sorted(key for key in DEFAULT_SECRET_KEYS if f'"{key}"' in row.payload)
        if held:
            world.violation(f"row {row.id} is {row.status} and holds {', '.join(held)}")
