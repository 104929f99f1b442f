"""F8 — hostile webhook receivers (RELIABILITY.md), the sender-level part: the real
``HttpxWebhookSender`` against real local receivers that hang, drip, flood, redirect, reset,
answer 410 or 429 with Retry-After.

Figures: every attempt ends within its absolute deadline + 10% (mechanism: the sender's
``asyncio.timeout`` around the whole attempt; httpx's own timeouts are per operation and are set
far beyond the budget here, so only the deadline can explain an attempt ending in time); no
redirect is followed (a canary listener behind the redirect counts 0 connections); 410 is
permanent with ``disable_endpoint``; 429 is transient with the Retry-After it asked for. The end
to end part (the 410 disabling the endpoint in the mark's transaction) is the webhook lane's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import attrs
import pytest
from tests.support.receivers import CanaryListener, HttpReceiver, Reply

from outbox_adapters.http import DestinationGuard, HttpTimeouts, HttpxWebhookSender
from outbox_core.outcomes import Outcome, OutcomeKind

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

BUDGET = timedelta(seconds=1)
#: Per-operation timeouts well past the budget: only the absolute deadline can cut an attempt.
LAX = HttpTimeouts(connect=30, read=30, write=30, pool=30)


@attrs.frozen
class Case:
    name: str
    reply: Callable[[CanaryListener], Reply]
    check: Callable[[Outcome], bool]


CASES = (
    Case(
        "hang",
        lambda _c: Reply.hang_after_connect(),
        lambda o: o.reason == "attempt deadline reached",
    ),
    Case(
        "hang-headers",
        lambda _c: Reply.hang_after_headers(),
        lambda o: o.reason == "attempt deadline reached",
    ),
    Case(
        "slow-drip",
        lambda _c: Reply.slow_drip(interval=0.5),
        lambda o: o.reason == "attempt deadline reached",
    ),
    Case(
        "huge-body",
        lambda _c: Reply.huge_body(),
        lambda o: o.kind is OutcomeKind.TRANSIENT and "too large" in o.reason,
    ),
    Case(
        "redirect",
        lambda canary: Reply.redirect(canary.url("/internal")),
        lambda o: o.kind is OutcomeKind.TRANSIENT and "redirect not followed" in o.reason,
    ),
    Case(
        "410",
        lambda _c: Reply.status(410),
        lambda o: o.kind is OutcomeKind.PERMANENT and o.disable_endpoint,
    ),
    Case(
        "429",
        lambda _c: Reply.rate_limited("120"),
        lambda o: o.kind is OutcomeKind.TRANSIENT and o.retry_after == timedelta(seconds=120),
    ),
    Case(
        "reset",
        lambda _c: Reply.reset(),
        lambda o: o.kind is OutcomeKind.TRANSIENT and o.reason == "connection reset",
    ),
)


async def test_f8_each_hostile_receiver_ends_within_its_deadline(
    report: Callable[[str], None], chaos_full: bool
):
    rounds = 3 if chaos_full else 1
    guard = DestinationGuard(allow=["127.0.0.1/32"], require_https=False)
    lines: list[str] = []
    overruns: list[float] = []
    wrong: list[str] = []
    with CanaryListener() as canary:
        async with HttpxWebhookSender(guard, timeouts=LAX) as sender:
            for _ in range(rounds):
                for case in CASES:
                    with HttpReceiver(case.reply(canary)) as hook:
                        started = time.monotonic()
                        outcome = await sender.send(
                            hook.url(), headers={}, body=b"{}", budget=BUDGET
                        )
                        took = time.monotonic() - started
                    overrun = max(took / BUDGET.total_seconds() - 1, 0.0)
                    overruns.append(overrun)
                    lines.append(f"  {case.name}: {took:.3f}s {outcome.kind} {outcome.reason!r}")
                    if not case.check(outcome):
                        wrong.append(f"{case.name}: {outcome!r}")
        redirects_followed = canary.connections
    report(
        f"F8 attempts={len(overruns)} max_overrun={max(overruns) * 100:.1f}%"
        f" over_deadline={sum(o > 0.10 for o in overruns)} redirects_followed={redirects_followed}"
        f" 410=permanent+disable 429=retry_after_120s budget={BUDGET.total_seconds():g}s"
    )
    detail = "\n".join(lines)
    assert not wrong, "\n".join(wrong) + "\n" + detail
    assert max(overruns) <= 0.10, detail
    assert redirects_followed == 0
