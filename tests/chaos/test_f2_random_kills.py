"""F2 — random SIGKILLs under load (RELIABILITY.md): two real workers, many rows, kills at random.

Two worker subprocesses drain one lane while the test SIGKILLs one of them at random moments of
the drain (a seeded RNG: the seed is printed, and ``OUTBOX_CHAOS_SEED`` replays the schedule —
which worker dies after how many resolved rows; the exact instants depend on the machine); each
killed worker is replaced at once by a spare that was started beforehand and held on standby. The
SMTP server takes a few milliseconds to acknowledge each DATA (after it has the message), so a kill
often lands inside a delivery. When every row is resolved the test counts, from what the real SMTP
server accepted and what the database holds:

- rows lost (not dispatched, or never received): 0;
- duplicates (copies beyond the first, per Message-ID) ≤ kills x rows_in_flight:
  ``outbox_core.lease.max_duplicates``. Three modes: strict (one row at a time), four rows in
  flight each marked by its own statement, and four rows in flight whose marks are grouped into
  one statement per window (``--group-marks``): the bound is the rows in flight in every mode.

Mechanisms that turn it red if removed: the claim lease (killed rows come back: without it they
are lost); ``FOR UPDATE SKIP LOCKED`` with the lease stamp (two live workers never both take a
row: without them duplicates appear with no kill to explain them); the per-row detached mark (a
kill can then only duplicate the one row in flight).

Short mode: 100 rows, 5 kills. ``OUTBOX_CHAOS=full``: 400 rows, 30 kills.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import time
from collections import Counter

import pytest

from outbox_core.lease import max_duplicates

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

TICK = 0.25
#: How long the server takes to acknowledge a message it already has.
DATA_DELAY = 0.03
#: After the drain reaches a kill's row count, the kill waits up to this long (seconds).
JITTER = 0.05
#: How long a worker process may take to start up (imports, pool) on a loaded machine.
START_TIMEOUT = 60.0


def _in_flight(worker) -> set[int]:
    """Rows the worker had claimed and not yet marked when it died (from its event lines)."""
    claimed = {row for event in worker.find("claimed") for row in event["rows"]}
    marked = {event["row"] for event in worker.find("mark")}
    return claimed - marked


@pytest.mark.parametrize(
    ("rows_in_flight", "group_marks"),
    [(1, False), (4, False), (4, True)],
    ids=["strict", "in_flight_4", "grouped_4"],
)
def test_f2_random_kills_lose_nothing_and_duplicate_at_most_once_per_kill(  # noqa: PLR0917 - fixtures
    chaos_full, chaos_db, chaos_sink, spawn_worker, new_lane, report, rows_in_flight, group_marks
):
    seed = int(os.environ.get("OUTBOX_CHAOS_SEED") or secrets.randbits(32))
    rng = random.Random(seed)  # noqa: S311 - a replayable kill schedule, not a secret
    rows_wanted, kills_wanted = (400, 30) if chaos_full else (100, 5)
    lane = new_lane("f2")
    ids = chaos_db.enqueue(lane, rows_wanted)
    chaos_sink.set_delay(DATA_DELAY)
    generation = 0

    def spare(slot: int):
        nonlocal generation
        generation += 1
        return spawn_worker(
            lane,
            name=f"W{slot}.{generation}",
            standby=True,
            poll_interval=TICK,
            batch_size=rows_in_flight,
            rows_in_flight=rows_in_flight,
            group_marks=group_marks,
        )

    live = [spare(0), spare(1)]
    spares = [spare(0), spare(1)]
    for worker in live:
        worker.wait_event("ready", timeout=START_TIMEOUT)
    lease = live[0].options.lease
    for worker in live:
        worker.go()

    # The kills land at random points of the drain — after a random number of rows is resolved,
    # plus a random few milliseconds — so every kill happens under load however fast the machine.
    thresholds = sorted(rng.sample(range(len(ids) // 20, len(ids) * 9 // 10), kills_wanted))
    kills = 0
    killed = []
    started = time.monotonic()
    for threshold in thresholds:
        chaos_db.wait_progress(lane, threshold, timeout=lease + 60)
        time.sleep(rng.uniform(0, JITTER))
        slot = rng.randrange(2)
        victim = live[slot]
        # A kill lands on a working process: a spare released by the previous kill may still be
        # starting up (two close thresholds, a slow machine), and killing it then hits nothing.
        victim.wait_event("go", timeout=START_TIMEOUT)
        victim.kill()
        kills += 1
        killed.append(victim)
        # The standby sibling takes over at once; a new spare starts up behind it.
        live[slot] = spares[slot]
        live[slot].go()
        spares[slot] = spare(slot)
    kill_span = time.monotonic() - started

    rows = chaos_db.wait_resolved(lane, timeout=lease + 90)
    copies = chaos_sink.copies(lane)
    lost = sum(1 for i in ids if rows[i]["status"] != "dispatched" or copies[i] == 0)
    duplicates = sum(max(0, copies[i] - 1) for i in ids)
    # Each duplicate must be explained by a kill: one extra copy per killed worker that held the
    # row claimed and unmarked when it died.
    held = Counter(row for worker in killed for row in _in_flight(worker))
    unexplained = {i: copies[i] for i in ids if copies[i] - 1 > held[i]}
    bound = max_duplicates(crashes=kills, rows_in_flight=rows_in_flight)
    report(
        f"F2 rows_in_flight={rows_in_flight} group_marks={group_marks}"
        f" kills={kills} lost={lost} duplicates={duplicates} (bound {bound})"
        f" rows={len(ids)} workers=2 seed={seed} kills_over={kill_span:.1f}s"
    )

    assert all(w.popen.returncode == -signal.SIGKILL for w in killed)
    for worker in live:
        # Started up (signal handler installed) before its graceful stop is asked for.
        worker.wait_event("go", timeout=START_TIMEOUT)
        assert worker.terminate() == 0, worker.stderr_tail()
    assert set(rows) == set(ids)
    assert lost == 0, f"seed {seed}: {lost} rows lost"
    assert duplicates <= bound, f"seed {seed}: {duplicates} duplicates for {kills} kills"
    assert not unexplained, f"seed {seed}: duplicated rows no killed worker held: {unexplained}"
    assert chaos_sink.plaintext_commands() == 0
