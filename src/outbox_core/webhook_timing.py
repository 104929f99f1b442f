"""The webhook lanes' timing (ADR 0002): the drainer's fan-out and the deliveries'.

Two lanes carry a webhook. The **drainer** claims rows of the webhook outbox and turns each into an
event and its deliveries in one transaction (:class:`FanOutTiming`). Each **delivery** is born
leased to its in-process first attempt, and the **retry** lane claims the deliveries that are due
again (:class:`WebhookTiming`). Both are :class:`~outbox_core.timing.LaneTiming` and are checked by
the same chain as e-mail (:mod:`outbox_core.timing_rules`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import attrs

from outbox_core.errors import ConfigurationError
from outbox_core.timing_rules import OneStepLane, one_step_batch_timeout
from outbox_core.timing_rules import batch_size as _batch_size
from outbox_core.timing_rules import budget as _budget
from outbox_core.timing_rules import check_chain as _check_chain
from outbox_core.timing_rules import check_claim_size as _check_claim_size
from outbox_core.timing_rules import fmt as _fmt
from outbox_core.timing_rules import pick as _pick
from outbox_core.timing_rules import seconds as _seconds

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DEFAULT_FAN_OUT_TIMING", "DEFAULT_WEBHOOK_TIMING", "FanOutTiming", "WebhookTiming"]


def _retry_batch_timeout(inst: WebhookTiming) -> timedelta:
    # attrs runs validators after every default is made: check what this default uses first.
    fields = attrs.fields(WebhookTiming)
    _budget(inst, fields.http_attempt, inst.http_attempt)
    _budget(inst, fields.mark, inst.mark)
    _batch_size(inst, fields.retry_claim_batch, inst.retry_claim_batch)
    return inst.retry_claim_batch * inst.per_attempt


@attrs.frozen
class WebhookTiming:
    """The webhook pipeline's timing: one attempt's budget, the birth lease and the retry lease.

    Why two leases. A delivery row is born leased (``next_retry_at = now + birth_lease``, in the
    fan-out transaction) so the retry worker cannot steal it from its in-process first attempt;
    rows the retry worker claims are leased for a whole retry batch. One constant cannot serve
    both (ADR 0002). Sized for the retry batch (190 s), a fresh delivery whose first
    attempt died with its process would wait out the whole batch-sized lease before the retry
    worker could pick it up (the record calls this starving first delivery, "~23 minutes" at the
    figures it had then). Sized for birth (120 s), it would be shorter than a slow retry batch
    (10 * 13 s = 130 s), so a sibling could re-claim the batch's last rows while they are still
    being sent, and POST them twice.
    """

    #: The absolute deadline of one HTTP attempt (httpx's timeouts are per operation, so a
    #: slow-drip receiver could otherwise hold a request far longer).
    http_attempt: timedelta = attrs.field(default=timedelta(seconds=8), validator=_budget)
    #: The detached compare-and-set mark that records the attempt's result.
    mark: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: How many due deliveries one retry claim takes.
    retry_claim_batch: int = attrs.field(default=10, validator=_batch_size)
    #: How long the retry worker may spend on one claimed batch.
    retry_batch_timeout: timedelta = attrs.field(
        default=attrs.Factory(_retry_batch_timeout, takes_self=True)
    )
    #: What the retry claim lease adds beyond the batch's work.
    lease_grace: timedelta = attrs.field(default=timedelta(seconds=60), validator=_budget)
    #: The lease a fresh delivery row is born with, covering its in-process first attempt.
    birth_lease: timedelta = attrs.field(default=timedelta(seconds=120), validator=_budget)

    def __attrs_post_init__(self) -> None:
        names = ("retry_claim_batch", "per_attempt", "retry_batch_timeout", "retry_claim_lease")
        _check_chain(
            names,
            self.retry_claim_batch,
            self.per_attempt,
            self.retry_batch_timeout,
            self.lease_grace,
        )
        if self.birth_lease < self.per_attempt:
            raise ConfigurationError(
                f"birth_lease {_fmt(self.birth_lease)} is shorter than per_attempt"
                f" {_fmt(self.per_attempt)} (http_attempt {_fmt(self.http_attempt)} + mark"
                f" {_fmt(self.mark)}): the retry worker could claim a fresh delivery while its"
                " first attempt is still running, and POST it twice"
            )

    @classmethod
    def override_names(cls) -> tuple[str, ...]:
        """Every name :meth:`with_overrides` accepts."""
        return ("http_attempt", "mark", "lease_grace", "birth_lease")

    @classmethod
    def with_overrides(
        cls,
        overrides: Mapping[str, float] | None = None,
        *,
        retry_claim_batch: int = 10,
        retry_batch_timeout: float | None = None,
    ) -> WebhookTiming:
        """Build from seconds, as a CLI gets them; names not given keep their defaults."""
        picked: dict[str, Any] = _pick(overrides or {}, cls.override_names())
        picked["retry_claim_batch"] = retry_claim_batch
        if retry_batch_timeout is not None:
            picked["retry_batch_timeout"] = _seconds("retry_batch_timeout", retry_batch_timeout)
        return cls(**picked)

    @property
    def per_attempt(self) -> timedelta:
        """One attempt's whole budget: the HTTP deadline plus the mark (13 s by default)."""
        return self.http_attempt + self.mark

    def retry_claim_lease(self, n: int | None = None) -> timedelta:
        """The lease a retry claim of ``n`` rows (default: a full batch) stamps."""
        rows = self.retry_claim_batch if n is None else n
        _check_claim_size(rows)
        return rows * self.per_attempt + self.lease_grace

    # --- LaneTiming: the retry lane's figures under the runtime's names ------------------------

    @property
    def batch_size(self) -> int:
        """The retry lane's claim size (:attr:`retry_claim_batch`)."""
        return self.retry_claim_batch

    @property
    def per_row(self) -> timedelta:
        """One delivery attempt's whole budget (:attr:`per_attempt`)."""
        return self.per_attempt

    @property
    def batch_timeout(self) -> timedelta:
        """The retry batch timeout (:attr:`retry_batch_timeout`)."""
        return self.retry_batch_timeout

    @property
    def mark_budget(self) -> timedelta:
        """The mark's budget (:attr:`mark`)."""
        return self.mark

    def claim_lease(self, n: int | None = None) -> timedelta:
        """The retry claim lease (:meth:`retry_claim_lease`)."""
        return self.retry_claim_lease(n)

    def describe(self) -> str:
        """One line for the webhook workers to print at start."""
        return (
            f"per-attempt budget {_fmt(self.per_attempt)} (http_attempt"
            f" {_fmt(self.http_attempt)} + mark {_fmt(self.mark)}), birth lease"
            f" {_fmt(self.birth_lease)}, retry batch {self.retry_claim_batch}, retry batch timeout"
            f" {_fmt(self.retry_batch_timeout)}, retry claim lease {_fmt(self.retry_claim_lease())}"
        )


@attrs.frozen
class FanOutTiming(OneStepLane):
    """The webhook drainer's timing: the fan-out of the webhook-outbox rows it claims.

    The drainer's work on a row is its part of one short transaction (the event, its deliveries and
    the row's own dispatched mark; the rows of a claimed batch share the transaction, which ends
    within the earliest of their budgets); the deliveries' first attempts run after it, each under
    the birth lease of :class:`WebhookTiming`, so they are no part of this budget. ``mark`` is kept
    for the runtime's own mark, written only when the fan-out did not happen (a retry or a
    failure).
    """

    #: The fan-out transaction: event + deliveries + the row's fenced dispatched mark.
    fan_out: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: The runtime's mark of a row whose fan-out did not happen.
    mark: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: How many webhook-outbox rows one claim takes.
    batch_size: int = attrs.field(default=20, validator=_batch_size)
    #: How long the drainer may spend on one claimed batch.
    batch_timeout: timedelta = attrs.field(
        default=attrs.Factory(one_step_batch_timeout, takes_self=True)
    )
    #: What the claim lease adds beyond the batch's work.
    lease_grace: timedelta = attrs.field(default=timedelta(seconds=60), validator=_budget)

    STEP = "fan_out"


#: The record's webhook figures: 13 s per attempt, birth lease 120 s, retry claim lease 190 s.
DEFAULT_WEBHOOK_TIMING: Final = WebhookTiming()
#: The drainer's figures: 10 s per row (fan-out 5 s + mark 5 s), batch 20, claim lease 260 s.
DEFAULT_FAN_OUT_TIMING: Final = FanOutTiming()
