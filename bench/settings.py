"""How big each comparison is: ``--quick`` (a few minutes on a 2-core machine) or full."""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["FULL", "QUICK", "Sizes"]


@attrs.frozen
class Sizes:
    """The workload of every comparison, and the longest each may take before it is abandoned."""

    name: str
    #: No-op rows drained per dispatch run (library vs raw).
    dispatch_rows: int
    #: No-op jobs drained per peer run (pgqueuer vs the library).
    peer_rows: int
    #: Messages delivered per SMTP run.
    smtp_messages: int
    #: Webhook events delivered per webhook run (one endpoint: one delivery each).
    webhook_events: int
    #: Sent rows in the table for the claim-latency measurements.
    history_sizes: tuple[int, ...]
    #: Claims timed per history size and run (each takes 10 due rows).
    history_claims: int
    #: Rows pushed through claim + mark before the "after churn" claim latency.
    churn_rows: int
    #: Host transactions per enqueue run.
    enqueue_rows: int
    #: Messages sent one at a time for the enqueue → send latency.
    latency_messages: int
    #: Rows drained while RSS is sampled (0: skipped).
    memory_rows: int
    #: Events relayed per relay run (library and bare publisher loop).
    relay_events: int
    #: Events consumed into e-mails (two each) per consumer run.
    consumer_events: int
    #: Notifications inserted one at a time per feed push-latency series (bench/feed.py).
    feed_inserts: int
    #: Events of blocked keys the per-key claim reads past (bench/blocked_keys.py).
    blocked_rows: int
    #: Seconds one comparison may take before it is abandoned (the harness never hangs).
    comparison_timeout: float


QUICK: Final = Sizes(
    name="quick",
    dispatch_rows=5_000,
    peer_rows=5_000,
    smtp_messages=400,
    webhook_events=400,
    history_sizes=(0, 1_000_000),
    history_claims=200,
    churn_rows=200_000,
    enqueue_rows=1_000,
    latency_messages=40,
    memory_rows=100_000,
    relay_events=2_000,
    consumer_events=200,
    feed_inserts=30,
    blocked_rows=50_000,
    comparison_timeout=240.0,
)

FULL: Final = Sizes(
    name="full",
    dispatch_rows=20_000,
    peer_rows=20_000,
    # Enough that the sessions' set-up is amortised: at 400 a run lasted under a second and its
    # ratio moved by a fifth from run to run.
    smtp_messages=2_000,
    webhook_events=2_000,
    history_sizes=(0, 1_000_000, 5_000_000),
    history_claims=200,
    churn_rows=1_000_000,
    enqueue_rows=10_000,
    latency_messages=200,
    memory_rows=1_000_000,
    relay_events=10_000,
    consumer_events=1_000,
    feed_inserts=100,
    blocked_rows=200_000,
    comparison_timeout=3_600.0,
)
