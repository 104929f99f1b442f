"""What the e-mail demo sends to whom, and what its figures must show (:class:`DemoReport`)."""

from __future__ import annotations

import enum
from datetime import timedelta
from typing import Final

import attrs

from outbox_adapters.demo.event_report import EventDemoReport
from outbox_adapters.demo.webhooks import WebhookDemoReport
from outbox_core.backoff import SlotSchedule

__all__ = ["DEMO_BACKOFF", "DemoReport", "KindOutcome", "Recipient", "demo_recipients"]

#: Waits after the 1st, 2nd and 3rd failed attempt: four attempts in all, done in about 2 s.
DEMO_BACKOFF: Final = SlotSchedule(
    (timedelta(seconds=0.2), timedelta(seconds=0.5), timedelta(seconds=1.0))
)


class Recipient(enum.StrEnum):
    """What the sink does with a recipient, named by the prefix of its local part."""

    OK = "user"
    BOUNCE = "bounce"  # 550 on every try: failed at the first attempt
    TRANSIENT = "transient"  # 451 on every try: failed when the schedule is used up
    FLAKY = "flaky"  # 451 on the first try only: sent on the second attempt


def demo_recipients(rows: int) -> list[tuple[Recipient, str]]:
    """``rows`` recipients: 5% each bounce, transient and flaky, the rest plain."""
    special = {5: Recipient.BOUNCE, 10: Recipient.TRANSIENT, 15: Recipient.FLAKY}
    out = []
    for number in range(rows):
        kind = special.get(number % 20, Recipient.OK)
        out.append((kind, f"{kind.value}{number:05d}@demo.example"))
    return out


@attrs.frozen
class KindOutcome:
    """What the database holds for one recipient kind at the end."""

    rows: int = 0
    pending: int = 0
    dispatched: int = 0
    failed: int = 0
    retried: int = 0
    min_attempts: int = 0
    max_attempts: int = 0
    canary_left: int = 0
    canary_kept: int = 0


@attrs.frozen
class DemoReport:
    """The figures of one run, and the invariants they must satisfy."""

    enqueued: int
    by_kind: dict[Recipient, KindOutcome]
    received: int
    distinct_message_ids: int
    links_delivered: int
    plaintext_commands: int
    elapsed: float
    finished: bool
    #: The webhook part (None when the demo ran on a database it does not own).
    webhooks: WebhookDemoReport | None = None
    #: The domain-event part (None when the demo ran on a database it does not own).
    events: EventDemoReport | None = None

    def total(self, field: str) -> int:
        return sum(getattr(outcome, field) for outcome in self.by_kind.values())

    def kind(self, kind: Recipient) -> KindOutcome:
        return self.by_kind.get(kind, KindOutcome())

    @property
    def duplicates(self) -> int:
        return self.received - self.distinct_message_ids

    def broken(self) -> list[str]:
        """Every invariant that does not hold, in words; empty when the run is clean."""
        transient, flaky = self.kind(Recipient.TRANSIENT), self.kind(Recipient.FLAKY)
        checks = [
            (self.finished, "rows were still pending when the demo gave up"),
            (self.total("rows") == self.enqueued, "the lane holds a different number of rows"),
            (self.duplicates == 0, "the SMTP server received a message twice"),
            (self.received == self.total("dispatched"), "messages received != rows dispatched"),
            (self.links_delivered == self.received, "a received message lacked its reset link"),
            (self.total("canary_left") == 0, "a dispatched row still holds its secret link"),
            (self.total("canary_kept") == self.total("failed"), "a failed row lost its link"),
            (self.plaintext_commands == 0, "an SMTP command was sent without TLS"),
            (
                self.total("retried") == transient.rows + flaky.rows,
                "the rows retried are not exactly the transient and flaky ones",
            ),
        ]
        # Where each kind of recipient must end, and after exactly how many attempts.
        expected = {
            Recipient.OK: ("dispatched", 1),
            Recipient.BOUNCE: ("failed", 1),
            Recipient.TRANSIENT: ("failed", DEMO_BACKOFF.max_attempts),
            Recipient.FLAKY: ("dispatched", 2),
        }
        for kind, (status, attempts) in expected.items():
            outcome = self.kind(kind)
            holds = outcome.rows == 0 or (
                getattr(outcome, status) == outcome.rows
                and outcome.min_attempts == outcome.max_attempts == attempts
            )
            checks.append(
                (holds, f"{kind.value} rows did not all end {status} after {attempts} attempt(s)")
            )
        webhooks = [] if self.webhooks is None else self.webhooks.broken()
        events = [] if self.events is None else self.events.broken()
        return [reason for holds, reason in checks if not holds] + webhooks + events

    def table(self) -> str:
        rate = self.enqueued / self.elapsed if self.elapsed > 0 else 0.0
        lines = [
            ("enqueued", self.enqueued),
            ("sent (dispatched)", self.total("dispatched")),
            ("failed permanent (550 bounce)", self.kind(Recipient.BOUNCE).failed),
            ("failed after retries (451, schedule used up)", self.kind(Recipient.TRANSIENT).failed),
            ("retried (needed more than one attempt)", self.total("retried")),
            ("still pending", self.total("pending")),
            ("messages received by the sink", self.received),
            ("duplicates seen by the sink", self.duplicates),
            ("dispatched rows still holding the canary", self.total("canary_left")),
            ("plaintext SMTP commands", self.plaintext_commands),
            (
                "elapsed (workers started .. last row done)",
                f"{self.elapsed:.2f} s ({rate:.0f} rows/s)",
            ),
        ]
        width = max(len(label) for label, _ in lines)
        return "\n".join(f"  {label:<{width}}  {value:>6}" for label, value in lines)
