"""F5 — the stale writer (RELIABILITY.md, DESIGN C10): a worker paused past its lease comes back.

The scenario, with two real worker subprocesses, a real SMTP server and PostgreSQL:

1. Worker A claims the row (token tA) and sends it. Right after the message bytes went out, A is
   frozen (``OUTBOX_FAILPOINT=after_data_before_reply:1:stop``, i.e. SIGSTOP): the server has A's
   copy, A has not read the reply. A stays frozen past its lease.
2. Worker B (a standby sibling, released now) re-claims the expired row (token tB) and delivers it
   (the server's second copy: the one duplicate). B is frozen after the 250, before its mark
   (``after_reply_before_mark:1:stop``), so the row is still ``pending`` — under tB.
3. A is resumed. Its row deadline passed long ago, so its send ends in a timeout ("may have been
   delivered"), and as the lane allows one attempt, ``decide`` makes that a FAILED mark. A presents
   tA: the row is pending under tB, so the fence drops the mark (stale).
4. B is resumed and marks the row dispatched under tB.

Figures: pauses, duplicates at the server, stale marks applied (A's late mark, as A's store
reported it), delivered rows shown failed (rows the server received whose status is failed).

Mechanism that turns it red if removed: the claim-token fence on marks (``AND claim_token =
:token`` in ``statements.MARK``). The status guard alone admits A's mark in step 3 — the row IS
pending — so the delivered row becomes ``failed``, and then B's success is the one dropped (the row
is no longer pending). Checked by hand with the matrix's mutant, applied inside the workers::

    OUTBOX_TEST_MUTANT=mark-no-token-fence pytest tests/chaos/test_f5_stale_writer.py
"""

from __future__ import annotations

import time

import pytest
from tests.faults.failpoints import Action, FailPoint

from outbox_core.lease import KillPoint

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

TICK = 0.25
START_TIMEOUT = 60.0
#: B's claim lease. B is frozen holding the row (step 2) until the test resumes it (step 4), and
#: nothing may claim the row meanwhile: A, resumed in step 3, would send a third copy. With B's
#: lease the default 4.4 s, how long that took was a bet on the machine's speed; this outlasts
#: every wait of the test. (A's lease stays short: B must claim after it.)
B_LEASE = 120.0


def test_f5_a_paused_worker_s_late_failure_never_overwrites_a_sibling_s_delivery(
    chaos_db, chaos_sink, spawn_worker, new_lane, report
):
    lane = new_lane("f5")
    [row] = chaos_db.enqueue(lane, 1)
    # One attempt per row on this lane: A's late timeout is then a FAILED mark, not a retry — the
    # mark that, unfenced, would wipe out B's delivery.
    common = {"poll_interval": TICK, "max_attempts": 1}
    b = spawn_worker(
        lane,
        name="B",
        standby=True,
        failpoint=FailPoint(KillPoint.AFTER_REPLY_BEFORE_MARK, 1, Action.STOP),
        lease_seconds=B_LEASE,
        **common,
    )
    b.wait_event("ready", timeout=START_TIMEOUT)
    a = spawn_worker(
        lane,
        name="A",
        failpoint=FailPoint(KillPoint.AFTER_DATA_BEFORE_REPLY, 1, Action.STOP),
        **common,
    )
    lease = a.options.lease

    # 1. A is frozen with its copy at the server.
    a_paused = a.wait_event("failpoint", timeout=START_TIMEOUT, row=row)
    a.wait_stopped(timeout=10)
    a_claim = a.wait_event("claimed", timeout=1)
    chaos_sink.wait_copies(lane, row, 1, timeout=10)

    # 2. B re-claims once A's lease is over, delivers, and is frozen before its mark.
    b.go()
    b.wait_event("failpoint", timeout=lease + 30, row=row)
    b.wait_stopped(timeout=10)
    b_claim = b.wait_event("claimed", timeout=1)
    assert b_claim["t"] >= a_claim["lease_expires_at"], "B claimed inside A's lease"
    chaos_sink.wait_copies(lane, row, 2, timeout=10)
    assert time.time() > a_claim["lease_expires_at"], "A must stay paused past its lease"

    # 3. A wakes up and tries to record its (late) failure; then it is stopped for good. (B's
    #    lease outlasts B's pause, so A finds nothing to claim meanwhile.)
    a.resume()
    paused_for = time.time() - a_paused["t"]
    a_mark = a.wait_event("mark", timeout=30, row=row)
    assert a.terminate() == 0, a.stderr_tail()
    # 4. B records its delivery.
    b.resume()
    b_mark = b.wait_event("mark", timeout=30, row=row)

    final = chaos_db.rows(lane)[row]
    copies = chaos_sink.copies(lane)[row]
    stale_applied = int(a_mark["result"] == "applied")
    shown_failed = int(copies >= 1 and final["status"] == "failed")
    report(
        f"F5 pauses=1 duplicates={copies - 1} stale_marks_applied={stale_applied}"
        f" delivered_rows_shown_failed={shown_failed}"
        f" (A paused {paused_for:.1f}s, lease {lease:.2f}s; A's late mark: {a_mark['status']}"
        f" → {a_mark['result']})"
    )

    # The premise: A's late mark is a failure (so the fence, not the status guard, must stop it).
    assert a_mark["status"] == "failed", a_mark
    assert stale_applied == 0, f"A's stale {a_mark['status']} mark was applied"
    assert shown_failed == 0, f"the delivered row is shown {final['status']}: {final}"
    assert copies == 2, f"{copies} copies at the server; exactly one duplicate expected"
    assert b_mark["result"] == "applied"
    assert final["status"] == "dispatched"
    assert final["attempts"] == 2
    assert final["last_error"] is None
    assert b.terminate() == 0, b.stderr_tail()
