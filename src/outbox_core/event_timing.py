"""The event relay's timing (catalogue C1, ADR 0002, ADR 0020): one acknowledged publish per row.

The relay (lane ``events``) claims rows of the event outbox in key order and publishes each to the
broker, waiting for the broker's positive acknowledgement of a stored message. A row's work is that
one publish (:attr:`RelayTiming.publish`, the budget handed to ``Publisher.publish``) plus the
runtime's fenced mark; the chain ``batch_size * per_row <= batch_timeout < claim_lease(batch_size)``
is the one every lane is checked by (:mod:`outbox_core.timing_rules`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

import attrs

from outbox_core.timing_rules import batch_size as _batch_size
from outbox_core.timing_rules import budget as _budget
from outbox_core.timing_rules import check_chain as _check_chain
from outbox_core.timing_rules import check_claim_size as _check_claim_size
from outbox_core.timing_rules import fmt as _fmt

__all__ = ["DEFAULT_RELAY_TIMING", "RelayTiming"]


def _relay_batch_timeout(inst: RelayTiming) -> timedelta:
    # attrs runs validators after every default is made: check what this default uses first.
    fields = attrs.fields(RelayTiming)
    _budget(inst, fields.publish, inst.publish)
    _budget(inst, fields.mark, inst.mark)
    _batch_size(inst, fields.batch_size, inst.batch_size)
    return inst.batch_size * inst.per_row


@attrs.frozen
class RelayTiming:
    """The relay's timing: a publish budget and a mark budget per row, a batch, a lease.

    ``batch_timeout`` defaults to ``batch_size * per_row`` (the shortest the chain allows) and the
    claim lease is ``batch_size * per_row + lease_grace``: a relay that crashed mid-batch holds its
    rows (and, through the per-key claim order, the later rows of their keys) until then.
    """

    #: The whole publish: connect if needed, send, and wait for the broker's acknowledgement.
    publish: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: The runtime's detached, fenced mark that records the publish's result.
    mark: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: How many event rows one claim takes.
    batch_size: int = attrs.field(default=50, validator=_batch_size)
    #: How long the relay may spend on one claimed batch.
    batch_timeout: timedelta = attrs.field(
        default=attrs.Factory(_relay_batch_timeout, takes_self=True)
    )
    #: What the claim lease adds beyond the batch's work: claim-to-start delay and clock skew.
    lease_grace: timedelta = attrs.field(default=timedelta(seconds=60), validator=_budget)

    def __attrs_post_init__(self) -> None:
        names = ("batch_size", "per_row", "batch_timeout", "claim_lease")
        _check_chain(names, self.batch_size, self.per_row, self.batch_timeout, self.lease_grace)

    @property
    def per_row(self) -> timedelta:
        """One row's whole budget: the publish and the mark (10 s by default)."""
        return self.publish + self.mark

    @property
    def mark_budget(self) -> timedelta:
        """The mark's budget (:class:`~outbox_core.timing.LaneTiming`)."""
        return self.mark

    def claim_lease(self, n: int | None = None) -> timedelta:
        """The lease a claim of ``n`` rows (default: a full batch) stamps: ``n * per_row + grace``."""
        rows = self.batch_size if n is None else n
        _check_claim_size(rows)
        return rows * self.per_row + self.lease_grace

    def describe(self) -> str:
        """One line for the relay to print at start."""
        return (
            f"per-row budget {_fmt(self.per_row)} (publish {_fmt(self.publish)} + mark"
            f" {_fmt(self.mark)}), batch {self.batch_size}, batch timeout"
            f" {_fmt(self.batch_timeout)}, claim lease {_fmt(self.claim_lease())}"
        )


#: The relay's figures: 10 s per row (publish 5 s + mark 5 s), batch 50, batch timeout 500 s,
#: claim lease 560 s.
DEFAULT_RELAY_TIMING: Final = RelayTiming()
