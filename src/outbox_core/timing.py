"""Derived timing constants (catalogue C1): step budgets → per-row budget → batch timeout → lease.

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

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import attrs

from outbox_core.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_EMAIL_TIMING",
    "DEFAULT_WEBHOOK_TIMING",
    "MAX_BATCH_SIZE",
    "MAX_STEP_BUDGET",
    "EmailStepBudgets",
    "EmailTiming",
    "LaneTiming",
    "WebhookTiming",
]

#: The largest batch (email) or retry claim batch (webhooks) a timing object accepts.
MAX_BATCH_SIZE: Final = 10_000
#: The longest single budget (a step, a grace, a birth lease). Longer is a typo, not a setting, and
#: the bound keeps ``n * per_row`` far inside what :class:`~datetime.timedelta` can hold.
MAX_STEP_BUDGET: Final = timedelta(days=1)
# The messages print products with a multiplication sign, as the record does; spelled by name so
# no reader (or linter) mistakes it for the letter x.
_TIMES: Final = "\N{MULTIPLICATION SIGN}"
# Float seconds beyond this can't become a timedelta at all; refuse them before trying.
_LARGEST_SECONDS: Final = 1e12


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


def _fmt(duration: timedelta) -> str:
    """``60s``, ``2.5s``: seconds without a trailing ``.0``, as the error messages print them."""
    return f"{duration.total_seconds():f}".rstrip("0").rstrip(".") + "s"


def _budget(_inst: object, attribute: attrs.Attribute[Any], value: timedelta) -> None:
    if not isinstance(value, timedelta) or not timedelta(0) < value <= MAX_STEP_BUDGET:
        raise ConfigurationError(
            f"{attribute.name} must be a duration above 0s and at most {_fmt(MAX_STEP_BUDGET)},"
            f" got {value!r}"
        )


def _batch_size(_inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BATCH_SIZE:
        raise ConfigurationError(
            f"{attribute.name} must be a whole number of rows from 1 to {MAX_BATCH_SIZE},"
            f" got {value!r}"
        )


def _seconds(name: str, value: float) -> timedelta:
    """A duration from float seconds (CLI input); range rules are the fields' validators' job."""
    if not math.isfinite(value) or abs(value) > _LARGEST_SECONDS:
        raise ConfigurationError(f"{name} must be a finite number of seconds, got {value!r}")
    return timedelta(seconds=value)


def _check_chain(
    names: tuple[str, str, str, str], batch: int, unit: timedelta, timeout: object, grace: timedelta
) -> None:
    """Refuse a timeout outside ``batch * unit <= timeout < batch * unit + grace``, naming the link.

    ``names`` spells (batch, unit, timeout, lease) the way the caller's fields are named.
    """
    batch_name, unit_name, timeout_name, lease_name = names
    if not isinstance(timeout, timedelta):
        raise ConfigurationError(f"{timeout_name} must be a timedelta, got {timeout!r}")
    work = batch * unit
    product = f"{batch_name} {batch} {_TIMES} {unit_name} {_fmt(unit)}"
    if timeout < work:
        raise ConfigurationError(
            f"{timeout_name} {_fmt(timeout)} is shorter than {product} = {_fmt(work)}:"
            " the last row of a batch could be cancelled mid-send"
        )
    lease = work + grace
    if timeout >= lease:
        raise ConfigurationError(
            f"{timeout_name} {_fmt(timeout)} is not shorter than {lease_name} {_fmt(lease)}"
            f" ({product} + lease_grace {_fmt(grace)}): the lease could expire while the batch"
            " still runs, and a sibling that re-claims its rows would send them twice"
        )


def _pick(overrides: Mapping[str, float], known: tuple[str, ...]) -> dict[str, timedelta]:
    """Turn ``{"dial": 12.0}`` into ``{"dial": timedelta(seconds=12)}``; refuse unknown names."""
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ConfigurationError(
            f"unknown budget name(s) {', '.join(unknown)}; the known names are {', '.join(known)}"
        )
    return {name: _seconds(name, seconds) for name, seconds in overrides.items()}


def _check_claim_size(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BATCH_SIZE:
        raise ConfigurationError(f"a claim takes 1 to {MAX_BATCH_SIZE} rows, got {n!r}")


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


#: The record's email figures: per-row 60 s, batch 5, batch timeout 300 s, claim lease 360 s.
DEFAULT_EMAIL_TIMING: Final = EmailTiming()
#: The record's webhook figures: 13 s per attempt, birth lease 120 s, retry claim lease 190 s.
DEFAULT_WEBHOOK_TIMING: Final = WebhookTiming()
