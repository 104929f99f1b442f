"""The rules every lane timing is checked by (ADR 0002): budgets, batch sizes, and the
chain ``batch_size * per_row <= batch_timeout < claim_lease(batch_size)``, each refusal naming the
broken link with its figures. Shared by :mod:`outbox_core.timing` (e-mail) and
:mod:`outbox_core.webhook_timing` (the webhook drainer and retry lanes).
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, cast

import attrs

from outbox_core.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "LARGEST_SECONDS",
    "MAX_BATCH_SIZE",
    "MAX_STEP_BUDGET",
    "TIMES",
    "OneStepLane",
    "batch_size",
    "budget",
    "check_chain",
    "check_claim_size",
    "fmt",
    "one_step_batch_timeout",
    "pick",
    "seconds",
    "window",
]

#: The largest batch (email) or retry claim batch (webhooks) a timing object accepts.
MAX_BATCH_SIZE: Final = 10_000
#: The longest single budget (a step, a grace, a birth lease). Longer is a typo, not a setting, and
#: the bound keeps ``n * per_row`` far inside what :class:`~datetime.timedelta` can hold.
MAX_STEP_BUDGET: Final = timedelta(days=1)
# The messages print products with a multiplication sign, as the record does; spelled by name so
# no reader (or linter) mistakes it for the letter x.
TIMES: Final = "\N{MULTIPLICATION SIGN}"
# Float seconds beyond this can't become a timedelta at all; refuse them before trying.
LARGEST_SECONDS: Final = 1e12


def fmt(duration: timedelta) -> str:
    """``60s``, ``2.5s``: seconds without a trailing ``.0``, as the error messages print them."""
    return f"{duration.total_seconds():f}".rstrip("0").rstrip(".") + "s"


def budget(_inst: object, attribute: attrs.Attribute[Any], value: timedelta) -> None:
    if not isinstance(value, timedelta) or not timedelta(0) < value <= MAX_STEP_BUDGET:
        raise ConfigurationError(
            f"{attribute.name} must be a duration above 0s and at most {fmt(MAX_STEP_BUDGET)},"
            f" got {value!r}"
        )


def batch_size(_inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BATCH_SIZE:
        raise ConfigurationError(
            f"{attribute.name} must be a whole number of rows from 1 to {MAX_BATCH_SIZE},"
            f" got {value!r}"
        )


def window(inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    """A window: 1 to ``batch_size`` rows worked at once."""
    size = getattr(inst, "batch_size", MAX_BATCH_SIZE)
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole or not 1 <= value <= size:
        raise ConfigurationError(
            f"{attribute.name} must be a whole number of rows from 1 to the batch size {size},"
            f" got {value!r}"
        )


def seconds(name: str, value: float) -> timedelta:
    """A duration from float seconds (CLI input); range rules are the fields' validators' job."""
    if not math.isfinite(value) or abs(value) > LARGEST_SECONDS:
        raise ConfigurationError(f"{name} must be a finite number of seconds, got {value!r}")
    return timedelta(seconds=value)


def check_chain(
    names: tuple[str, str, str, str], batch: int, unit: timedelta, timeout: object, grace: timedelta
) -> None:
    """Refuse a timeout outside ``batch * unit <= timeout < batch * unit + grace``, naming the link.

    ``names`` spells (batch, unit, timeout, lease) the way the caller's fields are named.
    """
    batch_name, unit_name, timeout_name, lease_name = names
    if not isinstance(timeout, timedelta):
        raise ConfigurationError(f"{timeout_name} must be a timedelta, got {timeout!r}")
    work = batch * unit
    product = f"{batch_name} {batch} {TIMES} {unit_name} {fmt(unit)}"
    if timeout < work:
        raise ConfigurationError(
            f"{timeout_name} {fmt(timeout)} is shorter than {product} = {fmt(work)}:"
            " the last row of a batch could be cancelled mid-send"
        )
    lease = work + grace
    if timeout >= lease:
        raise ConfigurationError(
            f"{timeout_name} {fmt(timeout)} is not shorter than {lease_name} {fmt(lease)}"
            f" ({product} + lease_grace {fmt(grace)}): the lease could expire while the batch"
            " still runs, and a sibling that re-claims its rows would send them twice"
        )


def pick(overrides: Mapping[str, float], known: tuple[str, ...]) -> dict[str, timedelta]:
    """Turn ``{"dial": 12.0}`` into ``{"dial": timedelta(seconds=12)}``; refuse unknown names."""
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ConfigurationError(
            f"unknown budget name(s) {', '.join(unknown)}; the known names are {', '.join(known)}"
        )
    return {name: seconds(name, value) for name, value in overrides.items()}


def check_claim_size(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BATCH_SIZE:
        raise ConfigurationError(f"a claim takes 1 to {MAX_BATCH_SIZE} rows, got {n!r}")


class OneStepLane:
    """What a lane timing of one step and a mark per row derives (the webhook drainer's fan-out,
    the relay's publish): the per-row budget, the chain check, the claim lease, the start line.

    A subclass is an attrs class with the fields ``mark``, ``batch_size``, ``batch_timeout`` and
    ``lease_grace`` and the step's own field, named by :attr:`STEP`.
    """

    #: The name of the step's field (``fan_out``, ``publish``).
    STEP = "step"
    mark: timedelta
    batch_size: int
    batch_timeout: timedelta
    lease_grace: timedelta

    #: Rows worked at once, their marks recorded together (a window). 1 here: one row after the
    #: other; a subclass with a ``window`` field (the relay's) overrides it.
    window: int = 1

    def __attrs_post_init__(self) -> None:
        if self.window == 1:
            names = ("batch_size", "per_row", "batch_timeout", "claim_lease")
        else:
            names = (
                f"windows (batch_size {self.batch_size} / window {self.window}, rounded up)",
                "per_row",
                "batch_timeout",
                "claim_lease",
            )
        check_chain(
            names, self.windows(self.batch_size), self.per_row, self.batch_timeout, self.lease_grace
        )

    def windows(self, rows: int) -> int:
        """How many windows ``rows`` rows take (each window's rows are worked at once and take at
        most one per-row budget together): ``ceil(rows / window)``."""
        return -(-rows // self.window)

    @property
    def step(self) -> timedelta:
        value: timedelta = getattr(self, self.STEP)
        return value

    @property
    def per_row(self) -> timedelta:
        """One row's whole budget: the step and the mark."""
        return self.step + self.mark

    @property
    def mark_budget(self) -> timedelta:
        """The mark's budget (:class:`~outbox_core.timing.LaneTiming`)."""
        return self.mark

    def claim_lease(self, n: int | None = None) -> timedelta:
        """The lease a claim of ``n`` rows (default: a full batch) stamps:
        ``windows(n) * per_row + grace`` (``n * per_row + grace`` one row at a time)."""
        rows = self.batch_size if n is None else n
        check_claim_size(rows)
        return self.windows(rows) * self.per_row + self.lease_grace

    def describe(self) -> str:
        """One line for the lane's worker to print at start."""
        return (
            f"per-row budget {fmt(self.per_row)} ({self.STEP} {fmt(self.step)} + mark"
            f" {fmt(self.mark)}), batch {self.batch_size}"
            + (f" in windows of {self.window}" if self.window > 1 else "")
            + f", batch timeout"
            f" {fmt(self.batch_timeout)}, claim lease {fmt(self.claim_lease())}"
        )


def one_step_batch_timeout(inst: OneStepLane) -> timedelta:
    """The default batch timeout of a :class:`OneStepLane`: ``windows(batch_size) * per_row`` (the
    shortest the chain allows), its fields checked first (attrs makes defaults before it
    validates)."""
    fields = attrs.fields_dict(cast("Any", type(inst)))  # an attrs subclass, by contract
    budget(inst, fields[inst.STEP], inst.step)
    budget(inst, fields["mark"], inst.mark)
    batch_size(inst, fields["batch_size"], inst.batch_size)
    if "window" in fields:
        window(inst, fields["window"], inst.window)
    return inst.windows(inst.batch_size) * inst.per_row
