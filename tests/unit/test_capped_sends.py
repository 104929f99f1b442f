"""The send caps' adapter (outbox_adapters.lanes.send_caps) on a fake clock and fake peers, the
lanes' options, and ``outbox worker``'s flags for them.

The rate cap's schedule is exact here: the fake clock moves only by the waits the pacer asks for.
The per-domain cap is driven by events, not timing: a peer holds each send until told.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from outbox_adapters.app import EmailLane, WebhookLane
from outbox_adapters.cli import main
from outbox_adapters.clock import FakeClock
from outbox_adapters.lanes.send_caps import CappedMailer, DomainSlots, PacedSender
from outbox_core.errors import ConfigurationError
from outbox_core.mail import OutgoingMail, build_message
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.timing import EmailStepBudgets

DSN = "postgresql://127.0.0.1:1/nowhere"
NATS = "nats://127.0.0.1:9"


def mail(*to: str) -> OutgoingMail:
    return build_message(
        sender="noreply@shop.example",
        to=list(to),
        subject="Hi",
        text="Hi",
        message_id="<m@shop.example>",
        date=datetime(2026, 1, 1, tzinfo=UTC),
    )


class TimedMailer:
    """Records when (on the fake clock) each send reached it and with what budget."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.steps = EmailStepBudgets()
        self.calls: list[tuple[float, float]] = []

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome:
        del mail
        self.calls.append((self.clock.monotonic(), budget.total_seconds()))
        return Outcome.sent()


class HeldMailer:
    """Holds every send until ``go`` is set; counts the sends in flight per recipient domain."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.started = 0

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome:
        del budget
        domains = {r.rpartition("@")[2] for r in mail.recipients}
        for domain in domains:
            self.now[domain] += 1
            self.most[domain] = max(self.most[domain], self.now[domain])
        self.started += 1
        try:
            await self.go.wait()
        finally:
            for domain in domains:
                self.now[domain] -= 1
        return Outcome.sent()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


# --- the rate cap, on a fake clock ------------------------------------------------------------------


async def test_the_rate_cap_spaces_sends_by_its_interval_and_the_wait_spends_the_budget():
    clock = FakeClock()
    inner = TimedMailer(clock)
    capped = CappedMailer(inner, clock=clock, max_per_second=2)
    start = clock.monotonic()
    for n in range(4):
        outcome = await capped.send(mail(f"u{n}@a.example"), budget=timedelta(seconds=10))
        assert outcome.kind is OutcomeKind.SENT
    assert [at - start for at, _ in inner.calls] == pytest.approx([0.0, 0.5, 1.0, 1.5])
    assert clock.sleeps == pytest.approx([0.5, 0.5, 0.5])
    # Each later send asked at the previous one's start, waited 0.5 s, and has that much less.
    assert [budget for _, budget in inner.calls] == pytest.approx([10.0, 9.5, 9.5, 9.5])


async def test_a_send_whose_slot_comes_after_its_deadline_is_not_started():
    clock = FakeClock()
    inner = TimedMailer(clock)
    capped = CappedMailer(inner, clock=clock, max_per_second=1)
    await capped.send(mail("a@a.example"), budget=timedelta(seconds=5))
    outcome = await capped.send(mail("b@a.example"), budget=timedelta(seconds=0.3))
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert not outcome.maybe_delivered
    assert outcome.reason.startswith("send rate cap: no start before the row's deadline (1/s;")
    assert "nothing was sent" in outcome.reason
    assert len(inner.calls) == 1
    assert clock.sleeps == []  # refused at once: no waiting for a slot it would not get
    # The refusal reserved nothing: the next send gets the slot one interval after the first.
    await capped.send(mail("c@a.example"), budget=timedelta(seconds=5))
    assert inner.calls[-1][0] - inner.calls[0][0] == pytest.approx(1.0)


async def test_the_webhook_sender_is_paced_the_same_way():
    clock = FakeClock()
    seen: list[tuple[float, float]] = []

    class Sender:
        async def send(self, url, *, headers, body, budget):
            seen.append((clock.monotonic(), budget.total_seconds()))
            return Outcome.sent()

    paced = PacedSender(Sender(), clock=clock, max_per_second=4)
    start = clock.monotonic()
    for _ in range(3):
        await paced.send("https://h.example/", headers={}, body=b"{}", budget=timedelta(seconds=8))
    assert [at - start for at, _ in seen] == pytest.approx([0.0, 0.25, 0.5])
    assert [budget for _, budget in seen] == pytest.approx([8.0, 7.75, 7.75])
    refused = await paced.send("https://h.example/", headers={}, body=b"{}", budget=timedelta(0))
    assert refused.kind is OutcomeKind.TRANSIENT
    assert refused.reason.startswith("send rate cap: no start before the row's deadline (4/s;")
    assert len(seen) == 3


# --- the per-domain cap ---------------------------------------------------------------------------


async def test_at_most_n_sends_to_one_domain_while_other_domains_proceed():
    inner = HeldMailer()
    capped = CappedMailer(inner, clock=FakeClock(), max_per_domain=2)
    sends = [
        asyncio.create_task(capped.send(mail(f"u{n}@GMail.com"), budget=timedelta(seconds=30)))
        for n in range(5)
    ]
    sends += [
        asyncio.create_task(capped.send(mail(f"u{n}@yahoo.example"), budget=timedelta(seconds=30)))
        for n in range(2)
    ]
    await settle()
    assert inner.now == {"gmail.com": 2, "yahoo.example": 2}
    inner.go.set()
    outcomes = await asyncio.gather(*sends)
    assert all(o.kind is OutcomeKind.SENT for o in outcomes)
    assert inner.most["gmail.com"] == 2
    assert capped.domains is not None
    assert capped.domains.in_use() == {}  # every slot given back, no entry kept


async def test_a_message_to_several_domains_takes_a_slot_of_each_in_sorted_order():
    inner = HeldMailer()
    capped = CappedMailer(inner, clock=FakeClock(), max_per_domain=1)
    # Opposite orders in the messages: sorted slot order means neither can hold what the other
    # waits for.
    first = asyncio.create_task(
        capped.send(mail("a@x.example", "b@y.example"), budget=timedelta(seconds=30))
    )
    second = asyncio.create_task(
        capped.send(mail("c@y.example", "d@x.example"), budget=timedelta(seconds=30))
    )
    await settle()
    assert inner.started == 1
    inner.go.set()
    outcomes = await asyncio.wait_for(asyncio.gather(first, second), timeout=5)
    assert [o.kind for o in outcomes] == [OutcomeKind.SENT, OutcomeKind.SENT]
    assert inner.most == {"x.example": 1, "y.example": 1}


async def test_a_send_that_gets_no_domain_slot_within_its_budget_is_not_started():
    inner = HeldMailer()
    capped = CappedMailer(inner, clock=FakeClock(), max_per_domain=1)
    holder = asyncio.create_task(capped.send(mail("a@x.example"), budget=timedelta(seconds=30)))
    await settle()
    outcome = await capped.send(mail("b@x.example", "c@w.example"), budget=timedelta(seconds=0.05))
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert not outcome.maybe_delivered
    assert outcome.reason.startswith(
        "send cap per recipient domain: no slot for w.example, x.example"
    )
    assert "nothing was sent" in outcome.reason
    assert inner.started == 1
    # The slot of w.example it had taken first was given back.
    assert capped.domains is not None
    assert capped.domains.in_use() == {"x.example": 1}
    inner.go.set()
    await holder
    assert capped.domains.in_use() == {}


async def test_domain_slots_given_back_let_the_next_send_in():
    slots = DomainSlots(1)
    await slots.acquire(["a.example"])
    waiter = asyncio.create_task(slots.acquire(["a.example"]))
    await settle()
    assert not waiter.done()
    slots.release(["a.example"])
    await asyncio.wait_for(waiter, timeout=5)
    slots.release(["a.example"])
    assert slots.in_use() == {}


def test_the_wrapper_is_the_mailer_to_the_handler():
    clock = FakeClock()
    inner = TimedMailer(clock)
    capped = CappedMailer(inner, clock=clock, max_per_domain=1)
    assert capped.steps is inner.steps  # the handler checks the mailer's step budgets


# --- the lanes' options ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
@pytest.mark.parametrize("option", ["max_per_domain", "max_per_second"])
def test_an_e_mail_lane_refuses_a_bad_cap_naming_it(option, bad):
    with pytest.raises(ConfigurationError, match=rf"EmailLane\.{option} \(--max-per-"):
        EmailLane(**{option: bad})


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_the_webhook_lane_refuses_a_bad_rate_naming_it(bad):
    with pytest.raises(ConfigurationError, match=r"WebhookLane\.max_per_second"):
        WebhookLane(max_per_second=bad)


def test_the_caps_are_off_by_default():
    assert EmailLane().max_per_domain is None
    assert EmailLane().max_per_second is None
    assert WebhookLane().max_per_second is None
    assert EmailLane().describe_caps() == "uncapped"


# --- outbox worker --------------------------------------------------------------------------------

SMTP = ["--smtp-url", "smtp://relay.example.org:587", "--sender", "a@example.org"]


def _worker(*args: str):
    return CliRunner().invoke(
        main, ["worker", "--database-url", DSN, "--drain", "--no-listen", *args]
    )


def test_an_e_mail_lane_takes_both_caps():
    result = _worker("--lane", "email", *SMTP, "--max-per-domain", "3", "--max-per-second", "7")
    # Accepted: the worker says what it will do, then fails on the unreachable database.
    assert result.exit_code == 1, result.output
    assert "send caps: 3 in flight per recipient domain, 7 sends a second" in result.output


def test_the_webhook_lane_takes_the_rate_cap():
    result = _worker("--lane", "webhooks", "--max-per-second", "5")
    assert result.exit_code == 1, result.output
    assert "send caps: 5 requests a second" in result.output


@pytest.mark.parametrize(
    ("lane", "extra", "flag"),
    [
        ("webhooks", ["--max-per-domain", "2"], "--max-per-domain"),
        ("events", ["--broker", NATS, "--max-per-second", "2"], "--max-per-second"),
        ("events", ["--broker", NATS, "--max-per-domain", "2"], "--max-per-domain"),
        ("notification-inapp", ["--broker", NATS, "--max-per-second", "2"], "--max-per-second"),
    ],
)
def test_a_lane_that_does_not_send_capped_refuses_the_caps_naming_itself(lane, extra, flag):
    result = _worker("--lane", lane, *extra)
    assert result.exit_code == 2, result.output
    assert f"{flag}: the lane {lane!r} does not take this option" in result.output


@pytest.mark.parametrize(
    ("flag", "value", "env"),
    [
        ("--max-per-domain", "0", "OUTBOX_MAX_PER_DOMAIN"),
        ("--max-per-second", "-3", "OUTBOX_MAX_PER_SECOND"),
    ],
)
def test_a_bad_cap_is_refused_naming_its_option(flag, value, env):
    result = _worker("--lane", "email", *SMTP, flag, value)
    assert result.exit_code == 2, result.output
    assert f"{flag} ({env}): a whole number of at least 1; got {int(value)}" in result.output


def test_a_cap_that_is_not_a_whole_number_is_refused_by_the_option():
    result = _worker("--lane", "email", *SMTP, "--max-per-second", "1.5")
    assert result.exit_code == 2, result.output
    assert "'--max-per-second'" in result.output
    assert "not a valid integer" in result.output
