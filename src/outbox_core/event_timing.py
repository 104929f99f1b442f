"""The event relay's timing (ADR 0002, ADR 0020): one acknowledged publish per row.

The relay (lane ``events``) claims rows of the event outbox in key order and publishes each to the
broker, waiting for the broker's positive acknowledgement of a stored message. A row's work is that
one publish (:attr:`RelayTiming.publish`, the budget handed to ``Publisher.publish``) plus the
runtime's fenced mark; rows are published a window at a time (:attr:`RelayTiming.window`), so the
chain every lane is checked by (:mod:`outbox_core.timing_rules`) counts windows:
``windows(batch_size) * per_row <= batch_timeout < claim_lease(batch_size)``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

import attrs

from outbox_core.timing_rules import OneStepLane, one_step_batch_timeout
from outbox_core.timing_rules import batch_size as _batch_size
from outbox_core.timing_rules import budget as _budget
from outbox_core.timing_rules import window as _window

__all__ = ["DEFAULT_RELAY_TIMING", "RelayTiming"]


def _whole_batch(inst: RelayTiming) -> int:
    # attrs makes every default before it runs a validator: check what this default reads first.
    _batch_size(inst, attrs.fields(RelayTiming).batch_size, inst.batch_size)
    return inst.batch_size


def _relay_batch_timeout(inst: RelayTiming) -> timedelta:
    # The windows' budgets plus half the lease grace: a batch of one window has no slack from rows
    # that ended early, so without it the claim's own round trip would leave the first (and only)
    # window short of a whole per-row budget, and the batch would be given back unsent.
    _budget(inst, attrs.fields(RelayTiming).lease_grace, inst.lease_grace)
    return one_step_batch_timeout(inst) + inst.lease_grace / 2


@attrs.frozen
class RelayTiming(OneStepLane):
    """The relay's timing: a publish budget and a mark budget per row, a batch, a lease.

    A batch is worked in windows of ``window`` rows, each window at most one per-row budget
    (every row of it starts its publish at once and must end within the publish budget, however
    long it waited for an earlier row of its key). So ``batch_timeout`` defaults to
    ``windows(batch_size) * per_row + lease_grace / 2`` (the half grace is the time between the
    claim's start and the first window's) and the claim lease is
    ``windows(batch_size) * per_row + lease_grace``: a relay that crashed mid-batch holds its rows
    (and, through the per-key claim order, the later rows of their keys) until then. With the
    defaults that is 70 s, inside JetStream's two-minute duplicate window.
    """

    #: The whole publish: connect if needed, send, and wait for the broker's acknowledgement.
    publish: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: The runtime's detached, fenced mark that records the publish's result.
    mark: timedelta = attrs.field(default=timedelta(seconds=5), validator=_budget)
    #: How many event rows one claim takes.
    batch_size: int = attrs.field(default=500, validator=_batch_size)
    #: How many rows are published at once (rows of one key still one after the other, in order)
    #: and recorded by one grouped mark before the next window starts. A crash repeats at most one
    #: window's publishes; the broker drops them by message id when they come back inside its
    #: duplicate window, the consumers' per-(event, kind) rows otherwise (ADR 0023). 1 is the
    #: strict relay: one publish and one committed mark at a time. Default: the whole batch.
    window: int = attrs.field(
        default=attrs.Factory(_whole_batch, takes_self=True), validator=_window
    )
    #: What the claim lease adds beyond the batch's work: claim-to-start delay and clock skew.
    lease_grace: timedelta = attrs.field(default=timedelta(seconds=60), validator=_budget)
    #: How long the relay may spend on one claimed batch.
    batch_timeout: timedelta = attrs.field(
        default=attrs.Factory(_relay_batch_timeout, takes_self=True)
    )

    STEP = "publish"


#: The relay's figures: 10 s per row (publish 5 s + mark 5 s), batch 500 in one window of 500,
#: batch timeout 40 s, claim lease 70 s.
DEFAULT_RELAY_TIMING: Final = RelayTiming()
