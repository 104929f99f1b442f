"""The one runtime every lane rides on: claim under a lease, send, let the core decide, mark.

Theory of operation
-------------------
A lane is this runtime driving one store (:class:`~outbox_core.ports.OutboxStore`) with a
lane-specific handler (:class:`~outbox_core.ports.RowHandler`) and a :class:`LaneConfig` (its
name, its timing — any :class:`~outbox_core.timing.LaneTiming` — and its backoff). E-mail, the
webhook retries, the event relay and each consumer channel differ only in those three; none has a
loop, a claim or a mark of its own.

=================  =========================================================================
module             what it does
=================  =========================================================================
``config``         :class:`LaneConfig`, checked whole at construction
``loop``           :class:`Worker`: claim, work the batch, pause; stop gracefully
``batch``          one batch: the row-start gates, the row deadline, decide, mark
``marking``        marks within their budget, surviving cancellation; releases
``leadership``     leader-gated lanes: the term, renewed between and during batches
``report``         :class:`BatchReport`, :class:`WorkerStats`
=================  =========================================================================

The core decides, the runtime reports: the row-start gate, the leadership gate, the row and step
deadlines (:mod:`outbox_core.lease`), the pause after an outage (:mod:`outbox_core.backoff`), the
classification and the state change (:func:`outbox_core.decide.decide`) are core functions called
here, so the core's tests and mutants prove the code that runs.

A handler that raises is that row's failure (``InvalidMessage`` → permanent, anything else →
transient) and never strands the rest of the batch. A row whose stored payload the store could not
decode fails permanently without reaching the handler. A mark that fails for a reason other than a
store outage is given up (logged and counted): the lease brings the row back. A row whose send is
cut off by the batch timeout is left alone: it keeps its lease and is claimed again after it
(docs/reliability.md, cancellation mid-send).

When a claim finds less than a full batch the worker sleeps for the poll interval; given a
:class:`~outbox_adapters.wakeup.Wakeup` (LISTEN/NOTIFY) it wakes as soon as new work is signalled.
Polling stays the correctness path: a lost signal only delays a row until the next poll.

The loop is the same over the in-memory fakes and over PostgreSQL/SMTP; the tests run both.
"""

from outbox_adapters.runtime.config import LaneConfig
from outbox_adapters.runtime.loop import Worker
from outbox_adapters.runtime.marking import run_detached, run_surviving_cancel
from outbox_adapters.runtime.report import BatchReport, WorkerStats

__all__ = [
    "BatchReport",
    "LaneConfig",
    "Worker",
    "WorkerStats",
    "run_detached",
    "run_surviving_cancel",
]
