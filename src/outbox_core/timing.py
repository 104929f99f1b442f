"""Derived timing constants (ADR 0002): step budgets → per-row budget → batch timeout → lease.

Theory of operation
-------------------
A worker claims a batch in one short transaction that stamps every row with a lease, then sends the
rows one by one outside any transaction. The lease is both the crash-recovery bound (a crashed
worker's rows become claimable again when it ends) and the exclusion between workers (nobody else
claims a leased row). That only works if the numbers fit together, so none of them is hand-tuned;
each is derived from the one below it (ADR 0002):

* every step of a row's work has a budget, and the **per-row budget** is their sum
  (email: suppression 5 s + branding 5 s + dial 10 s + SMTP exchange 30 s + bounce report 5 s +
  mark 5 s = 60 s);
* the **batch timeout** must let every row of a full batch use its whole budget:
  ``batch_size * per_row <= batch_timeout`` (else the last row can be cancelled mid-send, after the
  server may already have the message);
* the **claim lease** must outlive the batch: ``batch_timeout < claim_lease(batch_size)`` with
  ``claim_lease(n) = n * per_row + grace`` (else a sibling re-claims rows this worker is still
  sending, and the recipient gets them twice).

The chain ``batch_size * per_row <= batch_timeout < claim_lease(batch_size)`` is checked when a
timing object is built, and the error names the broken link and its figures. Defaults reproduce the
record: per-row 60 s, batch 5, batch timeout 300 s, claim lease 360 s; webhooks 13 s per attempt,
retry claim lease 10 * 13 s + 60 s = 190 s, birth lease 120 s.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import attrs

from outbox_core.timing_rules import MAX_BATCH_SIZE, MAX_STEP_BUDGET
from outbox_core.timing_rules import batch_size as _batch_size
from outbox_core.timing_rules import budget as _budget
from outbox_core.timing_rules import check_chain as _check_chain
from outbox_core.timing_rules import check_claim_size as _check_claim_size
from outbox_core.timing_rules import fmt as _fmt
from outbox_core.timing_rules import pick as _pick
from outbox_core.timing_rules import seconds as _seconds

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_EMAIL_TIMING",
    "DEFAULT_RELAY_TIMING",
    "DEFAULT_WEBHOOK_TIMING",
    "MAX_BATCH_SIZE",
    "MAX_STEP_BUDGET",
    "EmailStepBudgets",
    "EmailTiming",
    "FanOutTiming",
    "LaneTiming",
    "RelayTiming",
    "WebhookTiming",
]


@runtime_checkable
class LaneTiming(Protocol):
    """What the runtime needs of any lane's timing (e-mail, webhook retries, relay, consumers).

    Every lane rides on the same worker loop; only these figures differ. An implementation checks
    ``batch_size * per_row <= batch_timeout < claim_lease(batch_size)`` when it is built.
    """

    @property
    def batch_size(self) -> int:
        """How many rows one claim takes."""
        ...

    @property
    def per_row(self) -> timedelta:
        """The whole budget of one row: its work and its mark."""
        ...

    @property
    def batch_timeout(self) -> timedelta:
        """How long the worker may spend on one claimed batch."""
        ...

    @property
    def mark_budget(self) -> timedelta:
        """The part of :attr:`per_row` kept for the mark that records the row's outcome."""
        ...

    def claim_lease(self, n: int | None = None) -> timedelta:
        """The lease a claim of ``n`` rows (default: a full batch) stamps."""
        ...

    def describe(self) -> str:
        """One line for the worker to print at start."""
        ...


@attrs.frozen
class EmailStepBudgets:
    """How long each step of sending one email may take; the per-row budget is their sum."""

    #: Looking the recipient up in the suppression list (a step with a budget, like every other).
    suppression: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: Loading the tenant's branding for the template.
    branding: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: Connecting to the SMTP server (TCP, and TLS for implicit-TLS servers).
    dial: timedelta = attrs.field(default=timedelta(seconds=10), validator=_budget)
    #: The SMTP conversation from greeting to the reply after DATA (also capped by time left).
    smtp_exchange: timedelta = attrs.field(default=timedelta(seconds=30), validator=_budget)
    #: Reporting a bounce/suppression found during the send.
    bounce_report: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: The detached compare-and-set mark that records the result.
    mark: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)

    @classmethod
    def step_names(cls) -> tuple[str, ...]:
        """The step names, in order: what ``--budget STEP=SECONDS`` accepts besides the grace."""
        return tuple(field.name for field in attrs.fields(cls))

    @property
    def per_row(self) -> timedelta:
        """The whole budget of one row: the sum of its steps."""
        return sum((getattr(self, name) for name in self.step_names()), timedelta(0))


def _email_batch_timeout(inst: EmailTiming) -> timedelta:
    # attrs runs validators after every default is made: check what this default uses first.
    _batch_size(inst, attrs.fields(EmailTiming).batch_size, inst.batch_size)
    return inst.batch_size * inst.budgets.per_row


@attrs.frozen
class EmailTiming:
    """The email worker's timing: step budgets, batch size, batch timeout and claim lease.

    ``batch_timeout`` defaults to ``batch_size * per_row``, the shortest value the chain allows.
    Build from CLI input with :meth:`with_overrides`.
    """

    #: The per-step budgets; their sum is the per-row budget.
    budgets: EmailStepBudgets = attrs.field(factory=EmailStepBudgets)
    #: How many rows one claim takes.
    batch_size: int = attrs.field(default=5, validator=_batch_size)
    #: How long the worker may spend on one claimed batch (rows not started by then stay leased).
    batch_timeout: timedelta = attrs.field(
        default=attrs.Factory(_email_batch_timeout, takes_self=True)
    )
    #: What the claim lease adds beyond the batch's work: claim-to-start delay and clock skew.
    lease_grace: timedelta = attrs.field(default=timedelta(seconds=60), validator=_budget)

    def __attrs_post_init__(self) -> None:
        names = ("batch_size", "per_row", "batch_timeout", "claim_lease")
        _check_chain(names, self.batch_size, self.per_row, self.batch_timeout, self.lease_grace)

    @classmethod
    def override_names(cls) -> tuple[str, ...]:
        """Every name :meth:`with_overrides` accepts: the step names and ``lease_grace``."""
        return (*EmailStepBudgets.step_names(), "lease_grace")

    @classmethod
    def with_overrides(
        cls,
        overrides: Mapping[str, float] | None = None,
        *,
        batch_size: int = 5,
        batch_timeout: float | None = None,
    ) -> EmailTiming:
        """Build from seconds, as a CLI gets them (``--budget dial=12 --budget lease_grace=90``).

        Steps not named keep their defaults; ``batch_timeout=None`` means ``batch_size * per_row``.
        """
        steps = _pick(overrides or {}, cls.override_names())
        rest: dict[str, Any] = {"batch_size": batch_size}
        if "lease_grace" in steps:
            rest["lease_grace"] = steps.pop("lease_grace")
        if batch_timeout is not None:
            rest["batch_timeout"] = _seconds("batch_timeout", batch_timeout)
        return cls(EmailStepBudgets(**steps), **rest)

    @property
    def per_row(self) -> timedelta:
        """The whole budget of one row (60 s by default)."""
        return self.budgets.per_row

    @property
    def mark_budget(self) -> timedelta:
        """The mark step's budget (:class:`LaneTiming`)."""
        return self.budgets.mark

    def claim_lease(self, n: int | None = None) -> timedelta:
        """The lease a claim of ``n`` rows (default: a full batch) stamps: ``n * per_row + grace``.

        A claim stamps the full batch's lease before it knows how many rows it got; a smaller
        ``n`` is for callers that size the lease to the rows actually taken.
        """
        rows = self.batch_size if n is None else n
        _check_claim_size(rows)
        return rows * self.per_row + self.lease_grace

    def describe(self) -> str:
        """One line for the worker to print at start, e.g. in the defaults::

        per-row budget 60s (suppression 5s + ... + mark 5s), batch 5, batch timeout 300s,
        claim lease 360s
        """
        steps = " + ".join(
            f"{name} {_fmt(getattr(self.budgets, name))}" for name in self.budgets.step_names()
        )
        return (
            f"per-row budget {_fmt(self.per_row)} ({steps}), batch {self.batch_size},"
            f" batch timeout {_fmt(self.batch_timeout)}, claim lease {_fmt(self.claim_lease())}"
        )


#: The record's email figures: per-row 60 s, batch 5, batch timeout 300 s, claim lease 360 s.
DEFAULT_EMAIL_TIMING: Final = EmailTiming()

# The webhook lanes' timings live beside the e-mail one's rules, in their own module; re-exported
# here so ``outbox_core.timing`` names every lane timing.
from outbox_core.event_timing import (  # noqa: E402 - likewise: the event relay's timing
    DEFAULT_RELAY_TIMING,
    RelayTiming,
)
from outbox_core.webhook_timing import (  # noqa: E402 - after LaneTiming, which it does not need
    DEFAULT_WEBHOOK_TIMING,
    FanOutTiming,
    WebhookTiming,
)
