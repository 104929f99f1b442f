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

from outbox_core.timing_rules import OneStepLane, one_step_batch_timeout
from outbox_core.timing_rules import batch_size as _batch_size
from outbox_core.timing_rules import budget as _budget

__all__ = ["DEFAULT_RELAY_TIMING", "RelayTiming"]


@attrs.frozen
class RelayTiming(OneStepLane):
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
        default=attrs.Factory(one_step_batch_timeout, takes_self=True)
    )
    #: What the claim lease adds beyond the batch's work: claim-to-start delay and clock skew.
    lease_grace: timedelta = attrs.field(default=timedelta(seconds=60), validator=_budget)

    STEP = "publish"


#: The relay's figures: 10 s per row (publish 5 s + mark 5 s), batch 50, batch timeout 500 s,
#: claim lease 560 s.
DEFAULT_RELAY_TIMING: Final = RelayTiming()
